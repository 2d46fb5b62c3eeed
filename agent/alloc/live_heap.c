/*
 * live_heap.c - the live heap (see live_heap.h).
 *
 * live_heap_track, live_heap_retrack (and the header's live_heap_untrack) are
 * async-signal-safe: lock-free table and trie, memory from regions mapped in normal
 * context. The rest runs in normal context.
 */
#include "agent/alloc/live_heap.h"

#include <stdalign.h>

#include "agent/store/region.h"
#include "common/clock.h"
#include "agent/store/trie.h"
#include "agent/unwind/unwind.h"

struct live_table live_heap_table;
/* Relaxed: set at start-up before any hook can run. */
_Atomic bool live_heap_enabled;

/*
 * The stacks, in two stores, one current. A tracked allocation's reference (the table
 * entry's ref) is its stack node's address in the low 48 bits and the epoch of the
 * store it lives in above: stores[epoch & 1] while the current epoch is that one.
 * Compaction (the host thread, live_heap_maintain) moves the stacks still referenced to
 * the other store and empties the old one:
 *  1. the epoch advances: new tracks go to the other store (emptied at the last
 *     compaction);
 *  2. once no track or retrack is inside the old store any more (its trackers count:
 *     entered and checked as profiles_add enters a profile), every table entry that
 *     references it gets its stack copied into the new store and its ref swapped for
 *     the copy's (a CAS: an entry freed meanwhile keeps what it had, harmlessly);
 *  3. the old store is reset.
 * Step 2 waits for no one: the host polls the count, a few ms at most. A reference held
 * across a realloc (untracked, then tracked again when the realloc failed) from an
 * older epoch is not tracked again (counted): its stack may be gone.
 */
struct store {
	struct region region;
	struct region_map map;
	struct stack_trie trie;
	/* Tracks and retracks inside this store now: its own cache line, written by
	 * every sampled allocation. */
	alignas(64) _Atomic uint32_t trackers;
};
static struct store stores[2];
/* The current epoch (16 bits used). seq_cst: the Dekker pair with trackers. */
static _Atomic uint32_t epoch;
static _Atomic uint64_t stacks_refused, retracks_dropped, compactions;

#define REF_ADDR_BITS 48
#define REF_ADDR_MASK ((UINT64_C(1) << REF_ADDR_BITS) - 1)
#define EPOCH_MASK 0xffffu

/* The host thread's compaction state: the epoch being drained (old store), or none. */
static bool draining;
static uint32_t drain_epoch;
/* Bytes of the current store past which it is compacted: half way from what the last
 * compaction kept to the ceiling. */
static size_t compact_at = LIVE_HEAP_STACKS_CEILING / 2;
/* The current store's bytes at the host's last look (written by the host thread,
 * relaxed: a hint others poll), and when it last grew (CLOCK_MONOTONIC, the host's). */
static _Atomic size_t used_seen;
static uint64_t grew_ns;

/* Each store's first chunk: about a thousand stacks. */
#define STACKS_FIRST_CHUNK ((size_t)256 << 10)

static uint64_t ref_of(uint32_t e, const struct trie_node *node)
{
	return (uint64_t)(e & EPOCH_MASK) << REF_ADDR_BITS | ((uintptr_t)node & REF_ADDR_MASK);
}

static uint32_t ref_epoch(uint64_t ref)
{
	return (uint32_t)(ref >> REF_ADDR_BITS);
}

static const struct trie_node *ref_node(uint64_t ref)
{
	return (const struct trie_node *)(uintptr_t)(ref & REF_ADDR_MASK);
}

/* Not before the process has run this long with the table: mapping the whole budget
 * (8 MiB by default: 2048 zeroed pages, several ms of CPU) is worth it for a process
 * that lives, not for a compiler or a shell command that ends within a second, whose
 * few sampled inserts take a fault each (about a microsecond, on a path that unwinds
 * the stack anyway). */
#define POPULATE_AFTER_NS (1000ULL * 1000 * 1000)

/* CLOCK_MONOTONIC ns from which the host maps the table ahead (live_heap_init). */
static _Atomic uint64_t populate_from_ns;

int live_heap_init(size_t table_bytes)
{
	int rc = live_table_init(&live_heap_table, table_bytes);
	if (rc < 0)
		return rc;
	for (int i = 0; i < 2; i++) {
		rc = region_init_kept(&stores[i].region, &stores[i].map, LIVE_HEAP_STACKS_CEILING,
				      STACKS_FIRST_CHUNK);
		if (rc < 0) {
			if (i == 1)
				region_destroy(&stores[0].region);
			live_table_destroy(&live_heap_table);
			return rc;
		}
		trie_init(&stores[i].trie, &stores[i].region);
	}
	atomic_store_explicit(&populate_from_ns, clock_now_ns(CLOCK_MONOTONIC) + POPULATE_AFTER_NS,
			      memory_order_relaxed);
	atomic_store_explicit(&live_heap_enabled, true, memory_order_relaxed);
	return 0;
}

bool live_heap_on(void)
{
	return atomic_load_explicit(&live_heap_enabled, memory_order_relaxed);
}

/* async-signal-safe. Enters the current store; returns the epoch entered. */
static uint32_t enter(void)
{
	for (;;) {
		/* seq_cst (all four accesses): pairs with the epoch's advance and the
		 * trackers poll in live_heap_maintain, as profiles_add with a swap. */
		uint32_t e = atomic_load_explicit(&epoch, memory_order_seq_cst);
		struct store *st = &stores[e & 1];
		atomic_fetch_add_explicit(&st->trackers, 1, memory_order_seq_cst);
		if (atomic_load_explicit(&epoch, memory_order_seq_cst) == e)
			return e;
		atomic_fetch_sub_explicit(&st->trackers, 1, memory_order_release);
	}
}

/* async-signal-safe */
static void leave(uint32_t e)
{
	/* Release: the node and the entry written inside happen-before the compactor's
	 * acquire read of trackers == 0. */
	atomic_fetch_sub_explicit(&stores[e & 1].trackers, 1, memory_order_release);
}

void live_heap_track(uintptr_t p, uint64_t size, uint64_t weight, int32_t tid, const uintptr_t *pcs,
		     uint32_t n)
{
	uint32_t e = enter();
	struct trie_node *node = trie_put(&stores[e & 1].trie, PROFILE_HEAP, tid, pcs, n, NULL);
	/* A node past 48 bits cannot be referenced (mmap places none there unasked). */
	if (!node || ((uintptr_t)node & ~REF_ADDR_MASK)) {
		atomic_fetch_add_explicit(&stacks_refused, 1, memory_order_relaxed);
	} else {
		/* A full table counts the refusal itself. */
		live_table_insert(&live_heap_table, p, ref_of(e, node), size, weight);
	}
	leave(e);
}

void live_heap_retrack(const struct live_table_entry *en)
{
	uint32_t e = enter();
	if (ref_epoch(en->ref) == (e & EPOCH_MASK))
		live_table_insert(&live_heap_table, en->addr, en->ref, en->size, en->weight);
	else
		atomic_fetch_add_explicit(&retracks_dropped, 1, memory_order_relaxed);
	leave(e);
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
	const struct trie_node *node = ref_node(e->ref);
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
	if (!live_heap_on())
		return false;
	struct store *st = &stores[atomic_load_explicit(&epoch, memory_order_relaxed) & 1];
	size_t used = region_used(&st->region);
	return region_wants_room(&st->region) || draining || used > compact_at ||
	       used != atomic_load_explicit(&used_seen, memory_order_relaxed);
}

bool live_heap_tracking(void)
{
	return live_heap_on() &&
	       atomic_load_explicit(&live_heap_table.entries, memory_order_relaxed) != 0;
}

void live_heap_grow(void)
{
	if (!live_heap_on())
		return;
	for (int i = 0; i < 2; i++)
		region_grow(&stores[i].region);
}

/* The host thread: an entry's stack, copied into the new store (its new ref), when it
 * lives in the old one. */
static uint64_t move_ref(const struct live_table_entry *en, void *arg)
{
	const uint32_t *epochs = arg; /* old, new */
	if (ref_epoch(en->ref) != (epochs[0] & EPOCH_MASK))
		return en->ref;
	const struct trie_node *n = ref_node(en->ref);
	struct store *to = &stores[epochs[1] & 1];
	struct trie_node *copy = trie_put(&to->trie, n->kind, n->tid, n->pcs, n->npcs, NULL);
	/* Normal context: the memory a handler could not map, this caller can. */
	if (!copy && region_grow(&to->region) == 0)
		copy = trie_put(&to->trie, n->kind, n->tid, n->pcs, n->npcs, NULL);
	return copy ? ref_of(epochs[1], copy) : en->ref;
}

/* A reference still into the old store after the move (a copy refused). */
static uint64_t find_old(const struct live_table_entry *en, void *arg)
{
	uint32_t *left = arg;
	if (ref_epoch(en->ref) == (*left & EPOCH_MASK))
		*left |= 1u << 31;
	return en->ref;
}

/* While the current store grows, the host looks again this soon (a signal handler or an
 * allocation hook cannot wake it): it maps memory ahead of the tracks, and compacts
 * before the ceiling. */
#define GROWING_POLL_NS (50ULL * 1000 * 1000)
/* How long the store must not grow before the host stops looking. */
#define GROWING_QUIET_NS (1000ULL * 1000 * 1000)

/* The table's pages are mapped ahead by the host thread, a step at a time with a pause
 * between (a step is a fraction of a millisecond), so that no application thread takes
 * a page fault for them: an insert lands on a page at random, and until every page
 * holds an entry nearly every insert would otherwise fault. */
#define POPULATE_STEP ((size_t)1 << 20)
#define POPULATE_PAUSE_NS (5ULL * 1000 * 1000)
bool live_heap_populate_wanted(void)
{
	return live_heap_on() &&
	       atomic_load_explicit(&live_heap_table.populated, memory_order_relaxed) <
		   live_heap_table.map_len &&
	       clock_now_ns(CLOCK_MONOTONIC) >=
		   atomic_load_explicit(&populate_from_ns, memory_order_relaxed);
}

static uint64_t maintain_stores(uint64_t now_ns, bool force);

uint64_t live_heap_maintain(uint64_t now_ns, bool force)
{
	if (!live_heap_on())
		return UINT64_MAX;
	uint64_t from = atomic_load_explicit(&populate_from_ns, memory_order_relaxed);
	uint64_t populate_due = UINT64_MAX;
	if (now_ns < from)
		populate_due = live_table_populated(&live_heap_table) ? UINT64_MAX : from;
	else if (live_table_populate(&live_heap_table, POPULATE_STEP))
		populate_due = now_ns + POPULATE_PAUSE_NS;
	uint64_t due = maintain_stores(now_ns, force);
	return due < populate_due ? due : populate_due;
}

static uint64_t maintain_stores(uint64_t now_ns, bool force)
{
	uint32_t cur = atomic_load_explicit(&epoch, memory_order_relaxed);
	if (!draining) {
		size_t used = region_used(&stores[cur & 1].region);
		if (!force && used <= compact_at) {
			/* Room for twice the growth since the last look, ahead. */
			size_t seen = atomic_load_explicit(&used_seen, memory_order_relaxed);
			if (used > seen) {
				region_reserve(&stores[cur & 1].region, used + 2 * (used - seen));
				grew_ns = now_ns;
			}
			atomic_store_explicit(&used_seen, used, memory_order_relaxed);
			return now_ns - grew_ns < GROWING_QUIET_NS ? now_ns + GROWING_POLL_NS
								   : UINT64_MAX;
		}
		/* The other store takes the tracks at the old one's pace from now on: as
		 * much memory as half the old one's, mapped before the first of them. */
		struct store *next = &stores[(cur + 1) & 1];
		region_reserve(&next->region, region_mapped(&stores[cur & 1].region) / 2);
		drain_epoch = cur;
		draining = true;
		/* seq_cst: pairs with enter()'s loads (see there). */
		atomic_store_explicit(&epoch, cur + 1, memory_order_seq_cst);
		cur++;
	}
	struct store *old = &stores[drain_epoch & 1];
	/* Acquire pairs with leave()'s release: what the last trackers wrote is seen. */
	if (atomic_load_explicit(&old->trackers, memory_order_acquire) != 0)
		return now_ns + 1000 * 1000; /* a track in flight: a few instructions */
	uint32_t epochs[2] = {drain_epoch, cur};
	live_table_rewrite_refs(&live_heap_table, move_ref, epochs);
	uint32_t left = drain_epoch;
	live_table_rewrite_refs(&live_heap_table, find_old, &left);
	if (left >> 31)
		return now_ns + 100ULL * 1000 * 1000; /* the new store is full: later */
	trie_reset(&old->trie);
	region_reset(&old->region);
	trie_init(&old->trie, &old->region);
	draining = false;
	size_t kept = region_used(&stores[cur & 1].region);
	atomic_store_explicit(&used_seen, kept, memory_order_relaxed);
	compact_at = kept + (LIVE_HEAP_STACKS_CEILING - kept) / 2;
	atomic_fetch_add_explicit(&compactions, 1, memory_order_relaxed);
	return UINT64_MAX;
}

void live_heap_after_fork_child(void)
{
	if (!live_heap_on())
		return;
	/* The child's only thread is not inside a track (fork is not called from a
	 * hook); the parent's threads that were are not here to leave. A compaction the
	 * parent's host thread was in goes on in the child's (its state is a copy). */
	for (int i = 0; i < 2; i++) {
		region_after_fork_kept(&stores[i].region);
		atomic_store_explicit(&stores[i].trackers, 0, memory_order_relaxed);
	}
}

void live_heap_get_stats(struct live_heap_stats *out)
{
	*out = (struct live_heap_stats){0};
	if (!live_heap_on())
		return;
	live_table_stats(&live_heap_table, &out->table);
	for (int i = 0; i < 2; i++) {
		out->stacks += trie_count(&stores[i].trie);
		out->stack_bytes += region_mapped(&stores[i].region);
	}
	out->stacks_refused = atomic_load_explicit(&stacks_refused, memory_order_relaxed);
	out->retracks_dropped = atomic_load_explicit(&retracks_dropped, memory_order_relaxed);
	out->compactions = atomic_load_explicit(&compactions, memory_order_relaxed);
}
