/*
 * test_alloc_sample.c - unit tests of agent/alloc/alloc_sample.c: the Poisson sampling
 * of allocated bytes.
 *
 * What the profiler relies on: the gaps between sample points are exponential with the
 * configured mean (mean and tail); the weights of the sampled allocations add up to an
 * unbiased estimate of the bytes allocated, per call site too, whatever the mix of sizes
 * (16 B to 1 MiB, and single allocations many intervals long), with the spread a
 * Poisson process has (an estimator that sampled every k-th interval instead would be
 * unbiased but too regular; one that ignored crossings would be biased low for large
 * sizes); the unsampled path changes nothing but the countdown; a thread's first
 * allocation seeds its state; a fork child draws differently from its parent.
 * Every run is seeded: the figures are reproducible.
 */
#include "agent/alloc/alloc_sample.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/unit/check_run.h"

START_TEST(test_gaps_are_exponential_with_the_mean)
{
	struct alloc_sample_state s = {0};
	alloc_sample_seed(&s, 42);
	const uint64_t mean = 512 * 1024;
	const int n = 1000000;
	double sum = 0;
	int above_mean = 0, above_3 = 0;
	for (int i = 0; i < n; i++) {
		int64_t g = alloc_sample_draw(&s, mean);
		ck_assert_int_ge(g, 1);
		ck_assert_int_le(g, (int64_t)(37 * mean));
		sum += (double)g;
		above_mean += g > (int64_t)mean;
		above_3 += g > (int64_t)(3 * mean);
	}
	/* Mean within 0.5% (its standard error is 0.1%); P(g > M) = e^-1, P(g > 3M) = e^-3. */
	ck_assert_double_eq_tol(sum / n / (double)mean, 1.0, 0.005);
	ck_assert_double_eq_tol((double)above_mean / n, exp(-1.0), 0.002);
	ck_assert_double_eq_tol((double)above_3 / n, exp(-3.0), 0.001);
}
END_TEST

/* Sizes 16 B to 1 MiB, log-uniform (most small, as in real programs). */
static size_t random_size(unsigned *r)
{
	double lg = 4.0 + 16.0 * ((double)rand_r(r) / RAND_MAX); /* 2^4 .. 2^20 */
	return (size_t)pow(2.0, lg);
}

START_TEST(test_weights_estimate_the_bytes_of_each_site_without_bias)
{
	/* 400 runs of ~32 MiB at two sites, 70% / 30% of the calls, interval 256 KiB: each
	 * run's estimate is noisy (its relative spread is sqrt(M / bytes), 9% for the
	 * total), their mean is not (0.45%). */
	const uint64_t mean = 256 * 1024;
	alloc_sample_set_interval(mean);
	const int runs = 400;
	double ratio_sum[2] = {0, 0}, ratio_sq[2] = {0, 0}, expect_rel_var[2] = {0, 0};
	for (int run = 0; run < runs; run++) {
		struct alloc_sample_state s = {0};
		alloc_sample_seed(&s, 1000 + run);
		s.until = alloc_sample_draw(&s, mean);
		unsigned r = run;
		uint64_t truth[2] = {0, 0}, est[2] = {0, 0};
		while (truth[0] + truth[1] < (32u << 20)) {
			int site = rand_r(&r) % 10 < 7 ? 0 : 1;
			size_t size = random_size(&r);
			truth[site] += size;
			est[site] += alloc_sample_bytes_on(&s, size);
		}
		for (int k = 0; k < 2; k++) {
			double q = (double)est[k] / (double)truth[k];
			ratio_sum[k] += q;
			ratio_sq[k] += q * q;
			expect_rel_var[k] += (double)mean / (double)truth[k];
		}
	}
	for (int k = 0; k < 2; k++) {
		double m = ratio_sum[k] / runs;
		double var = ratio_sq[k] / runs - m * m;
		double theory = expect_rel_var[k] / runs;
		/* Unbiased: within 4 standard errors of 1 (2.1% for the 30% site). */
		ck_assert_msg(fabs(m - 1.0) < 4.0 * sqrt(theory / runs),
			      "site %d: estimate/truth %.4f over %d runs", k, m, runs);
		/* A Poisson process's spread (chi-square bounds for 400 runs: +-20%). */
		ck_assert_msg(var > 0.8 * theory && var < 1.2 * theory,
			      "site %d: variance %.5f, a Poisson process has %.5f", k, var, theory);
	}
}
END_TEST

START_TEST(test_an_allocation_many_intervals_long_weighs_its_crossings)
{
	/* 1 GiB at once against a 4 KiB interval: 262144 points on average, counted in
	 * blocks past 64 and exactly below; the weight is their number times the
	 * interval. Over 50 such allocations the estimate is within 0.1% of 50 GiB. */
	const uint64_t mean = 4096;
	alloc_sample_set_interval(mean);
	struct alloc_sample_state s = {0};
	alloc_sample_seed(&s, 7);
	s.until = alloc_sample_draw(&s, mean);
	double est = 0;
	for (int i = 0; i < 50; i++) {
		uint64_t w = alloc_sample_bytes_on(&s, 1u << 30);
		ck_assert_uint_eq(w % mean, 0);
		est += (double)w;
	}
	ck_assert_double_eq_tol(est / (50.0 * (1u << 30)), 1.0, 0.001);
	alloc_sample_set_interval(0); /* the default again */
	ck_assert_uint_eq(alloc_sample_interval(), ALLOC_SAMPLE_DEFAULT_INTERVAL);
}
END_TEST

START_TEST(test_the_unsampled_path_only_counts_down_and_a_thread_seeds_itself)
{
	alloc_sample_set_interval(1 << 20);
	/* This thread's state, as a new thread finds it: zero. Its first allocation
	 * seeds it and starts the countdown there. */
	ck_assert_uint_eq(alloc_sample_tls.rng, 0);
	alloc_sample_bytes(16);
	ck_assert_uint_ne(alloc_sample_tls.rng, 0);
	int64_t left = alloc_sample_tls.until;
	uint64_t rng = alloc_sample_tls.rng;
	if (left > 100) {
		ck_assert_uint_eq(alloc_sample_bytes(100), 0);
		ck_assert_int_eq(alloc_sample_tls.until, left - 100);
		ck_assert_uint_eq(alloc_sample_tls.rng, rng); /* no draw */
	}
	/* Sampled at the point, with a multiple of the interval. */
	uint64_t w = alloc_sample_bytes((size_t)alloc_sample_tls.until);
	ck_assert_uint_ge(w, 1 << 20);
	ck_assert_uint_eq(w % (1 << 20), 0);
	ck_assert_int_gt(alloc_sample_tls.until, 0);
}
END_TEST

START_TEST(test_a_fork_child_draws_differently_from_its_parent)
{
	alloc_sample_set_interval(4096);
	alloc_sample_bytes(1); /* seeded */
	int fds[2];
	ck_assert_int_eq(pipe(fds), 0);
	pid_t pid = fork();
	if (pid == 0) {
		alloc_sample_after_fork_child();
		uint64_t d = (uint64_t)alloc_sample_draw(&alloc_sample_tls, 1u << 30);
		_exit(write(fds[1], &d, sizeof(d)) == sizeof(d) ? 0 : 1);
	}
	uint64_t mine = (uint64_t)alloc_sample_draw(&alloc_sample_tls, 1u << 30), theirs = 0;
	ck_assert_int_eq(read(fds[0], &theirs, sizeof(theirs)), sizeof(theirs));
	int st;
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_uint_ne(mine, theirs);
	close(fds[0]);
	close(fds[1]);
}
END_TEST
START_TEST(test_a_request_of_any_size_is_counted_at_once)
{
	/* The hooks count a request before the allocator refuses it: malloc(SIZE_MAX) is
	 * counted as INT64_MAX bytes (2^45 blocks of a 4 KiB interval, which a loop over
	 * blocks would take hours to pass: the tcase's timeout would fail it). Its weight
	 * is those bytes to within a few intervals, and the countdown is positive after. */
	const uint64_t mean = 4096;
	alloc_sample_set_interval(mean);
	struct alloc_sample_state s = {0};
	alloc_sample_seed(&s, 11);
	s.until = alloc_sample_draw(&s, mean);
	uint64_t w = alloc_sample_bytes_on(&s, SIZE_MAX);
	uint64_t off = w > (uint64_t)INT64_MAX ? w - (uint64_t)INT64_MAX : (uint64_t)INT64_MAX - w;
	ck_assert_msg(off <= 100 * mean, "weight %llu for INT64_MAX bytes", (unsigned long long)w);
	ck_assert_int_gt(s.until, 0);
	alloc_sample_set_interval(0);
}
END_TEST

static Suite *alloc_sample_suite(void)
{
	Suite *s = suite_create("alloc_sample");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_gaps_are_exponential_with_the_mean);
	tcase_add_test(tc, test_weights_estimate_the_bytes_of_each_site_without_bias);
	tcase_add_test(tc, test_an_allocation_many_intervals_long_weighs_its_crossings);
	tcase_add_test(tc, test_a_request_of_any_size_is_counted_at_once);
	tcase_add_test(tc, test_the_unsampled_path_only_counts_down_and_a_thread_seeds_itself);
	tcase_add_test(tc, test_a_fork_child_draws_differently_from_its_parent);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(alloc_sample_suite());
}
