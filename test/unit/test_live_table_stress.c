/*
 * test_live_table_stress.c - the live table (agent/alloc/live_table.c) under many
 * threads (test_live_table_signals.c: under signal handlers).
 *
 * Each test keeps a truth of what the table must hold, owned by whoever owns the address
 * at the moment (handed over under a mutex, as an allocator orders a free before the
 * malloc that returns the same address), and ends with the table holding exactly that,
 * entry by entry (address, ref, size, weight), while the walker (live_table_walker.h)
 * reads it every few milliseconds.
 *  - cross-thread frees: 16 threads allocating real blocks with malloc, half of them
 *    inserted after malloc, half of them freed by another thread, removed before free;
 *  - address reuse: 8 threads sharing 256 addresses through a pool (the allocator), so
 *    that an address removed on one thread is inserted again on another, most often in
 *    the same slot; one free in 64 skips the remove (a free we did not hook), so that the
 *    next insert of that address must replace the stale entry;
 *  - torn reads: walks without pause while two threads rewrite 16 entries of a small
 *    table (replaced in place, or removed and inserted again).
 */
#include "agent/alloc/live_table.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "test/unit/check_run.h"
#include "test/unit/live_table_checks.h"
#include "test/unit/live_table_walker.h"

#define KIB ((size_t)1 << 10)
#ifdef DDPROF_TSAN
#define SCALE 4 /* TSan is ~10x slower: shrink iteration counts */
#else
#define SCALE 1
#endif

/* --- inboxes: blocks or addresses handed to another thread, under a mutex --- */

struct inbox {
	pthread_mutex_t lock;
	uintptr_t *items;
	size_t n, cap;
};

static void inbox_init(struct inbox *b, size_t cap)
{
	pthread_mutex_init(&b->lock, NULL);
	b->items = calloc(cap, sizeof(*b->items));
	b->cap = cap;
	b->n = 0;
}

/* false when full (the caller keeps the item). */
static bool inbox_push(struct inbox *b, uintptr_t item)
{
	pthread_mutex_lock(&b->lock);
	bool ok = b->n < b->cap;
	if (ok)
		b->items[b->n++] = item;
	pthread_mutex_unlock(&b->lock);
	return ok;
}

/* Takes everything: the count, the items copied to out (room for cap). */
static size_t inbox_take(struct inbox *b, uintptr_t *out)
{
	pthread_mutex_lock(&b->lock);
	size_t n = b->n;
	memcpy(out, b->items, n * sizeof(*out));
	b->n = 0;
	pthread_mutex_unlock(&b->lock);
	return n;
}

static void inbox_destroy(struct inbox *b)
{
	pthread_mutex_destroy(&b->lock);
	free(b->items);
}

/* --- cross-thread frees of real blocks --- */

#define CT_THREADS 16
#define CT_OPS (40000 / SCALE)
#define CT_KEEP 48   /* blocks a thread keeps alive at most */
#define CT_INBOX 512 /* blocks in flight to one thread at most */

/* At the start of every block: what its insert recorded. */
struct block {
	uint64_t ref, size;
	bool tracked;
};

struct ct_worker {
	pthread_t thread;
	unsigned id;
	struct live_table *t;
	struct ct_worker *all;
	const struct walker *walker;
	pthread_barrier_t *phase;
	struct inbox inbox;
	uintptr_t *taken; /* [CT_INBOX] */
	uintptr_t keep[CT_KEEP];
	size_t nkeep;
	uint64_t rng, ops, errors, inserted, refused, cross_frees, untracked_frees;
};

/* Removes the block from the table (before the real free, as the hook will), checks
 * what came back against what its insert recorded, frees it. */
static void ct_free(struct ct_worker *w, uintptr_t p)
{
	const struct block *b = (const struct block *)p;
	struct live_table_entry got;
	bool found = live_table_remove(w->t, p, &got);
	if (found != b->tracked || (found && (got.ref != b->ref || got.size != b->size ||
					      got.weight != payload_weight(p, b->ref, b->size))))
		w->errors++;
	w->untracked_frees += !found;
	free((void *)p);
}

static void ct_drain(struct ct_worker *w)
{
	size_t n = inbox_take(&w->inbox, w->taken);
	for (size_t i = 0; i < n; i++)
		ct_free(w, w->taken[i]);
}

static void *ct_main(void *arg)
{
	struct ct_worker *w = arg;
	pthread_barrier_wait(w->phase);
	uint64_t i;
	for (i = 0; i < CT_OPS || walker_busy(w->walker); i++) {
		uint64_t r = next_rand(&w->rng);
		size_t size = sizeof(struct block) + (r >> 20) % 1024;
		struct block *b = malloc(size);
		b->ref = ((uint64_t)w->id << 40) | i;
		b->size = size;
		b->tracked = false;
		/* Half the blocks tracked (the sampler's choice), after the real malloc. */
		if (r & 1) {
			b->tracked = live_table_insert(w->t, (uintptr_t)b, b->ref, size,
						       payload_weight((uintptr_t)b, b->ref, size));
			w->inserted += b->tracked;
			w->refused += !b->tracked;
		}
		switch ((r >> 1) % 4) {
		case 0:
		case 1: { /* half freed by another thread */
			unsigned to =
			    (w->id + 1 + (unsigned)((r >> 8) % (CT_THREADS - 1))) % CT_THREADS;
			if (inbox_push(&w->all[to].inbox, (uintptr_t)b)) {
				w->cross_frees++;
				break;
			}
			ct_free(w, (uintptr_t)b);
			break;
		}
		case 2: /* kept for a while, maybe to the end */
			if (w->nkeep == CT_KEEP) {
				size_t k = (r >> 12) % CT_KEEP;
				ct_free(w, w->keep[k]);
				w->keep[k] = (uintptr_t)b;
			} else {
				w->keep[w->nkeep++] = (uintptr_t)b;
			}
			break;
		default: /* freed at once */
			ct_free(w, (uintptr_t)b);
		}
		if (i % 8 == 0)
			ct_drain(w);
		/* Two cores for sixteen threads: take turns, or a thread would run its
		 * whole loop in one time slice while its receivers wait. */
		if (i % 256 == 0)
			sched_yield();
	}
	w->ops = i;
	/* Nothing is sent after this barrier: the last drain empties the inbox. */
	pthread_barrier_wait(w->phase);
	ct_drain(w);
	return NULL;
}

START_TEST(test_cross_thread_frees_leave_exactly_the_live_set)
{
	struct live_table t;
	/* 256 KiB: 7.9k slots for ~400 tracked kept blocks and up to 4k in flight (a
	 * thread that waits for a core finds hundreds in its inbox). */
	ck_assert_int_eq(live_table_init(&t, 256 * KIB), 0);
	static struct ct_worker w[CT_THREADS];
	static struct walker walker;
	pthread_barrier_t phase;
	pthread_barrier_init(&phase, NULL, CT_THREADS);
	walker_start(&walker, &t);
	for (unsigned i = 0; i < CT_THREADS; i++) {
		w[i] = (struct ct_worker){.id = i, .t = &t, .all = w, .phase = &phase};
		w[i].walker = &walker;
		w[i].rng = hash_mix64(i + 1);
		w[i].taken = calloc(CT_INBOX, sizeof(uintptr_t));
		inbox_init(&w[i].inbox, CT_INBOX);
	}
	for (unsigned i = 0; i < CT_THREADS; i++)
		ck_assert_int_eq(pthread_create(&w[i].thread, NULL, ct_main, &w[i]), 0);
	for (unsigned i = 0; i < CT_THREADS; i++)
		pthread_join(w[i].thread, NULL);
	walker_finish(&walker);
	pthread_barrier_destroy(&phase);

	struct entry_list truth = {0};
	add_permanent(&truth);
	uint64_t ops = 0, errors = 0, inserted = 0, refused = 0, cross = 0, untracked = 0;
	for (unsigned i = 0; i < CT_THREADS; i++) {
		ops += w[i].ops;
		errors += w[i].errors;
		inserted += w[i].inserted;
		refused += w[i].refused;
		cross += w[i].cross_frees;
		untracked += w[i].untracked_frees;
		for (size_t k = 0; k < w[i].nkeep; k++) {
			const struct block *b = (const struct block *)w[i].keep[k];
			if (b->tracked)
				entry_list_add(&truth,
					       &(struct live_table_entry){
						   w[i].keep[k], b->ref, b->size,
						   payload_weight(w[i].keep[k], b->ref, b->size)});
		}
	}
	ck_assert_msg(errors == 0,
		      "expected every free to find what its insert recorded, "
		      "saw %llu mismatches",
		      (unsigned long long)errors);
	ck_assert_msg(cross > ops / 4 && untracked > ops / 4 && inserted > ops / 4,
		      "expected about half the frees cross-thread, half untracked, half the "
		      "blocks inserted, saw %llu, %llu, %llu of %llu",
		      (unsigned long long)cross, (unsigned long long)untracked,
		      (unsigned long long)inserted, (unsigned long long)ops);
	struct live_table_stats st;
	live_table_stats(&t, &st);
	ck_assert_uint_eq(st.overflows, refused);
	check_table_holds_exactly(&t, truth.e, truth.n);

	for (unsigned i = 0; i < CT_THREADS; i++) {
		for (size_t k = 0; k < w[i].nkeep; k++)
			ct_free(&w[i], w[i].keep[k]);
		ck_assert_uint_eq(w[i].errors, 0);
		inbox_destroy(&w[i].inbox);
		free(w[i].taken);
	}
	remove_permanent(&t);
	check_table_holds_exactly(&t, NULL, 0);
	check_control_words_zero(&t);
	free(truth.e);
	live_table_destroy(&t);
}
END_TEST

/* --- addresses reused across threads through a pool --- */

#define RU_THREADS 8
#define RU_ADDRS 256
#define RU_OPS (100000 / SCALE)
#define RU_HOLD 16

static _Alignas(16) char reuse_storage[RU_ADDRS][16];

/* What the table must hold for one address: kept by whoever owns the address (a
 * thread, or the pool under its lock). */
struct addr_truth {
	bool in_table;
	struct live_table_entry e;
};

struct reuse_pool {
	pthread_mutex_t lock;
	uint32_t free_idx[RU_ADDRS];
	size_t nfree;
	struct addr_truth truth[RU_ADDRS];
};

struct ru_worker {
	pthread_t thread;
	unsigned id;
	struct live_table *t;
	struct reuse_pool *pool;
	struct ru_worker *all;
	const struct walker *walker;
	pthread_barrier_t *phase;
	struct inbox inbox;
	uint32_t hold[RU_HOLD];
	size_t nhold;
	uintptr_t taken[RU_ADDRS];
	uint64_t rng, errors, unhooked, reinserts;
};

static uintptr_t ru_addr(uint32_t i)
{
	return (uintptr_t)reuse_storage[i];
}

/* The address's "free": removed first (unless this free is one we do not hook), then
 * back to the pool, whose lock orders it before the next "malloc" of the address. */
static void ru_free(struct ru_worker *w, uint32_t i)
{
	struct addr_truth *tr = &w->pool->truth[i];
	if (next_rand(&w->rng) % 64 == 0) {
		w->unhooked++; /* the table keeps a stale entry: the next insert replaces it */
	} else {
		struct live_table_entry got;
		bool found = live_table_remove(w->t, ru_addr(i), &got);
		if (found != tr->in_table || (found && !entry_equal(&got, &tr->e)))
			w->errors++;
		tr->in_table = false;
	}
	pthread_mutex_lock(&w->pool->lock);
	w->pool->free_idx[w->pool->nfree++] = i;
	pthread_mutex_unlock(&w->pool->lock);
}

/* The address's "malloc", then maybe its insert (three in four). */
static void ru_alloc(struct ru_worker *w, uint64_t op)
{
	pthread_mutex_lock(&w->pool->lock);
	bool any = w->pool->nfree > 0;
	uint32_t i = any ? w->pool->free_idx[--w->pool->nfree] : 0;
	pthread_mutex_unlock(&w->pool->lock);
	if (!any)
		return;
	struct addr_truth *tr = &w->pool->truth[i];
	if (next_rand(&w->rng) % 4) {
		struct live_table_entry e = payload_make(ru_addr(i), ((uint64_t)w->id << 40) | op);
		bool stale = tr->in_table;
		if (insert_entry(w->t, &e)) {
			tr->in_table = true;
			tr->e = e;
			w->reinserts += stale;
		} else if (stale) {
			w->errors++; /* a replacement needs no free slot: never refused */
		}
	}
	w->hold[w->nhold++] = i;
}

static void ru_drain(struct ru_worker *w)
{
	size_t n = inbox_take(&w->inbox, w->taken);
	for (size_t k = 0; k < n; k++)
		ru_free(w, (uint32_t)w->taken[k]);
}

static void *ru_main(void *arg)
{
	struct ru_worker *w = arg;
	pthread_barrier_wait(w->phase);
	for (uint64_t op = 0; op < RU_OPS || walker_busy(w->walker); op++) {
		uint64_t r = next_rand(&w->rng);
		if (w->nhold < RU_HOLD && (r & 1)) {
			ru_alloc(w, op);
		} else if (w->nhold) {
			size_t k = (r >> 8) % w->nhold;
			uint32_t i = w->hold[k];
			w->hold[k] = w->hold[--w->nhold];
			/* Half freed by another thread. */
			unsigned to = (unsigned)((r >> 16) % RU_THREADS);
			if (!((r >> 1) & 1) || to == w->id || !inbox_push(&w->all[to].inbox, i))
				ru_free(w, i);
		}
		if (op % 4 == 0)
			ru_drain(w);
	}
	pthread_barrier_wait(w->phase);
	ru_drain(w);
	return NULL;
}

START_TEST(test_addresses_reused_across_threads_keep_their_latest_entry)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, 16 * KIB), 0);
	static struct reuse_pool pool;
	static struct ru_worker w[RU_THREADS];
	static struct walker walker;
	memset(&pool, 0, sizeof(pool));
	pthread_mutex_init(&pool.lock, NULL);
	for (uint32_t i = 0; i < RU_ADDRS; i++)
		pool.free_idx[pool.nfree++] = i;
	pthread_barrier_t phase;
	pthread_barrier_init(&phase, NULL, RU_THREADS);
	walker_start(&walker, &t);
	for (unsigned i = 0; i < RU_THREADS; i++) {
		w[i] = (struct ru_worker){.id = i, .t = &t, .pool = &pool, .all = w};
		w[i].phase = &phase;
		w[i].walker = &walker;
		w[i].rng = hash_mix64(100 + i);
		inbox_init(&w[i].inbox, RU_ADDRS);
	}
	for (unsigned i = 0; i < RU_THREADS; i++)
		ck_assert_int_eq(pthread_create(&w[i].thread, NULL, ru_main, &w[i]), 0);
	for (unsigned i = 0; i < RU_THREADS; i++)
		pthread_join(w[i].thread, NULL);
	walker_finish(&walker);
	pthread_barrier_destroy(&phase);

	uint64_t errors = 0, unhooked = 0, reinserts = 0;
	for (unsigned i = 0; i < RU_THREADS; i++) {
		errors += w[i].errors;
		unhooked += w[i].unhooked;
		reinserts += w[i].reinserts;
	}
	ck_assert_msg(errors == 0,
		      "expected every remove to return the latest entry, saw %llu "
		      "mismatches",
		      (unsigned long long)errors);
	struct live_table_stats st;
	live_table_stats(&t, &st);
	ck_assert_msg(unhooked > 0 && reinserts > 0 && st.replaced == reinserts,
		      "expected unhooked frees and replacements, saw %llu, %llu (%llu counted)",
		      (unsigned long long)unhooked, (unsigned long long)reinserts,
		      (unsigned long long)st.replaced);
	struct entry_list truth = {0};
	add_permanent(&truth);
	for (uint32_t i = 0; i < RU_ADDRS; i++)
		if (pool.truth[i].in_table)
			entry_list_add(&truth, &pool.truth[i].e);
	check_table_holds_exactly(&t, truth.e, truth.n);
	for (uint32_t i = 0; i < RU_ADDRS; i++)
		if (pool.truth[i].in_table)
			ck_assert(live_table_remove(&t, ru_addr(i), NULL));
	remove_permanent(&t);
	check_control_words_zero(&t);
	for (unsigned i = 0; i < RU_THREADS; i++)
		inbox_destroy(&w[i].inbox);
	pthread_mutex_destroy(&pool.lock);
	free(truth.e);
	live_table_destroy(&t);
}
END_TEST

/* --- walks racing with writers of the same few slots --- */

#define TR_WRITERS 2
#define TR_ADDRS 8 /* each writer's */
#define TR_WALKS (20000 / SCALE)
#define TR_WRITES (800000 / SCALE) /* of all writers, during the walks */

static _Alignas(16) char torn_storage[TR_WRITERS][TR_ADDRS][16];

struct tr_writer {
	pthread_t thread;
	unsigned id;
	struct live_table *t;
	_Atomic bool *stop;
	_Atomic uint64_t writes;
	uint64_t rng;
};

/* Rewrites its entries without pause: replaced in place (insert of a present address)
 * or removed and inserted again, each time with a new payload. */
static void *tr_main(void *arg)
{
	struct tr_writer *w = arg;
	while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
		uint64_t r = next_rand(&w->rng);
		uintptr_t a = (uintptr_t)torn_storage[w->id][r % TR_ADDRS];
		struct live_table_entry e = payload_make(a, r);
		if ((r >> 8) & 1)
			live_table_remove(w->t, a, NULL);
		insert_entry(w->t, &e);
		atomic_fetch_add_explicit(&w->writes, 1, memory_order_relaxed);
	}
	return NULL;
}

START_TEST(test_walks_racing_with_rewrites_never_see_a_torn_entry)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, 4 * KIB), 0);
	static struct tr_writer w[TR_WRITERS];
	_Atomic bool stop = false;
	for (unsigned i = 0; i < TR_WRITERS; i++) {
		w[i] = (struct tr_writer){.id = i, .t = &t, .stop = &stop};
		w[i].rng = hash_mix64(300 + i);
		ck_assert_int_eq(pthread_create(&w[i].thread, NULL, tr_main, &w[i]), 0);
	}
	static struct walker walker; /* its callback, without its thread */
	memset(&walker, 0, sizeof(walker));
	/* Walks from the first write until both counts are reached. */
	uint64_t writes = 0, walks = 0, first = 0;
	while (writes < TR_WRITES || walks < TR_WALKS) {
		writes = 0;
		for (unsigned i = 0; i < TR_WRITERS; i++)
			writes += atomic_load_explicit(&w[i].writes, memory_order_relaxed);
		if (!first && !(first = writes))
			continue;
		live_table_for_each(&t, walk_entry, &walker);
		walks++;
	}
	atomic_store(&stop, true);
	for (unsigned i = 0; i < TR_WRITERS; i++)
		pthread_join(w[i].thread, NULL);
	ck_assert_msg(walker.torn == 0, "expected no torn entry, saw %llu in %llu (%llu writes)",
		      (unsigned long long)walker.torn, (unsigned long long)walker.seen,
		      (unsigned long long)writes);
	ck_assert_msg(walker.seen > TR_WALKS, "expected entries in most walks, saw %llu in %llu",
		      (unsigned long long)walker.seen, (unsigned long long)walks);
	live_table_destroy(&t);
}
END_TEST

static Suite *live_table_stress_suite(void)
{
	Suite *s = suite_create("live_table_stress");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_cross_thread_frees_leave_exactly_the_live_set);
	tcase_add_test(tc, test_addresses_reused_across_threads_keep_their_latest_entry);
	tcase_add_test(tc, test_walks_racing_with_rewrites_never_see_a_torn_entry);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(live_table_stress_suite());
}
