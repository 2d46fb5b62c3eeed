/*
 * live_heap.h - the live heap: sampled allocations still alive, with their stacks, from
 * one period to the next.
 *
 * Owns: the table of sampled allocations by address (agent/alloc/live_table.h) and the
 * stores of their stacks: tries (agent/store/trie.h) in regions of their own that no swap
 * resets, so an allocation's stack stays valid however many periods ago it was made
 * (the table's reference to it: 64 bits, the store's epoch and the node's address).
 * Each snapshot adds what is alive to the profile swapped out (live_heap_add_to:
 * inuse-objects, inuse-space), with no reset. A fork child inherits all of it as copies
 * at the same addresses: its heap is its parent's, so what it inherited alive is in its
 * own heap profile.
 *  - Stacks of allocations since freed stay in the current store until it fills half
 *    way from what the last compaction kept to its ceiling; then the host thread
 *    compacts (live_heap_maintain): the stacks still referenced move to the other
 *    store, with no lock and no wait on the allocating threads, and the old store is
 *    emptied. Past the ceiling new stacks are refused (counted: not tracked).
 * Context: track and untrack are async-signal-safe (the allocation hooks); the rest runs
 * in normal context (start-up, the host thread, fork handlers).
 */
#ifndef DDPROF_AGENT_ALLOC_LIVE_HEAP_H
#define DDPROF_AGENT_ALLOC_LIVE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/alloc/live_table.h"
#include "agent/store/profiles.h"

/* Each stack store's ceiling: tens of thousands of distinct stacks. */
#define LIVE_HEAP_STACKS_CEILING ((size_t)16 << 20)

/* Start-up: maps the table (table_bytes) and the stack store. 0 or a negative errno. */
int live_heap_init(size_t table_bytes);
bool live_heap_on(void);

/* async-signal-safe. Tracks the sampled allocation p (size bytes, weighing weight) made
 * by tid at pcs[0..n). After the real allocation returned p. */
void live_heap_track(uintptr_t p, uint64_t size, uint64_t weight, int32_t tid, const uintptr_t *pcs,
		     uint32_t n);
/* async-signal-safe. p is about to be freed: forgets it if tracked (its entry copied to
 * out when out is not NULL). One load for an address that is not tracked. */
static inline bool live_heap_untrack(uintptr_t p, struct live_table_entry *out);
/* async-signal-safe. An entry untracked for a realloc that failed: tracked again. */
void live_heap_retrack(const struct live_table_entry *e);

/* The host thread, on the snapshot's profile (quiescent after the swap): adds every live
 * allocation to it as PROFILE_HEAP samples of its stack (inuse-objects: the objects its
 * weight stands for; inuse-space: its weight), and the live heap's own memory
 * (live_heap_own_bytes) as inuse-space of the frame PC_PROFILER. */
void live_heap_add_to(struct profile *p);

/* The host thread: whether the stack stores asked for memory or want a compaction,
 * mapping memory, and compacting (when the current store is past its mark, or always
 * with force). live_heap_maintain returns when it wants to run again (CLOCK_MONOTONIC
 * ns; UINT64_MAX: when room_wanted says so): a compaction waits for the tracks in
 * flight in the old store to leave, without blocking. */
bool live_heap_room_wanted(void);
/* Host thread: the table's pages are not all mapped yet and the process has run a
 * second with it (live_heap_maintain maps them, a step at a time; never the
 * application's calls; a short process never pays for it). */
bool live_heap_populate_wanted(void);
/* Whether any allocation is tracked now (any thread, a relaxed load). */
bool live_heap_tracking(void);
void live_heap_grow(void);
uint64_t live_heap_maintain(uint64_t now_ns, bool force);

/* Fork child handler: the copies stay; a grow in flight at the fork is forgotten. */
void live_heap_after_fork_child(void);

struct live_heap_stats {
	struct live_table_stats table;
	uint64_t stacks;	   /* distinct stacks stored */
	uint64_t stack_bytes;	   /* of the store */
	uint64_t stacks_refused;   /* samples not tracked: the store was full */
	uint64_t retracks_dropped; /* blocks of a failed realloc not tracked again: their
				    * stack was compacted away meanwhile */
	uint64_t compactions;	   /* of the stack stores */
};
void live_heap_get_stats(struct live_heap_stats *out);
/* The memory the live heap holds: the table's pages written (at most) and the stack
 * store's mapped chunks. */
uint64_t live_heap_own_bytes(const struct live_heap_stats *st);

/* The table, for live_heap_untrack's inline fast path. */
extern struct live_table live_heap_table;
extern _Atomic bool live_heap_enabled;

static inline bool live_heap_untrack(uintptr_t p, struct live_table_entry *out)
{
	if (!atomic_load_explicit(&live_heap_enabled, memory_order_relaxed))
		return false;
	return live_table_remove(&live_heap_table, p, out);
}

#endif
