/*
 * module_map.c - the published module map and its grace period (see module_map.h).
 *
 * This file is async-signal-safe in module_map_enter, module_map_exit and module_map_find
 * (C11 atomics and a binary search; nothing else is called). The writer-side functions
 * below them only exchange a pointer or poll the grace counters; they never run in a
 * handler.
 */
#include "agent/unwind/module_map.h"
#include "agent/sample/fork_local.h"

#include <stdatomic.h>

#include "agent/store/grace.h"

static struct module_map empty_map;
static _Atomic(struct module_map *) cur_map = &empty_map;
/* On the fork-local page when module_map_place_grace found room: handlers write the
 * reader counts at every sample, and there the parent takes no copy-on-write fault
 * after a fork; a fork child finds them zero, which is right (no reader in it). */
static struct grace map_grace_fallback;
FORK_CHILD_DATA static struct grace *map_grace = &map_grace_fallback; /* a fork child reads it */

void module_map_place_grace(void)
{
	map_grace = fork_local_or(&map_grace_fallback, sizeof(*map_grace));
}

/* async-signal-safe */
const struct module_map *module_map_enter(unsigned *slot)
{
	*slot = grace_enter(map_grace);
	/* Acquire pairs with module_map_publish's release exchange: the entries and tables
	 * of the map are fully written before we read them. */
	return atomic_load_explicit(&cur_map, memory_order_acquire);
}

/* async-signal-safe */
void module_map_exit(unsigned slot)
{
	grace_exit(map_grace, slot);
}

/* async-signal-safe */
const struct module_entry *module_map_find(const struct module_map *m, uintptr_t pc)
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct module_entry *e = &m->e[mid];
		if (pc < e->start)
			hi = mid;
		else if (pc >= e->end)
			lo = mid + 1;
		else
			return e;
	}
	return NULL;
}

struct module_map *module_map_publish(struct module_map *m)
{
	/* Release pairs with module_map_enter's acquire load. */
	struct module_map *old = atomic_exchange_explicit(&cur_map, m, memory_order_release);
	return old == &empty_map ? NULL : old;
}

bool module_map_grace_wait(uint64_t timeout_ns)
{
	return grace_wait(map_grace, timeout_ns);
}

FORK_CHILD_PATH const struct module_map *module_map_current(void)
{
	/* Acquire pairs with the release in module_map_publish (any writer thread). */
	return atomic_load_explicit(&cur_map, memory_order_acquire);
}

FORK_CHILD_PATH void module_map_after_fork(void)
{
	if (!fork_local_owns(map_grace)) /* else zero-filled already */
		grace_reset(map_grace);
}
