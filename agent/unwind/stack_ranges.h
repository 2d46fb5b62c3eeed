/*
 * stack_ranges.h - the published snapshot of writable mappings that stack_ranges_lookup
 * searches: stack_bounds.c writes it, the signal handler searches it.
 *
 * Owns: a double buffer of sorted ranges. The snapshot is written into the unused half
 * and published with one release store, so a handler always sees a whole snapshot.
 * Context: stack_ranges_lookup is async-signal-safe; unpublished and publish run in
 * normal context, one writer at a time.
 */
#ifndef DDPROF_AGENT_STACK_RANGES_H
#define DDPROF_AGENT_STACK_RANGES_H

#include <stdint.h>

#include "agent/unwind/stack_bounds.h"

/* Most processes have a few hundred mappings; past this the rest are not searched
 * (their threads' samples keep only the leaf frame). */
#define STACK_RANGES_MAX 4096

struct range_set {
	uint32_t n;
	struct stack_range r[STACK_RANGES_MAX]; /* sorted by lo */
};

/* async-signal-safe. The snapshot range containing sp. */
bool stack_ranges_lookup(uintptr_t sp, struct stack_range *out);

/* The half of the double buffer handlers are not reading. */
struct range_set *stack_ranges_unpublished(void);

/* Makes s the snapshot handlers search. */
void stack_ranges_publish(struct range_set *s);

#endif
