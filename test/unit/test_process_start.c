/*
 * test_process_start.c - unit tests of common/process_start.c: when the process
 * started, on the wall clock.
 *
 * What a fork child's first profile relies on: the time is not in the future, not
 * before a moment taken just before the process was created, and for a child forked
 * now, within a clock tick (10 ms) and some scheduling slack of the fork.
 */
#include "common/process_start.h"

#include <check.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "test/unit/check_run.h"

#define MS 1000000ULL

START_TEST(test_start_is_in_the_past)
{
	uint64_t start = process_start_realtime_ns();
	uint64_t now = clock_now_ns(CLOCK_REALTIME);
	ck_assert_uint_gt(start, 0);
	ck_assert_uint_le(start, now);
	/* This test binary has not been running for an hour. */
	ck_assert_uint_lt(now - start, 3600ULL * 1000 * MS);
}
END_TEST

START_TEST(test_fork_child_starts_at_the_fork)
{
	uint64_t before = clock_now_ns(CLOCK_REALTIME);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct timespec ts = {0, 50 * (long)MS}; /* started well before it asks */
		nanosleep(&ts, NULL);
		uint64_t start = process_start_realtime_ns();
		/* A tick (10 ms) of resolution, truncated, plus clock read slack. */
		int ok = start + 20 * MS >= before && start <= before + 20 * MS;
		_exit(ok ? 0 : 1);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child's start is not within 20 ms of its fork");
}
END_TEST

static Suite *process_start_suite(void)
{
	Suite *s = suite_create("process_start");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_start_is_in_the_past);
	tcase_add_test(tc, test_fork_child_starts_at_the_fork);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(process_start_suite());
}
