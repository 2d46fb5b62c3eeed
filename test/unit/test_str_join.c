/*
 * test_str_join.c - unit tests of common/str_join.h: parts joined in order, always
 * NUL-terminated, false and a cut result when they do not fit.
 */
#include "common/str_join.h"

#include <check.h>
#include <string.h>

#include "test/unit/check_run.h"

START_TEST(test_parts_are_joined_in_order)
{
	char buf[32];
	const char *parts[] = {"file (", "/tmp/out", ")"};
	ck_assert(str_join(buf, sizeof(buf), parts, 3));
	ck_assert_str_eq(buf, "file (/tmp/out)");
}
END_TEST

START_TEST(test_exact_fit_and_one_byte_short)
{
	char buf[6];
	const char *parts[] = {"ab", "cde"};
	ck_assert(str_join(buf, sizeof(buf), parts, 2)); /* 5 bytes + NUL */
	ck_assert_str_eq(buf, "abcde");
	const char *more[] = {"ab", "cdef"};
	memset(buf, 'x', sizeof(buf));
	ck_assert(!str_join(buf, sizeof(buf), more, 2));
	ck_assert_str_eq(buf, "abcde"); /* cut, still terminated */
}
END_TEST

START_TEST(test_empty_parts_and_no_parts)
{
	char buf[4] = "zzz";
	const char *parts[] = {"", "a", ""};
	ck_assert(str_join(buf, sizeof(buf), parts, 3));
	ck_assert_str_eq(buf, "a");
	ck_assert(str_join(buf, sizeof(buf), parts, 0));
	ck_assert_str_eq(buf, "");
}
END_TEST

static Suite *str_join_suite(void)
{
	Suite *s = suite_create("str_join");
	TCase *tc = tcase_create("str_join");
	tcase_add_test(tc, test_parts_are_joined_in_order);
	tcase_add_test(tc, test_exact_fit_and_one_byte_short);
	tcase_add_test(tc, test_empty_parts_and_no_parts);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(str_join_suite());
}
