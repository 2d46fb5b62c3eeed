/*
 * test_thread_names.c - unit tests of agent/sample/thread_names.c: the snapshot of
 * thread names a profile's encoder reads.
 *
 * What the encoder relies on: one name per tid, the live thread's where a tid was
 * reused (an ended thread's entry may linger until the reap), found by tid whatever
 * order the registry held them in; an unknown tid, an empty or a freed snapshot give
 * NULL.
 */
#include "agent/sample/thread_names.h"

#include <check.h>

#include "common/big_alloc.h"
#include "test/unit/check_run.h"
#include <stdlib.h>
#include <string.h>

static struct thread_name *names_of(const struct thread_name *src, size_t n)
{
	struct thread_name *v = big_malloc(n * sizeof(*v));
	ck_assert_ptr_nonnull(v);
	memcpy(v, src, n * sizeof(*v));
	return v;
}

START_TEST(test_one_name_per_tid_the_live_one_found_in_any_order)
{
	const struct thread_name src[] = {
	    {.tid = 300, .live = false, .name = "old-worker"},
	    {.tid = 100, .live = true, .name = "main"},
	    {.tid = 300, .live = true, .name = "new-worker"},
	    {.tid = 200, .live = false, .name = "ended"},
	    {.tid = 50, .live = true, .name = "early"},
	};
	struct thread_names t;
	thread_names_adopt(&t, names_of(src, 5), 5);
	ck_assert_uint_eq(t.n, 4);
	for (size_t i = 1; i < t.n; i++)
		ck_assert_int_lt(t.v[i - 1].tid, t.v[i].tid);
	ck_assert_str_eq(thread_names_find(&t, 300), "new-worker");
	ck_assert_str_eq(thread_names_find(&t, 200), "ended");
	ck_assert_str_eq(thread_names_find(&t, 100), "main");
	ck_assert_str_eq(thread_names_find(&t, 50), "early");
	ck_assert_ptr_null(thread_names_find(&t, 301));
	ck_assert_ptr_null(thread_names_find(&t, 0));
	thread_names_free(&t);
	ck_assert_uint_eq(t.n, 0);
	ck_assert_ptr_null(thread_names_find(&t, 300));
}
END_TEST

START_TEST(test_the_live_name_wins_whichever_comes_first)
{
	const struct thread_name src[] = {
	    {.tid = 7, .live = true, .name = "live"},
	    {.tid = 7, .live = false, .name = "gone"},
	};
	struct thread_names t;
	thread_names_adopt(&t, names_of(src, 2), 2);
	ck_assert_uint_eq(t.n, 1);
	ck_assert_str_eq(thread_names_find(&t, 7), "live");
	thread_names_free(&t);
}
END_TEST

START_TEST(test_empty_and_missing_snapshots_know_no_name)
{
	struct thread_names t = {NULL, 0};
	ck_assert_ptr_null(thread_names_find(&t, 1));
	ck_assert_ptr_null(thread_names_find(NULL, 1));
	thread_names_free(&t);
}
END_TEST

static Suite *thread_names_suite(void)
{
	Suite *s = suite_create("thread_names");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_one_name_per_tid_the_live_one_found_in_any_order);
	tcase_add_test(tc, test_the_live_name_wins_whichever_comes_first);
	tcase_add_test(tc, test_empty_and_missing_snapshots_know_no_name);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(thread_names_suite());
}
