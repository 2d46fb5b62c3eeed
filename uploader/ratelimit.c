/*
 * ratelimit.c - at most one warning per kind per interval (see ratelimit.h).
 *
 * Context: the owner thread only (the uploader); plain fields, no atomics.
 */
#include "uploader/ratelimit.h"

#include <string.h>

void ratelimit_init(struct ratelimit *rl, uint64_t interval_ns)
{
	memset(rl, 0, sizeof(*rl));
	rl->interval_ns = interval_ns;
}

bool ratelimit_allow(struct ratelimit *rl, unsigned kind, uint64_t now_ns, uint64_t *suppressed)
{
	if (kind >= RATELIMIT_KINDS)
		kind = RATELIMIT_KINDS - 1;
	/* A clock that went backwards (it should not: callers pass CLOCK_MONOTONIC) counts
	 * as "interval not over" rather than wrapping around. */
	if (rl->seen[kind] &&
	    (now_ns < rl->last_ns[kind] || now_ns - rl->last_ns[kind] < rl->interval_ns)) {
		rl->suppressed[kind]++;
		return false;
	}
	if (suppressed)
		*suppressed = rl->suppressed[kind];
	rl->seen[kind] = true;
	rl->last_ns[kind] = now_ns;
	rl->suppressed[kind] = 0;
	return true;
}
