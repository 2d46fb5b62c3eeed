/*
 * test_wall_threads.c - unit tests of agent/wall/wall_threads.c: the registry of wall
 * accounts and the host's charge of open waits.
 *
 * What the profiler relies on: while threads wait, end and start (registering and
 * leaving the registry), and a host thread charges their open waits over and over, every
 * nanosecond waited is charged exactly once, by the thread or by the host (the host's
 * share on the stack the unwinder returned, in the wait's state); the host never reads
 * the account of a thread that left; a thread without a known stack top is not
 * registered. The unwinder here is a stub that reads no memory (the real one reads the
 * waiting thread's stack, which a wait that ends while it reads may change: that read is
 * dropped by the failed CAS). Runs under ThreadSanitizer too.
 */
#include "agent/wall/wall_threads.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/sample/sampler.h"
#include "agent/wall/wall_clock.h"
#include "common/clock.h"
#include "test/unit/check_run.h"

/* No signal handler of an application runs in these tests. */
static bool not_in_handler(void)
{
	return false;
}

#define STUB_PC 0x5000

/* The stub unwinder: one frame, the wait's pc. */
static uint32_t stub_unwind(const struct unwind_regs *regs, uintptr_t *pcs, uint32_t max)
{
	(void)max;
	pcs[0] = regs->pc;
	return 1;
}

/* Registers the calling thread with its real stack bounds. */
static void register_self(void)
{
	pthread_attr_t at;
	void *addr;
	size_t size;
	ck_assert_int_eq(pthread_getattr_np(pthread_self(), &at), 0);
	ck_assert_int_eq(pthread_attr_getstack(&at, &addr, &size), 0);
	pthread_attr_destroy(&at);
	sampler_thread_setup((pid_t)syscall(SYS_gettid), (uintptr_t)addr, (uintptr_t)addr + size,
			     false);
	wall_threads_begin();
}

struct waiter {
	pthread_t thread;
	uint64_t waited, charged; /* by this thread: its samples and its final pending */
	uint64_t waits;
};

static _Atomic bool stop;

/* Waits of 20 us..3 ms (nanosleep), each measured as a hook does. Some generations of
 * threads end early: new ones register in their slots. */
static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	register_self();
	struct wall_account *mine = &wall_clock_tls;
	ck_assert(atomic_load(&mine->registered));
	unsigned r = (unsigned)(uintptr_t)w;
	for (int i = 0; i < 400 && !atomic_load_explicit(&stop, memory_order_relaxed); i++) {
		struct unwind_regs regs = {.pc = STUB_PC + WALL_NANOSLEEP};
		uint64_t t0 = clock_now_ns(CLOCK_MONOTONIC);
		struct wall_account *a =
		    wall_clock_wait_begin(t0, WALL_NANOSLEEP, &regs,
					  (uintptr_t)__builtin_frame_address(0), not_in_handler);
		ck_assert_ptr_eq(a, mine);
		/* One wait in ten 1..3 ms: older than the host's threshold here (1 ms). */
		long ns = rand_r(&r) % 10 == 0 ? 1000000 + (long)(rand_r(&r) % 2000000)
					       : 20000 + (long)(rand_r(&r) % 180000);
		struct timespec ts = {0, ns};
		nanosleep(&ts, NULL);
		uint64_t from = wall_clock_wait_close(a, t0);
		uint64_t t1 = clock_now_ns(CLOCK_MONOTONIC);
		w->charged += wall_clock_waited(a, t0, from, t1);
		a->busy = 0;
		w->waited += t1 - t0;
		w->waits++;
	}
	w->charged += atomic_exchange(&mine->pending, 0);
	wall_threads_end();
	ck_assert(!atomic_load(&mine->registered));
	return NULL;
}

START_TEST(test_every_waited_nanosecond_is_charged_once_by_the_thread_or_the_host)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, 64 << 20, 0), 0);
	/* 1 ms interval: the threads take samples of their own too, and the budget refuses
	 * some (their time then goes with the host's charge or a later sample). */
	wall_clock_configure(true, 1000 * 1000);
	struct profile *p = &pp.p[0];
	enum { GENERATIONS = 4, THREADS = 6 };
	static struct waiter w[GENERATIONS][THREADS];
	uint64_t host_charges = 0;
	for (int g = 0; g < GENERATIONS; g++) {
		atomic_store(&stop, false);
		for (int i = 0; i < THREADS; i++)
			ck_assert_int_eq(
			    pthread_create(&w[g][i].thread, NULL, waiter_main, &w[g][i]), 0);
		/* The host: charges until the generation is done (each waiter's 400 waits
		 * take 20..80 ms). */
		uint64_t end = clock_now_ns(CLOCK_MONOTONIC) + 60ULL * 1000 * 1000;
		while (clock_now_ns(CLOCK_MONOTONIC) < end)
			host_charges += wall_threads_charge_open(p, clock_now_ns(CLOCK_MONOTONIC),
								 1000 * 1000, stub_unwind);
		atomic_store(&stop, true);
		for (int i = 0; i < THREADS; i++)
			pthread_join(w[g][i].thread, NULL);
	}
	uint64_t waited = 0, by_threads = 0, waits = 0;
	for (int g = 0; g < GENERATIONS; g++)
		for (int i = 0; i < THREADS; i++) {
			waited += w[g][i].waited;
			by_threads += w[g][i].charged;
			waits += w[g][i].waits;
		}
	uint64_t by_host = profiles_total(p, PROFILE_WALL, 1);
	ck_assert_msg(by_threads + by_host == waited,
		      "waited %llu ns, charged %llu by the threads + %llu by the host",
		      (unsigned long long)waited, (unsigned long long)by_threads,
		      (unsigned long long)by_host);
	ck_assert_msg(host_charges > 100 && by_host > waited / 20,
		      "the host charged %llu open waits (%llu ns of %llu) in %llu waits",
		      (unsigned long long)host_charges, (unsigned long long)by_host,
		      (unsigned long long)waited, (unsigned long long)waits);
	ck_assert_uint_eq(profiles_total(p, PROFILE_WALL, 0), host_charges);
	profiles_destroy(&pp);
}
END_TEST

struct young_wait {
	uint64_t pending;	    /* set as the budget's refusals would have left it */
	_Atomic int phase;	    /* 1: the wait is open; 2: the host is done */
	uint64_t charged_by_thread; /* what the thread charged as its wait ended */
};

/* Registers, carries `pending` ns of earlier refused waits, opens a wait and holds it
 * open until the host has looked. */
static void *young_wait_main(void *arg)
{
	struct young_wait *y = arg;
	register_self();
	struct wall_account *mine = &wall_clock_tls;
	atomic_store(&mine->pending, y->pending);
	struct unwind_regs regs = {.pc = STUB_PC + WALL_COND_TIMEDWAIT};
	uint64_t t0 = clock_now_ns(CLOCK_MONOTONIC);
	struct wall_account *a = wall_clock_wait_begin(
	    t0, WALL_COND_TIMEDWAIT, &regs, (uintptr_t)__builtin_frame_address(0), not_in_handler);
	atomic_store(&y->phase, 1);
	while (atomic_load(&y->phase) != 2)
		sched_yield();
	uint64_t from = wall_clock_wait_close(a, t0);
	uint64_t t1 = clock_now_ns(CLOCK_MONOTONIC);
	y->charged_by_thread = (t1 > from ? t1 - from : 0) + atomic_exchange(&mine->pending, 0);
	a->busy = 0;
	wall_threads_end();
	return NULL;
}

/* Threads of a pool woken on one timeout are all early in their waits at some snapshot:
 * the time the budget refused them must still go to that profile, with the young wait,
 * or the profile misses most of the period's wall time. A thread owing less than the
 * threshold is left to charge itself. */
START_TEST(test_a_young_wait_is_charged_with_the_time_its_thread_owes)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, 64 << 20, 0), 0);
	wall_clock_configure(true, 10 * 1000 * 1000);
	struct profile *p = &pp.p[0];
	const uint64_t min_open = 50ULL * 1000 * 1000;
	struct young_wait owes = {.pending = 800ULL * 1000 * 1000};
	struct young_wait owes_nothing = {.pending = 0};
	struct young_wait *both[2] = {&owes, &owes_nothing};
	pthread_t t[2];
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(pthread_create(&t[i], NULL, young_wait_main, both[i]), 0);
		while (atomic_load(&both[i]->phase) != 1)
			sched_yield();
	}
	/* Both waits are microseconds old, far below min_open. */
	uint32_t n =
	    wall_threads_charge_open(p, clock_now_ns(CLOCK_MONOTONIC), min_open, stub_unwind);
	for (int i = 0; i < 2; i++) {
		atomic_store(&both[i]->phase, 2);
		pthread_join(t[i], NULL);
	}
	ck_assert_uint_eq(n, 1);
	uint64_t by_host = profiles_total(p, PROFILE_WALL, 1);
	ck_assert_msg(by_host >= owes.pending && by_host < owes.pending + min_open,
		      "the host charged %llu ns for a thread owing %llu",
		      (unsigned long long)by_host, (unsigned long long)owes.pending);
	ck_assert_uint_lt(owes.charged_by_thread, min_open);
	profiles_destroy(&pp);
}
END_TEST

static void *unbounded_main(void *arg)
{
	(void)arg;
	/* No stack bounds cached for this thread: not registered. */
	sampler_thread_setup((pid_t)syscall(SYS_gettid), 0, 0, false);
	uint64_t before = wall_threads_unregistered();
	wall_threads_begin();
	ck_assert(!atomic_load(&wall_clock_tls.registered));
	ck_assert_uint_eq(wall_threads_unregistered(), before);
	wall_threads_end();
	return NULL;
}

START_TEST(test_a_thread_without_a_known_stack_top_is_not_registered)
{
	wall_clock_configure(true, 10 * 1000 * 1000);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, unbounded_main, NULL), 0);
	pthread_join(t, NULL);
}
END_TEST

static Suite *wall_threads_suite(void)
{
	Suite *s = suite_create("wall_threads");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_every_waited_nanosecond_is_charged_once_by_the_thread_or_the_host);
	tcase_add_test(tc, test_a_thread_without_a_known_stack_top_is_not_registered);
	tcase_add_test(tc, test_a_young_wait_is_charged_with_the_time_its_thread_owes);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(wall_threads_suite());
}
