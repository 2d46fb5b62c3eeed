/*
 * check_run.h - the one way every unit suite runs: all tests, Check's normal output,
 * exit status 1 when any test failed. Context: test mains only.
 */
#ifndef DDPROF_TEST_UNIT_CHECK_RUN_H
#define DDPROF_TEST_UNIT_CHECK_RUN_H

#include <check.h>

static inline int check_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0 ? 1 : 0;
}

#endif
