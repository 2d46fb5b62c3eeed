/*
 * test_live_table_signals.c - the live table (agent/alloc/live_table.c) used by signal
 * handlers while the thread they interrupt is in the middle of an operation on it.
 *
 * 4 threads insert and remove their own addresses on a small table (full buckets,
 * entries placed past them) while another thread signals each of them again as soon as
 * its handler ran; each handler inserts or removes its own next address and removes an
 * address never inserted. The walker (live_table_walker.h) reads the table meanwhile.
 * At the end the table holds exactly the threads' and the handlers' recorded truth,
 * entry by entry, and some handlers ran inside an operation of their thread.
 */
#include "agent/alloc/live_table.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test/unit/check_run.h"
#include "test/unit/live_table_checks.h"
#include "test/unit/live_table_walker.h"

#define KIB ((size_t)1 << 10)
#ifdef DDPROF_TSAN
#define SCALE 4 /* TSan is ~10x slower: shrink iteration counts */
#else
#define SCALE 1
#endif

#define SG_THREADS 4
#define SG_ADDRS 64		    /* the thread's own addresses */
#define SG_HADDRS 32		    /* its handler's */
#define SG_MIN_OPS (100000 / SCALE) /* operations of each thread, at least */
#define SG_HANDLED (20000 / SCALE)  /* handlers run before the threads may stop */
/* The storm gives up after this long (a thread that never gets a core). */
#define SG_DEADLINE_S 60

static _Alignas(16) char sig_storage[SG_THREADS][SG_ADDRS + SG_HADDRS][16];

struct sg_worker {
	pthread_t thread;
	unsigned id;
	struct live_table *t;
	_Atomic bool *storm_over;
	const struct walker *walker;
	/* The thread's truth, and its handler's (each written only by its owner). */
	struct live_table_entry e[SG_ADDRS], he[SG_HADDRS];
	bool in[SG_ADDRS], hin[SG_HADDRS];
	volatile sig_atomic_t in_op; /* the thread is inside an insert or a remove */
	_Atomic uint64_t handled;    /* read by the storm: one signal pending at a time */
	uint64_t rng, errors, herrors, interrupted, hnext;
};

static __thread struct sg_worker *sg_self;

static uintptr_t sg_addr(unsigned thread, unsigned i)
{
	return (uintptr_t)sig_storage[thread][i];
}

/* async-signal-safe. Inserts or removes the handler's next address, and removes one that
 * was never inserted (8 bytes into one of the handler's: no entry has it). */
static void sg_handler(int sig)
{
	int saved = errno;
	struct sg_worker *w = sg_self;
	if (w) {
		atomic_fetch_add_explicit(&w->handled, 1, memory_order_relaxed);
		w->interrupted += w->in_op != 0;
		unsigned j = (unsigned)(w->hnext++ % SG_HADDRS);
		uintptr_t a = sg_addr(w->id, SG_ADDRS + j);
		if (w->hin[j]) {
			struct live_table_entry got;
			if (!live_table_remove(w->t, a, &got) || !entry_equal(&got, &w->he[j]))
				w->herrors++;
			w->hin[j] = false;
		} else {
			w->he[j] =
			    payload_make(a, ((uint64_t)w->id << 40) | (1ULL << 39) | w->hnext);
			w->hin[j] = insert_entry(w->t, &w->he[j]);
		}
		w->herrors += live_table_remove(w->t, a + 8, NULL);
	}
	errno = saved;
}

static void *sg_main(void *arg)
{
	struct sg_worker *w = arg;
	sg_self = w;
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_UNBLOCK, &usr1, NULL);
	/* Until the storm is over (no signal is sent after it): a thread that ends is not
	 * a target any more. */
	for (uint64_t op = 0;
	     op < SG_MIN_OPS || !atomic_load(w->storm_over) || walker_busy(w->walker); op++) {
		unsigned i = (unsigned)(next_rand(&w->rng) % SG_ADDRS);
		uintptr_t a = sg_addr(w->id, i);
		if (w->in[i]) {
			struct live_table_entry got;
			w->in_op = 1;
			bool found = live_table_remove(w->t, a, &got);
			w->in_op = 0;
			if (!found || !entry_equal(&got, &w->e[i]))
				w->errors++;
			w->in[i] = false;
		} else {
			w->e[i] = payload_make(a, ((uint64_t)w->id << 40) | op);
			w->in_op = 1;
			w->in[i] = insert_entry(w->t, &w->e[i]);
			w->in_op = 0;
		}
	}
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);
	return NULL;
}

struct storm {
	struct sg_worker *w;
	_Atomic bool *over;
	uint64_t sent;
};

/* Signals each thread again as soon as its handler ran for the last one (a signal sent
 * while one is pending would be merged into it), until SG_HANDLED ran in all. */
static void *storm_main(void *arg)
{
	struct storm *s = arg;
	uint64_t last[SG_THREADS], total = 0;
	for (unsigned i = 0; i < SG_THREADS; i++)
		last[i] = UINT64_MAX;
	time_t deadline = time(NULL) + SG_DEADLINE_S;
	while (total < SG_HANDLED && time(NULL) < deadline) {
		total = 0;
		for (unsigned i = 0; i < SG_THREADS; i++) {
			uint64_t h = atomic_load(&s->w[i].handled);
			total += h;
			if (h != last[i]) {
				s->sent += pthread_kill(s->w[i].thread, SIGUSR1) == 0;
				last[i] = h;
			}
		}
		__builtin_ia32_pause(); /* a yield would hand this core to a worker for a slice */
	}
	atomic_store(s->over, true);
	return NULL;
}

START_TEST(test_signal_handlers_mid_operation_leave_exactly_the_live_set)
{
	struct live_table t;
	/* 16 KiB: 490 slots for up to 384 addresses: full buckets, entries displaced. */
	ck_assert_int_eq(live_table_init(&t, 16 * KIB), 0);
	struct sigaction sa = {.sa_handler = sg_handler, .sa_flags = SA_RESTART}, old;
	sigemptyset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, &old), 0);
	/* Every thread starts with the signal blocked; the workers unblock it. */
	sigset_t usr1, saved;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, &saved);

	static struct sg_worker w[SG_THREADS];
	static struct walker walker;
	_Atomic bool storm_over = false;
	walker_start(&walker, &t);
	for (unsigned i = 0; i < SG_THREADS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i;
		w[i].t = &t;
		w[i].storm_over = &storm_over;
		w[i].walker = &walker;
		w[i].rng = hash_mix64(200 + i);
		ck_assert_int_eq(pthread_create(&w[i].thread, NULL, sg_main, &w[i]), 0);
	}
	struct storm storm = {w, &storm_over, 0};
	pthread_t storm_thread;
	ck_assert_int_eq(pthread_create(&storm_thread, NULL, storm_main, &storm), 0);
	pthread_join(storm_thread, NULL);
	for (unsigned i = 0; i < SG_THREADS; i++)
		pthread_join(w[i].thread, NULL);
	walker_finish(&walker);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
	sigaction(SIGUSR1, &old, NULL);

	struct entry_list truth = {0};
	add_permanent(&truth);
	uint64_t errors = 0, herrors = 0, handled = 0, interrupted = 0;
	for (unsigned i = 0; i < SG_THREADS; i++) {
		errors += w[i].errors;
		herrors += w[i].herrors;
		handled += atomic_load(&w[i].handled);
		interrupted += w[i].interrupted;
		for (unsigned k = 0; k < SG_ADDRS; k++)
			if (w[i].in[k])
				entry_list_add(&truth, &w[i].e[k]);
		for (unsigned k = 0; k < SG_HADDRS; k++)
			if (w[i].hin[k])
				entry_list_add(&truth, &w[i].he[k]);
	}
	ck_assert_msg(errors == 0 && herrors == 0,
		      "expected every remove to find its entry and no untracked one, saw %llu "
		      "wrong in threads and %llu in handlers",
		      (unsigned long long)errors, (unsigned long long)herrors);
	ck_assert_msg(handled >= SG_HANDLED, "expected >= %d handlers run, saw %llu (%llu sent)",
		      SG_HANDLED, (unsigned long long)handled, (unsigned long long)storm.sent);
	ck_assert_msg(interrupted > 0,
		      "expected handlers run inside an operation, saw none of "
		      "%llu",
		      (unsigned long long)handled);
	check_table_holds_exactly(&t, truth.e, truth.n);
	for (size_t k = 0; k < truth.n; k++)
		ck_assert(live_table_remove(&t, truth.e[k].addr, NULL));
	check_control_words_zero(&t);
	free(truth.e);
	live_table_destroy(&t);
}
END_TEST

static Suite *live_table_signals_suite(void)
{
	Suite *s = suite_create("live_table_signals");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_signal_handlers_mid_operation_leave_exactly_the_live_set);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(live_table_signals_suite());
}
