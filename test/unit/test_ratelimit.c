/*
 * test_ratelimit.c - unit tests of uploader/ratelimit.c: one warning per kind per
 * interval, the count of the ones held back, kinds independent. Time is passed in.
 */
#include "uploader/ratelimit.h"

#include <check.h>

#include "test/unit/check_run.h"

#define SEC 1000000000ULL
#define MINUTE (60 * SEC)
#define T0 (1000 * SEC) /* an arbitrary monotonic start */

START_TEST(test_first_warning_of_a_kind_is_allowed)
{
	struct ratelimit rl;
	uint64_t suppressed = 99;
	ratelimit_init(&rl, MINUTE);
	ck_assert(ratelimit_allow(&rl, 1, T0, &suppressed));
	ck_assert_uint_eq(suppressed, 0);
}
END_TEST

START_TEST(test_one_warning_per_kind_per_minute)
{
	struct ratelimit rl;
	ratelimit_init(&rl, MINUTE);
	ck_assert(ratelimit_allow(&rl, 2, T0, NULL));
	/* One attempt per second for a minute: all refused. */
	for (uint64_t s = 1; s < 60; s++)
		ck_assert_msg(!ratelimit_allow(&rl, 2, T0 + s * SEC, NULL),
			      "allowed again %llu s after the first", (unsigned long long)s);
	uint64_t suppressed = 0;
	ck_assert(ratelimit_allow(&rl, 2, T0 + MINUTE, &suppressed));
	ck_assert_uint_eq(suppressed, 59);
	/* The count restarts after each allowed warning. */
	ck_assert(!ratelimit_allow(&rl, 2, T0 + MINUTE + SEC, NULL));
	ck_assert(ratelimit_allow(&rl, 2, T0 + 3 * MINUTE, &suppressed));
	ck_assert_uint_eq(suppressed, 1);
}
END_TEST

START_TEST(test_kinds_are_independent)
{
	struct ratelimit rl;
	ratelimit_init(&rl, MINUTE);
	ck_assert(ratelimit_allow(&rl, 1, T0, NULL));
	ck_assert(ratelimit_allow(&rl, 3, T0 + SEC, NULL));
	ck_assert(!ratelimit_allow(&rl, 1, T0 + 2 * SEC, NULL));
	ck_assert(!ratelimit_allow(&rl, 3, T0 + 2 * SEC, NULL));
}
END_TEST

START_TEST(test_out_of_range_kinds_share_the_last_slot)
{
	struct ratelimit rl;
	ratelimit_init(&rl, MINUTE);
	ck_assert(ratelimit_allow(&rl, RATELIMIT_KINDS + 5, T0, NULL));
	ck_assert(!ratelimit_allow(&rl, RATELIMIT_KINDS - 1, T0 + SEC, NULL));
}
END_TEST

START_TEST(test_clock_going_back_does_not_reopen_the_gate)
{
	struct ratelimit rl;
	ratelimit_init(&rl, MINUTE);
	ck_assert(ratelimit_allow(&rl, 0, T0, NULL));
	ck_assert(!ratelimit_allow(&rl, 0, T0 - 10 * MINUTE, NULL));
}
END_TEST

static Suite *ratelimit_suite(void)
{
	Suite *s = suite_create("ratelimit");
	TCase *tc = tcase_create("ratelimit");
	tcase_add_test(tc, test_first_warning_of_a_kind_is_allowed);
	tcase_add_test(tc, test_one_warning_per_kind_per_minute);
	tcase_add_test(tc, test_kinds_are_independent);
	tcase_add_test(tc, test_out_of_range_kinds_share_the_last_slot);
	tcase_add_test(tc, test_clock_going_back_does_not_reopen_the_gate);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(ratelimit_suite());
}
