/*
 * stack_ranges.c - the published stack-range snapshot and its lookup (see
 * stack_ranges.h).
 *
 * This file is async-signal-safe in stack_ranges_lookup: a binary search over a
 * static, immutable-once-published array (C11 atomics only, no calls). The two writer
 * functions only pick a buffer and store a pointer.
 */
#include "agent/unwind/stack_ranges.h"

#include <stdatomic.h>

static struct range_set range_sets[2];
static _Atomic(struct range_set *) published;

struct range_set *stack_ranges_unpublished(void)
{
	struct range_set *cur = atomic_load_explicit(&published, memory_order_relaxed);
	return cur == &range_sets[0] ? &range_sets[1] : &range_sets[0];
}

void stack_ranges_publish(struct range_set *s)
{
	/* Release pairs with the acquire load in stack_ranges_lookup. A handler still
	 * reading the older buffer is safe until the snapshot after next: snapshots are
	 * taken at most once per upload period, handlers last microseconds. */
	atomic_store_explicit(&published, s, memory_order_release);
}

/* async-signal-safe */
bool stack_ranges_lookup(uintptr_t sp, struct stack_range *out)
{
	/* Acquire pairs with the release store in stack_ranges_publish. */
	const struct range_set *s = atomic_load_explicit(&published, memory_order_acquire);
	if (!s)
		return false;
	uint32_t lo = 0, hi = s->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (sp < s->r[mid].lo)
			hi = mid;
		else if (sp >= s->r[mid].hi)
			lo = mid + 1;
		else {
			*out = s->r[mid];
			return true;
		}
	}
	return false;
}
