/*
 * live_heap.c - the live heap (see live_heap.h).
 *
 * live_heap_track, live_heap_retrack (and the header's live_heap_untrack) are
 * async-signal-safe: lock-free table and trie, memory from regions mapped in normal
 * context. The rest runs in normal context.
 */
#include "agent/alloc/live_heap.h"

#include "agent/store/region.h"
#include "agent/store/trie.h"
#include "agent/unwind/unwind.h"

struct live_table live_heap_table;
/* Relaxed: set at start-up before any hook can run. */
_Atomic bool live_heap_enabled;

static struct region stack_region;
static struct region_map stack_map;
static struct stack_trie stacks;
static _Atomic uint64_t stacks_refused;

/* The store's first chunk: a few hundred stacks. */
#define STACKS_FIRST_CHUNK ((size_t)64 << 10)

int live_heap_init(size_t table_bytes)
{
	int rc = live_table_init(&live_heap_table, table_bytes);
	if (rc < 0)
		return rc;
	rc = region_init_kept(&stack_region, &stack_map, LIVE_HEAP_STACKS_CEILING,
			      STACKS_FIRST_CHUNK);
	if (rc < 0) {
		live_table_destroy(&live_heap_table);
		return rc;
	}
	trie_init(&stacks, &stack_region);
	atomic_store_explicit(&live_heap_enabled, true, memory_order_relaxed);
	return 0;
}

bool live_heap_on(void)
{
	return atomic_load_explicit(&live_heap_enabled, memory_order_relaxed);
}

void live_heap_track(uintptr_t p, uint64_t size, uint64_t weight, int32_t tid, const uintptr_t *pcs,
		     uint32_t n)
{
	struct trie_node *node = trie_put(&stacks, PROFILE_HEAP, tid, pcs, n, NULL);
	if (!node) {
		atomic_fetch_add_explicit(&stacks_refused, 1, memory_order_relaxed);
		return;
	}
	/* A full table counts the refusal itself. */
	live_table_insert(&live_heap_table, p, (uint64_t)(uintptr_t)node, size, weight);
}

void live_heap_retrack(const struct live_table_entry *e)
{
	live_table_insert(&live_heap_table, e->addr, e->ref, e->size, e->weight);
}

/* The objects an entry stands for: its weight over its size (a sample of a block
 * smaller than the interval stands for several such blocks), at least one. */
static uint64_t objects_of(const struct live_table_entry *e)
{
	if (e->size == 0)
		return 1;
	uint64_t n = (e->weight + e->size / 2) / e->size;
	return n ? n : 1;
}

static void add_entry(const struct live_table_entry *e, void *arg)
{
	struct profile *p = arg;
	const struct trie_node *node = (const struct trie_node *)(uintptr_t)e->ref;
	const uint64_t values[PROFILE_VALUES_MAX] = {objects_of(e), e->weight};
	profiles_add_to(p, PROFILE_HEAP, node->tid, node->pcs, node->npcs, values);
}

void live_heap_add_to(struct profile *p)
{
	if (!live_heap_on())
		return;
	live_table_for_each(&live_heap_table, add_entry, p);
	/* The memory the live heap itself holds, in the profiler's share beside what the
	 * profiler's threads allocated (sampler_caller_begin). */
	struct live_heap_stats st;
	live_heap_get_stats(&st);
	const uintptr_t pc = PC_PROFILER;
	const uint64_t values[PROFILE_VALUES_MAX] = {0, live_heap_own_bytes(&st)};
	profiles_add_to(p, PROFILE_HEAP, 0, &pc, 1, values);
}

uint64_t live_heap_own_bytes(const struct live_heap_stats *st)
{
	return st->table.touched_bound + st->stack_bytes;
}

bool live_heap_room_wanted(void)
{
	return live_heap_on() && region_wants_room(&stack_region);
}

void live_heap_grow(void)
{
	if (live_heap_on())
		region_grow(&stack_region);
}

void live_heap_after_fork_child(void)
{
	if (live_heap_on())
		region_after_fork_kept(&stack_region);
}

void live_heap_get_stats(struct live_heap_stats *out)
{
	*out = (struct live_heap_stats){0};
	if (!live_heap_on())
		return;
	live_table_stats(&live_heap_table, &out->table);
	out->stacks = trie_count(&stacks);
	out->stack_bytes = region_mapped(&stack_region);
	out->stacks_refused = atomic_load_explicit(&stacks_refused, memory_order_relaxed);
}
