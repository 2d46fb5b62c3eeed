/*
 * test_lock_sample.c - unit tests of agent/lock/lock_sample.c: the Poisson sampling of
 * lock wait time.
 *
 * What the profiler relies on: the lock-time weights of the sampled waits add up to an
 * unbiased estimate of the time waited, per call site too, whatever the mix of waits
 * (1 us to 20 ms, and single waits many intervals long), with a Poisson process's
 * spread; the lock-count weights add up to an unbiased estimate of the number of
 * contended acquisitions (a short wait rarely sampled counts for many); the unsampled
 * path only counts down; threads sample independently (the TSan build runs that part);
 * a fork child draws differently from its parent. Every run is seeded: the figures are
 * reproducible.
 */
#include "agent/lock/lock_sample.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/unit/check_run.h"

/* Waits 1 us to 20 ms, log-uniform: most short, as in real contention. */
static uint64_t random_wait(unsigned *r)
{
	double lg = 3.0 + 4.3 * ((double)rand_r(r) / RAND_MAX); /* 10^3 .. 10^7.3 ns */
	return (uint64_t)pow(10.0, lg);
}

START_TEST(test_weights_estimate_the_wait_and_the_count_of_each_site_without_bias)
{
	/* 400 runs of 2 s of waiting at two sites, 70% / 30% of the acquisitions, interval
	 * 10 ms (the default): each run's estimate is noisy (sqrt(M / wait): 12% for the
	 * 30% site's ~0.6 s), their mean is not (0.6%). */
	const uint64_t mean = 10 * 1000 * 1000;
	lock_sample_set_interval(mean);
	const int runs = 400;
	double wait_sum[2] = {0, 0}, wait_sq[2] = {0, 0}, expect_var[2] = {0, 0};
	double count_sum[2] = {0, 0};
	for (int run = 0; run < runs; run++) {
		struct alloc_sample_state s = {0};
		alloc_sample_seed(&s, 5000 + run);
		s.until = alloc_sample_draw(&s, mean);
		unsigned r = run;
		uint64_t truth[2] = {0, 0}, n[2] = {0, 0}, est[2] = {0, 0}, cnt[2] = {0, 0};
		while (truth[0] + truth[1] < 2000ULL * 1000 * 1000) {
			int site = rand_r(&r) % 10 < 7 ? 0 : 1;
			uint64_t d = random_wait(&r);
			truth[site] += d;
			n[site]++;
			struct lock_sample_weights w;
			if (lock_sample_wait_on(&s, d, &w)) {
				ck_assert_uint_eq(w.wait_ns % mean, 0);
				est[site] += w.wait_ns;
				cnt[site] += w.count;
			}
		}
		for (int k = 0; k < 2; k++) {
			double q = (double)est[k] / (double)truth[k];
			wait_sum[k] += q;
			wait_sq[k] += q * q;
			expect_var[k] += (double)mean / (double)truth[k];
			count_sum[k] += (double)cnt[k] / (double)n[k];
		}
	}
	for (int k = 0; k < 2; k++) {
		double m = wait_sum[k] / runs;
		double var = wait_sq[k] / runs - m * m;
		double theory = expect_var[k] / runs;
		/* Unbiased: within 4 standard errors of 1 (2.5% for the 30% site). */
		ck_assert_msg(fabs(m - 1.0) < 4.0 * sqrt(theory / runs),
			      "site %d: lock-time estimate/truth %.4f over %d runs", k, m, runs);
		ck_assert_msg(var > 0.8 * theory && var < 1.2 * theory,
			      "site %d: variance %.5f, a Poisson process has %.5f", k, var, theory);
		/* The count: most waits are far shorter than the interval, so each run's
		 * estimate is noisier than the time's; over 400 runs within 5%. */
		double c = count_sum[k] / runs;
		ck_assert_msg(fabs(c - 1.0) < 0.05, "site %d: lock-count estimate/truth %.4f", k,
			      c);
	}
}
END_TEST

START_TEST(test_a_wait_many_intervals_long_weighs_its_crossings_and_counts_once)
{
	/* 10 s waits against a 10 us interval: a million points each, counted in blocks;
	 * the time within 0.1%, the count 1 each (k * M / d rounds to 1). */
	const uint64_t mean = 10000, d = 10ULL * 1000 * 1000 * 1000;
	lock_sample_set_interval(mean);
	struct alloc_sample_state s = {0};
	alloc_sample_seed(&s, 11);
	s.until = alloc_sample_draw(&s, mean);
	double est = 0;
	uint64_t count = 0;
	for (int i = 0; i < 20; i++) {
		struct lock_sample_weights w;
		ck_assert(lock_sample_wait_on(&s, d, &w));
		est += (double)w.wait_ns;
		count += w.count;
	}
	ck_assert_double_eq_tol(est / (20.0 * (double)d), 1.0, 0.001);
	ck_assert_uint_eq(count, 20);
	lock_sample_set_interval(0); /* the default again */
	ck_assert_uint_eq(lock_sample_interval(), LOCK_SAMPLE_DEFAULT_INTERVAL_NS);
}
END_TEST

START_TEST(test_the_unsampled_path_only_counts_down_and_a_thread_seeds_itself)
{
	lock_sample_set_interval(1000 * 1000);
	ck_assert_uint_eq(lock_sample_tls.rng, 0);
	struct lock_sample_weights w;
	lock_sample_wait(1, &w); /* seeds */
	ck_assert_uint_ne(lock_sample_tls.rng, 0);
	int64_t left = lock_sample_tls.until;
	uint64_t rng = lock_sample_tls.rng;
	if (left > 100) {
		ck_assert(!lock_sample_wait(100, &w));
		ck_assert_int_eq(lock_sample_tls.until, left - 100);
		ck_assert_uint_eq(lock_sample_tls.rng, rng);
	}
	ck_assert(lock_sample_wait((uint64_t)lock_sample_tls.until, &w));
	ck_assert_uint_ge(w.wait_ns, 1000 * 1000);
	ck_assert_int_gt(lock_sample_tls.until, 0);
}
END_TEST

/* Threads: each counts its waits against its own countdown; the sum of the weights is
 * each thread's estimate. Run under TSan (make tsan): the states share nothing but the
 * seed counter. */
#define THREADS 4
struct thread_result {
	double est, truth;
};

static void *waiter(void *arg)
{
	struct thread_result *res = arg;
	unsigned r = (unsigned)(uintptr_t)arg;
	for (int i = 0; i < 200000; i++) {
		uint64_t d = random_wait(&r) / 100; /* 10 ns .. 200 us */
		struct lock_sample_weights w;
		res->truth += (double)d;
		if (lock_sample_wait(d, &w))
			res->est += (double)w.wait_ns;
	}
	return NULL;
}

START_TEST(test_threads_sample_independently)
{
	lock_sample_set_interval(10000);
	pthread_t t[THREADS];
	struct thread_result res[THREADS] = {{0, 0}};
	for (int i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, waiter, &res[i]), 0);
	double est = 0, truth = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		est += res[i].est;
		truth += res[i].truth;
	}
	/* ~4 s of waiting at 10 us: 400 000 points, a 0.16% spread. */
	ck_assert_msg(fabs(est / truth - 1.0) < 0.01, "estimate/truth %.4f", est / truth);
}
END_TEST

START_TEST(test_a_fork_child_draws_differently_from_its_parent)
{
	lock_sample_set_interval(4096);
	struct lock_sample_weights w;
	lock_sample_wait(1, &w); /* seeded */
	int fds[2];
	ck_assert_int_eq(pipe(fds), 0);
	pid_t pid = fork();
	if (pid == 0) {
		lock_sample_after_fork_child();
		uint64_t d = (uint64_t)alloc_sample_draw(&lock_sample_tls, 1u << 30);
		_exit(write(fds[1], &d, sizeof(d)) == sizeof(d) ? 0 : 1);
	}
	uint64_t mine = (uint64_t)alloc_sample_draw(&lock_sample_tls, 1u << 30), theirs = 0;
	ck_assert_int_eq(read(fds[0], &theirs, sizeof(theirs)), sizeof(theirs));
	int st;
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_uint_ne(mine, theirs);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

static Suite *lock_sample_suite(void)
{
	Suite *s = suite_create("lock_sample");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_weights_estimate_the_wait_and_the_count_of_each_site_without_bias);
	tcase_add_test(tc, test_a_wait_many_intervals_long_weighs_its_crossings_and_counts_once);
	tcase_add_test(tc, test_the_unsampled_path_only_counts_down_and_a_thread_seeds_itself);
	tcase_add_test(tc, test_threads_sample_independently);
	tcase_add_test(tc, test_a_fork_child_draws_differently_from_its_parent);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(lock_sample_suite());
}
