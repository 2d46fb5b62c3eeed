/*
 * test_wall_clock.c - unit tests of agent/wall/wall_clock.c: a thread's wall account.
 *
 * What the profiler relies on: every nanosecond a thread waits is charged once, in full,
 * at a wait whose hook crosses a sample point (never lost, never twice), with a wait
 * sample every interval of waiting on average; the time between waits is charged as
 * running at CPU samples, waits excluded, and not while a hook measures; a new thread
 * and a fork child's thread start their account afresh; the interval is bounded.
 */
#include "agent/wall/wall_clock.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>

#include "test/unit/check_run.h"

/* No signal handler of an application runs in these tests. */
static bool not_in_handler(void)
{
	return false;
}

#define MS (1000ULL * 1000)

START_TEST(test_every_wait_is_charged_once_in_full)
{
	wall_clock_configure(true, 10 * MS);
	struct wall_account *a = wall_clock_account(1000 * MS);
	uint64_t t = 1000 * MS, waited = 0, charged = 0, samples = 0;
	double sq = 0;
	unsigned r = 7;
	for (int i = 0; i < 200000; i++) {
		uint64_t d = 1000 + (uint64_t)(rand_r(&r) % 4000) * 1000; /* 1 us .. 4 ms */
		a->busy = 1;
		uint64_t c = wall_clock_waited(a, t, t, t + d);
		a->busy = 0;
		t += d + 500;
		waited += d;
		sq += (double)d * (double)d;
		if (c) {
			charged += c;
			samples++;
		}
	}
	/* What is not charged yet is pending, at most what followed the last sample. */
	uint64_t pending = atomic_load(&a->pending);
	ck_assert_uint_eq(charged + pending, waited);
	ck_assert_uint_lt(pending, waited / samples * 20);
	/* A sample per interval of waiting, plus the rest of the wait that crossed the
	 * point (the next point is drawn from its end): on average E[d^2] / (2 E[d]) of a
	 * wait length-biased by the crossing. */
	double expect = 1.0 + sq / (2.0 * (double)waited) / (double)(10 * MS);
	double per = (double)waited / (double)samples / (double)(10 * MS);
	ck_assert_msg(per > expect * 0.98 && per < expect * 1.02,
		      "%.4f intervals of waiting per sample, expected %.4f", per, expect);
}
END_TEST

START_TEST(test_running_is_the_time_between_waits)
{
	wall_clock_configure(true, 10 * MS);
	/* A thread of its own: a fresh account. */
	atomic_store(&wall_clock_tls.gen, 0);
	struct wall_account *a = wall_clock_account(100 * MS);
	ck_assert_uint_eq(a->run_mark, 100 * MS);
	/* 3 ms running, a 5 ms wait, 2 ms running: the CPU sample at 110 ms charges 5. */
	a->busy = 1;
	wall_clock_waited(a, 103 * MS, 103 * MS, 108 * MS);
	a->busy = 0;
	ck_assert_uint_eq(wall_clock_running(110 * MS, 0, false), 5 * MS);
	/* The next charge starts there. */
	ck_assert_uint_eq(wall_clock_running(117 * MS, 0, false), 7 * MS);
	/* While a hook measures (a CPU sample inside a read that copies), nothing: the
	 * hook's wait holds that time. */
	a->busy = 1;
	ck_assert_uint_eq(wall_clock_running(130 * MS, 0, false), 0);
	wall_clock_waited(a, 117 * MS, 117 * MS, 130 * MS);
	a->busy = 0;
	ck_assert_uint_eq(wall_clock_running(131 * MS, 0, false), 1 * MS);
}
END_TEST

START_TEST(test_a_fork_child_starts_its_account_afresh)
{
	wall_clock_configure(true, 10 * MS);
	atomic_store(&wall_clock_tls.gen, 0);
	struct wall_account *a = wall_clock_account(1000 * MS);
	a->busy = 1;
	wall_clock_waited(a, 1000 * MS, 1000 * MS, 1001 * MS);
	a->busy = 0;
	ck_assert_uint_gt(a->waited, 0);
	wall_clock_after_fork_child();
	a = wall_clock_account(5000 * MS);
	ck_assert_uint_eq(a->run_mark, 5000 * MS);
	ck_assert_uint_eq(a->waited, 0);
	ck_assert_uint_eq(atomic_load(&a->pending), 0);
	ck_assert_uint_eq(a->busy, 0);
	/* Used again in the same generation: kept. */
	ck_assert_uint_eq(wall_clock_account(6000 * MS)->run_mark, 5000 * MS);
}
END_TEST

START_TEST(test_interval_out_of_range_takes_the_default)
{
	wall_clock_configure(true, 50);
	ck_assert_uint_eq(wall_clock_interval(), WALL_CLOCK_DEFAULT_INTERVAL_NS);
	wall_clock_configure(true, 61ULL * 1000 * MS);
	ck_assert_uint_eq(wall_clock_interval(), WALL_CLOCK_DEFAULT_INTERVAL_NS);
	wall_clock_configure(true, 1 * MS);
	ck_assert_uint_eq(wall_clock_interval(), 1 * MS);
	ck_assert(wall_clock_on());
	wall_clock_configure(false, 1 * MS);
	ck_assert(!wall_clock_on());
	struct unwind_regs r = {0};
	ck_assert_ptr_null(wall_clock_wait_begin(1, WALL_READ, &r, 0x7f0000000000, not_in_handler));
}
END_TEST

START_TEST(test_a_sample_inside_a_wait_charges_nothing)
{
	wall_clock_configure(true, 10 * MS);
	atomic_store(&wall_clock_tls.gen, 0);
	struct unwind_regs r = {0};
	const uintptr_t frame = 0x7f0000100000;
	struct wall_account *a =
	    wall_clock_wait_begin(10 * MS, WALL_READ, &r, frame, not_in_handler);
	ck_assert_ptr_nonnull(a);
	/* A sampling signal inside the wait (below the hook's frame): nothing, and the
	 * wait stays the hook's. */
	ck_assert_uint_eq(wall_clock_running(12 * MS, frame - 0x800, true), 0);
	ck_assert_uint_eq(a->busy, frame);
	a->busy = 0;
}
END_TEST

START_TEST(test_a_hook_left_by_siglongjmp_is_abandoned)
{
	wall_clock_configure(true, 10 * MS);
	atomic_store(&wall_clock_tls.gen, 0);
	struct unwind_regs r = {0};
	const uintptr_t frame = 0x7f0000100000;
	struct wall_account *a =
	    wall_clock_wait_begin(10 * MS, WALL_READ, &r, frame, not_in_handler);
	ck_assert_ptr_nonnull(a);
	struct wall_clock_stats s0, s1;
	wall_clock_get_stats(&s0);
	/* The handler jumped out of the read: the next hook, outside any of the
	 * application's signal handlers, finds the busy one gone and restarts the
	 * account. (One inside a handler that interrupted the wait would go untimed:
	 * app_signals_in_handler, tests_wall.py.) */
	ck_assert_ptr_nonnull(wall_clock_wait_begin(30 * MS, WALL_READ, &r, frame, not_in_handler));
	ck_assert_uint_eq(a->busy, frame);
	ck_assert_uint_eq(a->run_mark, 30 * MS);
	a->busy = frame;
	/* A CPU sample above the frame, on the thread's stack, finds it gone too. */
	ck_assert_uint_eq(wall_clock_running(40 * MS, frame + 0x100, true), 0);
	ck_assert_uint_eq(a->busy, 0);
	ck_assert_uint_eq(wall_clock_running(45 * MS, frame + 0x100, true), 5 * MS);
	/* Off the thread's stack (an alternate signal stack): no conclusion drawn. */
	a->busy = frame;
	ck_assert_uint_eq(wall_clock_running(50 * MS, frame + 0x100, false), 0);
	ck_assert_uint_eq(a->busy, frame);
	a->busy = 0;
	wall_clock_get_stats(&s1);
	ck_assert_uint_eq(s1.abandoned_waits - s0.abandoned_waits, 2);
}
END_TEST

START_TEST(test_state_tags_are_synthetic_pcs_with_names)
{
	uintptr_t pcs[UNWIND_MAX_DEPTH] = {0x401000, 0x402000};
	uint32_t n = wall_clock_tag(pcs, 2, WALL_READ);
	ck_assert_uint_eq(n, 3);
	ck_assert(wall_clock_is_state_pc(pcs[2]));
	ck_assert_str_eq(wall_state_names[pcs[2] - PC_WALL_STATE_BASE], "read");
	ck_assert(!wall_clock_is_state_pc(PC_PROFILER));
	/* A full stack: the tag replaces its last pc. */
	ck_assert_uint_eq(wall_clock_tag(pcs, UNWIND_MAX_DEPTH, WALL_RUNNING), UNWIND_MAX_DEPTH);
	ck_assert_uint_eq(pcs[UNWIND_MAX_DEPTH - 1], PC_WALL_STATE_BASE + WALL_RUNNING);
	for (int s = 0; s < WALL_STATES; s++)
		ck_assert_msg(wall_state_names[s] && wall_state_names[s][0], "state %d unnamed", s);
}
END_TEST

/* Threads whose waits all cross a sample point (200 threads waking together every
 * 100 ms, as idle workers do): the process takes at most its budget, the refused
 * waits stay pending, and each thread's waits are still charged in full later. */
struct budget_thread {
	uint64_t waited, charged, samples;
};
static pthread_barrier_t step;

static void *budget_main(void *arg)
{
	struct budget_thread *b = arg;
	struct wall_account *a = wall_clock_account(0);
	for (uint64_t t = 0; t < 20000 * MS; t += 100 * MS) {
		pthread_barrier_wait(&step); /* every thread's clock at t */
		a->busy = 1;
		uint64_t c = wall_clock_waited(a, t, t, t + 100 * MS);
		a->busy = 0;
		b->waited += 100 * MS;
		b->charged += c;
		b->samples += c != 0;
	}
	b->charged += atomic_load(&a->pending); /* what a later sample would charge */
	return NULL;
}

START_TEST(test_the_budget_bounds_the_samples_of_many_waiting_threads)
{
	wall_clock_configure(true, 10 * MS);
	struct wall_clock_stats s0, s1;
	wall_clock_get_stats(&s0);
	static struct budget_thread b[200];
	pthread_t t[200];
	ck_assert_int_eq(pthread_barrier_init(&step, NULL, 200), 0);
	for (int i = 0; i < 200; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, budget_main, &b[i]), 0);
	uint64_t samples = 0;
	for (int i = 0; i < 200; i++) {
		pthread_join(t[i], NULL);
		ck_assert_uint_eq(b[i].charged, b[i].waited);
		samples += b[i].samples;
	}
	pthread_barrier_destroy(&step);
	wall_clock_get_stats(&s1);
	/* 20 s of (simulated) time: at most WALL_CLOCK_BUDGET_THREADS threads' worth per
	 * 10 ms interval, plus one burst of 10 slots, of the 40 000 samples the waits
	 * asked for. */
	uint64_t bound = WALL_CLOCK_BUDGET_THREADS * (20000 / 10 + 10);
	ck_assert_msg(samples <= bound && samples >= bound * 9 / 10, "%llu samples, budget %llu",
		      (unsigned long long)samples, (unsigned long long)bound);
	ck_assert_uint_gt(s1.deferred_samples - s0.deferred_samples, 0);
}
END_TEST

static Suite *wall_clock_suite(void)
{
	Suite *s = suite_create("wall_clock");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_every_wait_is_charged_once_in_full);
	tcase_add_test(tc, test_running_is_the_time_between_waits);
	tcase_add_test(tc, test_a_fork_child_starts_its_account_afresh);
	tcase_add_test(tc, test_interval_out_of_range_takes_the_default);
	tcase_add_test(tc, test_a_sample_inside_a_wait_charges_nothing);
	tcase_add_test(tc, test_a_hook_left_by_siglongjmp_is_abandoned);
	tcase_add_test(tc, test_state_tags_are_synthetic_pcs_with_names);
	tcase_add_test(tc, test_the_budget_bounds_the_samples_of_many_waiting_threads);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(wall_clock_suite());
}
