/*
 * ratelimit.h - at most one warning per kind per interval.
 *
 * Owns: the memory of when a warning of each kind was last printed and how many were
 * held back since. An intake that is down for an hour costs 60 lines, not one per
 * attempt; the line printed after a quiet spell says how many were suppressed.
 * Context: one owner thread (the uploader); no locking. Pure: time is passed in, so
 * the unit tests need no clock.
 */
#ifndef DDPROF_UPLOADER_RATELIMIT_H
#define DDPROF_UPLOADER_RATELIMIT_H

#include <stdbool.h>
#include <stdint.h>

#define RATELIMIT_KINDS 8
/* "At most one warning per failure kind per minute". */
#define RATELIMIT_DEFAULT_INTERVAL_NS (60ULL * 1000000000ULL)

struct ratelimit {
	uint64_t interval_ns;
	uint64_t last_ns[RATELIMIT_KINDS];    /* when kind was last allowed */
	uint64_t suppressed[RATELIMIT_KINDS]; /* refused since then */
	bool seen[RATELIMIT_KINDS];	      /* allowed at least once */
};

void ratelimit_init(struct ratelimit *rl, uint64_t interval_ns);

/*
 * True when a warning of kind (< RATELIMIT_KINDS) may be printed at now_ns: the first
 * one, then one per interval. On true, *suppressed (may be NULL) gets the number of
 * warnings of that kind refused since the last one allowed. Kinds out of range share
 * the last slot.
 */
bool ratelimit_allow(struct ratelimit *rl, unsigned kind, uint64_t now_ns, uint64_t *suppressed);

#endif
