/*
 * test_big_alloc.c - unit suite of common/big_alloc: blocks of either kind keep their
 * bytes through every resize, mappings are counted, and the application's malloc
 * policy (glibc's mmap threshold) is the same after large blocks came and went.
 * Context: test main.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/asan.h"
#include "common/big_alloc.h"
#include "test/unit/check_run.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static int same(const uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(seed + i * 7))
			return 0;
	return 1;
}

/* glibc's mark on a chunk it mapped for one allocation (its size word's bit 1). */
static int glibc_mapped(const void *p)
{
	uint64_t size_word;
	memcpy(&size_word, (const void *)((uintptr_t)p - 8), sizeof(size_word));
	return (size_word & 2) != 0;
}

START_TEST(test_sizes_across_the_threshold_keep_their_bytes)
{
	/* Small to mapped, mapped growing (mremap), mapped shrinking, back to small. */
	static const size_t steps[] = {16,	 1000,	    60 * KIB, 70 * KIB, 3 * MIB,
				       20 * MIB, 200 * KIB, 10 * KIB, 24,	1};
	uint8_t *p = NULL;
	size_t have = 0;
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		size_t n = steps[i];
		p = big_realloc(p, n);
		ck_assert_ptr_nonnull(p);
		size_t kept = have < n ? have : n;
		ck_assert_msg(same(p, kept, 3), "step %zu (%zu bytes): bytes lost", i, n);
		ck_assert_uint_eq((uintptr_t)p % 16, 0);
		fill(p, n, 3);
		have = n;
	}
	big_free(p);
	ck_assert_ptr_null(big_realloc(big_malloc(100), 0));
	big_free(NULL);
}
END_TEST

START_TEST(test_calloc_zeroes_and_refuses_overflow)
{
	uint64_t *a = big_calloc(100, sizeof(uint64_t));
	uint64_t *b = big_calloc(MIB, sizeof(uint64_t));
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	for (size_t i = 0; i < 100; i++)
		ck_assert_uint_eq(a[i], 0);
	for (size_t i = 0; i < MIB; i += 4099)
		ck_assert_uint_eq(b[i], 0);
	big_free(a);
	big_free(b);
	errno = 0;
	ck_assert_ptr_null(big_calloc(SIZE_MAX / 2, 4));
	ck_assert_int_eq(errno, ENOMEM);
	ck_assert_ptr_null(big_malloc(SIZE_MAX - 8));
	void *keep = big_malloc(100 * KIB);
	ck_assert_ptr_null(big_realloc(keep, SIZE_MAX - 8)); /* refused: keep stays */
	memset(keep, 1, 100 * KIB);
	big_free(keep);
}
END_TEST

START_TEST(test_mappings_are_counted_and_given_back)
{
	struct big_alloc_stats before, during, after;
	big_alloc_stats(&before);
	void *small = big_malloc(BIG_ALLOC_MAP_MIN / 2);
	void *big = big_malloc(5 * MIB);
	big_alloc_stats(&during);
	ck_assert_uint_ge(during.mapped_bytes - before.mapped_bytes, 5 * MIB);
	ck_assert_uint_lt(during.mapped_bytes - before.mapped_bytes, 5 * MIB + 8 * KIB);
	ck_assert_uint_ge(during.mapped_peak, during.mapped_bytes);
	big = big_realloc(big, 9 * MIB);
	ck_assert_ptr_nonnull(big);
	big_free(big);
	big_free(small);
	big_alloc_stats(&after);
	ck_assert_uint_eq(after.mapped_bytes, before.mapped_bytes);
	ck_assert_uint_ge(after.mapped_peak, before.mapped_bytes + 9 * MIB);
}
END_TEST

/* In a child: large blocks of this module come and go, then the child's own 256 KiB
 * malloc must still be a mapping of glibc's (its threshold not raised). With plain
 * malloc/free of the same blocks (control), it is not: the check can fail. */
static int child_threshold_kept(int use_big)
{
	for (size_t n = 200 * KIB; n <= 16 * MIB; n *= 2) {
		void *p = use_big ? big_malloc(n) : malloc(n);
		if (!p)
			return 0;
		memset(p, 1, 4096);
		if (use_big)
			big_free(p);
		else
			free(p);
	}
	void *app = malloc(256 * KIB);
	return app && glibc_mapped(app);
}

static int in_child(int use_big)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(child_threshold_kept(use_big) ? 0 : 1);
	int st = 0;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st) == 0;
}

START_TEST(test_glibc_threshold_unchanged_by_large_blocks)
{
	ck_assert_msg(in_child(1), "big_alloc's blocks raised glibc's mmap threshold");
	ck_assert_msg(!in_child(0), "control: malloc/free of large blocks should raise it");
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("big_alloc");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_sizes_across_the_threshold_keep_their_bytes);
	tcase_add_test(tc, test_calloc_zeroes_and_refuses_overflow);
	tcase_add_test(tc, test_mappings_are_counted_and_given_back);
	/* glibc's policy: AddressSanitizer's allocator replaces glibc's in that build. */
	if (!DDPROF_ASAN)
		tcase_add_test(tc, test_glibc_threshold_unchanged_by_large_blocks);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(suite());
}
