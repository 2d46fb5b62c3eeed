/*
 * test_digits.c - unit tests of common/digits.h: the number at the start of a string,
 * as the constructor reads /proc fields, the kernel and glibc versions and thread ids.
 */
#include "common/digits.h"

#include <check.h>

#include "test/unit/check_run.h"

START_TEST(test_reads_leading_number_and_stops_after_it)
{
	const char *end;
	ck_assert_uint_eq(digits_value("2.36", &end), 2);
	ck_assert_str_eq(end, ".36");
	ck_assert_uint_eq(digits_value(end + 1, &end), 36);
	ck_assert_str_eq(end, "");
	ck_assert_uint_eq(digits_value("6.18.44-fc-v769", NULL), 6);
	ck_assert_uint_eq(digits_value("4194303", NULL), 4194303); /* pid_max */
}
END_TEST

START_TEST(test_skips_blanks_like_proc_status)
{
	/* "Seccomp:\t2\n" in /proc/self/status */
	ck_assert_uint_eq(digits_value("\t2\nSeccomp_filters:\t1\n", NULL), 2);
	ck_assert_uint_eq(digits_value("  17 ", NULL), 17);
}
END_TEST

START_TEST(test_no_digits_is_zero_and_huge_is_bounded)
{
	const char *end;
	ck_assert_uint_eq(digits_value("", &end), 0);
	ck_assert_uint_eq(digits_value("x12", &end), 0);
	ck_assert_str_eq(end, "x12");
	ck_assert_uint_eq(digits_value("-3", NULL), 0);
	unsigned big = digits_value("99999999999999999999", &end);
	ck_assert_uint_ge(big, 100000000u);
	ck_assert_uint_lt(big, 1000000000u);
	ck_assert_str_eq(end, "");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("digits");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_reads_leading_number_and_stops_after_it);
	tcase_add_test(tc, test_skips_blanks_like_proc_status);
	tcase_add_test(tc, test_no_digits_is_zero_and_huge_is_bounded);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
