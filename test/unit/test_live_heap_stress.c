/*
 * test_live_heap_stress.c - the live heap (agent/alloc/live_heap.c) under 16 threads
 * while profiles swap (also built under ThreadSanitizer: make tsan).
 *
 * What the profiler relies on: whatever the threads do between two swaps, the heap
 * profile of a swap holds exactly the sampled allocations still alive at that moment,
 * each with the stack that allocated it, however many swaps ago, and nothing freed.
 * 16 threads allocate real blocks with malloc, track them at one of four stacks of their
 * own, and hand each to another thread, which untracks it and frees it (cross-thread
 * frees, addresses reused by the allocator). The truth is kept per stack by the threads
 * themselves. Every 100 ms the main thread pauses them between two operations, swaps,
 * and checks the swapped-out profile against the truth, stack by stack, bytes and
 * objects; between those, it swaps every 10 ms without a pause (the walk races the
 * threads) and compacts the stack stores every 20 ms (the references move from one
 * store to the other under the threads' tracks and frees). Every free finds its block
 * tracked; nothing overflows.
 */
#include "agent/alloc/live_heap.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/unwind/unwind.h"
#include "test/unit/check_run.h"

#define THREADS 16
#define SITES 4
#define INBOX 64
#define EXACT_CHECKS 12
/* Weights: three times the block's size, so each block stands for 3 objects. */
#define WEIGHT_FACTOR 3

struct inbox {
	pthread_mutex_t lock;
	uintptr_t items[INBOX];
	size_t n;
};

static struct inbox inboxes[THREADS];
static struct profile_pair pp;
/* Per stack (thread, site): live bytes and objects as the threads know them. Relaxed:
 * read only while every thread is paused (the pause's seq_cst handshake orders them). */
static _Atomic uint64_t truth_bytes[THREADS][SITES], truth_objects[THREADS][SITES];
static _Atomic int pause_req, paused, stop;
static _Atomic uint64_t lost_frees, tracked_total;

static uintptr_t leaf_of(int thread, int site)
{
	return 0x10000 + (uintptr_t)thread * 0x100 + (uintptr_t)site;
}

static void untrack_and_free(int self, uintptr_t p)
{
	struct live_table_entry e;
	(void)self;
	if (!live_heap_untrack(p, &e)) {
		atomic_fetch_add(&lost_frees, 1);
	} else {
		/* Who allocated it at which site: in the block itself (its stack reference
		 * is the live heap's, moved by compactions). */
		const unsigned char *tag = (const unsigned char *)p;
		int t = tag[0], s = tag[1];
		atomic_fetch_sub_explicit(&truth_bytes[t][s], e.weight, memory_order_relaxed);
		atomic_fetch_sub_explicit(&truth_objects[t][s], WEIGHT_FACTOR,
					  memory_order_relaxed);
	}
	free((void *)p);
}

static void drain(int self)
{
	uintptr_t items[INBOX];
	pthread_mutex_lock(&inboxes[self].lock);
	size_t n = inboxes[self].n;
	memcpy(items, inboxes[self].items, n * sizeof(items[0]));
	inboxes[self].n = 0;
	pthread_mutex_unlock(&inboxes[self].lock);
	for (size_t i = 0; i < n; i++)
		untrack_and_free(self, items[i]);
}

static void wait_if_paused(void)
{
	if (!atomic_load(&pause_req))
		return;
	atomic_fetch_add(&paused, 1);
	while (atomic_load(&pause_req))
		sched_yield();
	atomic_fetch_sub(&paused, 1);
}

static void *worker(void *arg)
{
	int self = (int)(intptr_t)arg;
	unsigned seed = 1234u + (unsigned)self;
	while (!atomic_load(&stop)) {
		wait_if_paused();
		drain(self);
		int site = rand_r(&seed) % SITES;
		size_t size = 16 + (size_t)(rand_r(&seed) % 4096);
		unsigned char *p = malloc(size);
		ck_assert_ptr_nonnull(p);
		p[0] = (unsigned char)self;
		p[1] = (unsigned char)site;
		const uintptr_t pcs[] = {leaf_of(self, site), 0x7777, 0x8888};
		live_heap_track((uintptr_t)p, size, size * WEIGHT_FACTOR, self + 1, pcs, 3);
		atomic_fetch_add_explicit(&truth_bytes[self][site], size * WEIGHT_FACTOR,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&truth_objects[self][site], WEIGHT_FACTOR,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&tracked_total, 1, memory_order_relaxed);
		/* Freed by another thread, or by this one when that inbox is full. */
		int to = (self + 1 + rand_r(&seed) % (THREADS - 1)) % THREADS;
		pthread_mutex_lock(&inboxes[to].lock);
		bool sent = inboxes[to].n < INBOX;
		if (sent)
			inboxes[to].items[inboxes[to].n++] = (uintptr_t)p;
		pthread_mutex_unlock(&inboxes[to].lock);
		if (!sent)
			untrack_and_free(self, (uintptr_t)p);
	}
	/* Counted as paused from here on: it does nothing more. */
	atomic_fetch_add(&paused, 1);
	return NULL;
}

struct seen {
	uint64_t bytes[THREADS][SITES], objects[THREADS][SITES];
	uint64_t profiler_bytes, other;
};

static void visit(const struct trie_node *n, void *arg)
{
	struct seen *s = arg;
	if (n->kind != PROFILE_HEAP)
		return;
	uint64_t objects = atomic_load(&n->values[0]), bytes = atomic_load(&n->values[1]);
	if (n->npcs == 1 && n->pcs[0] == PC_PROFILER) {
		s->profiler_bytes += bytes;
		return;
	}
	uintptr_t leaf = n->npcs == 3 ? n->pcs[0] : 0;
	int t = (int)((leaf - 0x10000) >> 8), site = (int)(leaf & 0xff);
	if (leaf < 0x10000 || t >= THREADS || site >= SITES || n->tid != t + 1 ||
	    n->pcs[1] != 0x7777) {
		s->other++;
		return;
	}
	s->bytes[t][site] += bytes;
	s->objects[t][site] += objects;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* One swap: the swapped-out profile with the live heap added, walked into *s. */
static void swap_and_walk(struct seen *s)
{
	struct profile *p = profiles_swap(&pp, now_ns());
	live_heap_add_to(p);
	memset(s, 0, sizeof(*s));
	trie_foreach(&p->trie, visit, s);
	profiles_reset(p);
}

START_TEST(test_sixteen_threads_freeing_across_threads_swaps_hold_the_exact_live_set)
{
	ck_assert_int_eq(profiles_init(&pp, 32 << 20, now_ns()), 0);
	ck_assert_int_eq(live_heap_init(4 << 20), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_mutex_init(&inboxes[i].lock, NULL);
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i), 0);
	uint64_t live_seen_max = 0;
	for (int check = 0; check < EXACT_CHECKS; check++) {
		struct seen s;
		for (int k = 0; k < 9; k++) { /* unpaused: the walk races the threads */
			sleep_ms(10);
			swap_and_walk(&s);
			ck_assert_uint_eq(s.other, 0);
			/* A compaction of the stack stores every other swap, as the host
			 * thread would make it: polled until the tracks in flight left. */
			if (k % 2 == 0)
				while (live_heap_maintain(now_ns(), true) != UINT64_MAX)
					sched_yield();
		}
		sleep_ms(10);
		atomic_store(&pause_req, 1);
		while (atomic_load(&paused) < THREADS)
			sched_yield();
		swap_and_walk(&s);
		uint64_t live = 0;
		for (int t = 0; t < THREADS; t++)
			for (int site = 0; site < SITES; site++) {
				uint64_t want = atomic_load_explicit(&truth_bytes[t][site],
								     memory_order_relaxed);
				ck_assert_msg(s.bytes[t][site] == want,
					      "check %d, thread %d site %d: %llu bytes, truth %llu",
					      check, t, site, (unsigned long long)s.bytes[t][site],
					      (unsigned long long)want);
				ck_assert_uint_eq(s.objects[t][site],
						  atomic_load_explicit(&truth_objects[t][site],
								       memory_order_relaxed));
				live += want;
			}
		ck_assert_uint_eq(s.other, 0);
		ck_assert_uint_gt(s.profiler_bytes, 0);
		live_seen_max = live > live_seen_max ? live : live_seen_max;
		atomic_store(&pause_req, 0);
		while (atomic_load(&paused) > 0)
			sched_yield();
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < THREADS; i++)
		drain(i);
	struct seen s;
	swap_and_walk(&s);
	for (int t = 0; t < THREADS; t++)
		for (int site = 0; site < SITES; site++)
			ck_assert_uint_eq(s.bytes[t][site], 0);
	struct live_heap_stats st;
	live_heap_get_stats(&st);
	ck_assert_uint_eq(atomic_load(&lost_frees), 0);
	ck_assert_uint_eq(st.table.overflows, 0);
	ck_assert_uint_eq(st.table.entries, 0);
	/* Compactions moved the stacks still referenced each time: the store holds
	 * only this run's stacks, in one store or both (the last compaction's old one
	 * emptied). */
	ck_assert_uint_ge(st.compactions, EXACT_CHECKS * 4);
	ck_assert_uint_le(st.stacks, THREADS * SITES);
	ck_assert_uint_eq(st.retracks_dropped, 0);
	/* The checks saw a live set, not an empty heap. */
	ck_assert_uint_gt(live_seen_max, 0);
	ck_assert_uint_gt(atomic_load(&tracked_total), 10000);
	profiles_destroy(&pp);
}
END_TEST

static Suite *live_heap_stress_suite(void)
{
	Suite *s = suite_create("live_heap_stress");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc,
		       test_sixteen_threads_freeing_across_threads_swaps_hold_the_exact_live_set);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(live_heap_stress_suite());
}
