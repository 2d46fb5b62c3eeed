/*
 * live_table_walker.h - what the live table's multi-threaded suites share: each thread's
 * random numbers, and the walker, a thread that reads the table with for_each every few
 * milliseconds as the profiler does each period. No entry it sees may be torn (its
 * weight checks its address, ref and size: live_table_checks.h), and the permanent
 * entries, inserted before the walker starts and never removed while it runs, must be
 * seen exactly once by every walk. The suites' workers keep going until it has walked
 * WALKS_MIN times, so that walks and operations overlap however the threads are
 * scheduled. Context: test threads; next_rand also from the suites' signal handlers.
 */
#ifndef DDPROF_TEST_UNIT_LIVE_TABLE_WALKER_H
#define DDPROF_TEST_UNIT_LIVE_TABLE_WALKER_H

#include "agent/alloc/live_table.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "test/unit/live_table_checks.h"

/* async-signal-safe. xorshift64: each thread its own sequence. */
static __attribute__((unused)) uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* --- the walker: for_each every few milliseconds, as the profiler each period --- */

#define PERMANENT 64
/* Walks every test waits for before its threads may stop. */
#define WALKS_MIN 20
/* Addresses no allocator returns, never removed while the threads run. */
static _Alignas(16) char permanent_storage[PERMANENT][16];
static struct live_table_entry permanent[PERMANENT];

struct walker {
	pthread_t thread;
	struct live_table *t;
	_Atomic bool stop;
	_Atomic uint64_t walks; /* read by the workers: they run until WALKS_MIN */
	uint64_t seen, torn, permanent_wrong;
	unsigned counts[PERMANENT]; /* this walk's sightings of each permanent entry */
};

static __attribute__((unused)) void walk_entry(const struct live_table_entry *e, void *arg)
{
	struct walker *w = arg;
	w->seen++;
	if (!payload_consistent(e))
		w->torn++;
	uintptr_t base = (uintptr_t)permanent_storage;
	if (e->addr >= base && e->addr < base + sizeof(permanent_storage)) {
		size_t i = (e->addr - base) / sizeof(permanent_storage[0]);
		w->counts[i]++;
		if (!entry_equal(e, &permanent[i]))
			w->permanent_wrong++;
	}
}

static __attribute__((unused)) void *walker_main(void *arg)
{
	struct walker *w = arg;
	while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
		memset(w->counts, 0, sizeof(w->counts));
		live_table_for_each(w->t, walk_entry, w);
		for (int i = 0; i < PERMANENT; i++)
			w->permanent_wrong += w->counts[i] != 1;
		atomic_fetch_add(&w->walks, 1);
		usleep(2000);
	}
	return NULL;
}

static __attribute__((unused)) void walker_start(struct walker *w, struct live_table *t)
{
	memset(w, 0, sizeof(*w));
	w->t = t;
	for (int i = 0; i < PERMANENT; i++) {
		permanent[i] = payload_make((uintptr_t)permanent_storage[i], 0xfeed0000 + i);
		ck_assert(insert_entry(t, &permanent[i]));
	}
	ck_assert_int_eq(pthread_create(&w->thread, NULL, walker_main, w), 0);
}

/* Stops the walker, checks what it saw, and removes the permanent entries. */
static __attribute__((unused)) void walker_finish(struct walker *w)
{
	atomic_store(&w->stop, true);
	pthread_join(w->thread, NULL);
	uint64_t walks = atomic_load(&w->walks);
	ck_assert_msg(walks >= WALKS_MIN, "expected the walker to walk at least %d times, saw %llu",
		      WALKS_MIN, (unsigned long long)walks);
	ck_assert_msg(w->torn == 0 && w->permanent_wrong == 0,
		      "walker: expected no torn entry and every permanent one once a walk, saw "
		      "%llu torn, %llu wrong (%llu walks, %llu entries)",
		      (unsigned long long)w->torn, (unsigned long long)w->permanent_wrong,
		      (unsigned long long)walks, (unsigned long long)w->seen);
}

/* Whether the walker has yet to walk WALKS_MIN times (workers keep going meanwhile). */
static __attribute__((unused)) bool walker_busy(const struct walker *w)
{
	return atomic_load_explicit(&w->walks, memory_order_relaxed) < WALKS_MIN;
}

static __attribute__((unused)) void remove_permanent(struct live_table *t)
{
	for (int i = 0; i < PERMANENT; i++) {
		struct live_table_entry got;
		ck_assert(live_table_remove(t, permanent[i].addr, &got));
		ck_assert(entry_equal(&got, &permanent[i]));
	}
}

/* Adds the permanent entries to a truth. */
static __attribute__((unused)) void add_permanent(struct entry_list *truth)
{
	for (int i = 0; i < PERMANENT; i++)
		entry_list_add(truth, &permanent[i]);
}

#endif
