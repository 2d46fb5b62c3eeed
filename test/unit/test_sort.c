/*
 * test_sort.c - unit tests of common/sort.c: qsort's interface, no allocation, sorted
 * whatever the input's shape and element size, O(n log n) comparisons on an input made
 * to defeat a median of three.
 */
#include "common/sort.h"

#include <check.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/asan.h"
#include "test/unit/check_run.h"

static unsigned long comparisons;

/* Elements of any size: ordered by their first 4 bytes, the rest a copy of the key
 * (checked after the sort: a swap that tore an element shows). */
static int cmp_key(const void *a, const void *b)
{
	uint32_t x, y;
	memcpy(&x, a, sizeof(x));
	memcpy(&y, b, sizeof(y));
	comparisons++;
	return x < y ? -1 : x > y;
}

static void fill(char *v, size_t n, size_t size, uint32_t (*key)(size_t i, size_t n))
{
	for (size_t i = 0; i < n; i++) {
		uint32_t k = key(i, n);
		char *e = v + i * size;
		for (size_t b = 0; b < size; b++)
			e[b] = (char)((uint8_t *)&k)[b % sizeof(k)];
	}
}

/* Checked element by element, asserted once (each Check assertion writes a checkpoint). */
static void check_sorted(const char *v, size_t n, size_t size, const char *ref)
{
	for (size_t i = 0; i < n; i++) {
		const char *e = v + i * size;
		bool torn = false;
		for (size_t b = sizeof(uint32_t); b < size; b++)
			torn |= e[b] != e[b % sizeof(uint32_t)];
		if (torn || memcmp(e, ref + i * size, sizeof(uint32_t)) != 0)
			ck_abort_msg("element %zu %s (size %zu, n %zu)", i,
				     torn ? "torn" : "differs from qsort's order", size, n);
	}
}

static uint32_t k_random(size_t i, size_t n)
{
	(void)n;
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ULL;
	x ^= x >> 29;
	return (uint32_t)(x * 0xbf58476d1ce4e5b9ULL >> 32);
}
static uint32_t k_sorted(size_t i, size_t n)
{
	(void)n;
	return (uint32_t)i;
}
static uint32_t k_reversed(size_t i, size_t n)
{
	return (uint32_t)(n - i);
}
static uint32_t k_equal(size_t i, size_t n)
{
	(void)i;
	(void)n;
	return 7;
}
static uint32_t k_few(size_t i, size_t n)
{
	return k_random(i, n) % 3;
}
static uint32_t k_organ(size_t i, size_t n)
{
	return (uint32_t)(i < n / 2 ? i : n - i);
}
static uint32_t k_saw(size_t i, size_t n)
{
	(void)n;
	return (uint32_t)(i % 97);
}

/* Every shape x element sizes 4, 8, 12 (the unwind table's
 * chunks), 24, 100 (more than the swap's 64-byte step), at lengths around the
 * insertion-sort cut and far past it. */
START_TEST(test_sorted_like_qsort_whatever_the_shape_and_size)
{
	uint32_t (*const keys[])(size_t, size_t) = {k_random, k_sorted, k_reversed, k_equal,
						    k_few,    k_organ,	k_saw};
	const size_t sizes[] = {4, 8, 12, 24, 100};
	const size_t lengths[] = {0, 1, 2, 3, 12, 13, 50, 1000, 20011};
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
		for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			for (size_t l = 0; l < sizeof(lengths) / sizeof(lengths[0]); l++) {
				size_t n = lengths[l], size = sizes[s];
				char *v = malloc(n * size + 1), *ref = malloc(n * size + 1);
				fill(v, n, size, keys[k]);
				memcpy(ref, v, n * size);
				qsort(ref, n, size, cmp_key);
				sort_inplace(v, n, size, cmp_key);
				check_sorted(v, n, size, ref);
				free(v);
				free(ref);
			}
}
END_TEST

/* An adversary decides each comparison so that every pivot is the smallest element
 * ("a killer adversary for quicksort", McIlroy 1999): a plain quicksort makes n^2/2
 * comparisons; the depth limit's heapsort keeps it near n log n. */
static int *gas_val;
static int gas_candidate, gas_next;
#define GAS INT32_MAX

static int adv_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	comparisons++;
	if (gas_val[x] == GAS && gas_val[y] == GAS) {
		if (x == gas_candidate)
			gas_val[x] = gas_next++;
		else
			gas_val[y] = gas_next++;
	}
	if (gas_val[x] == GAS)
		gas_candidate = x;
	else if (gas_val[y] == GAS)
		gas_candidate = y;
	return gas_val[x] < gas_val[y] ? -1 : gas_val[x] > gas_val[y];
}

START_TEST(test_comparisons_stay_n_log_n_against_an_adversary)
{
	const int n = 20000;
	int *idx = malloc(n * sizeof(int));
	gas_val = malloc(n * sizeof(int));
	for (int i = 0; i < n; i++) {
		idx[i] = i;
		gas_val[i] = GAS;
	}
	gas_next = 0;
	comparisons = 0;
	sort_inplace(idx, n, sizeof(int), adv_cmp);
	int unsorted = 0;
	for (int i = 1; i < n; i++)
		unsorted += gas_val[idx[i - 1]] > gas_val[idx[i]];
	ck_assert_int_eq(unsorted, 0);
	/* log2(20000) = 14.3: a quicksort beaten by the adversary makes 2e8. */
	ck_assert_msg(comparisons < 8ul * n * 15, "%lu comparisons for %d elements", comparisons,
		      n);
	free(idx);
	free(gas_val);
}
END_TEST

/* The reason for the module: glibc's qsort of a 2 MiB array mallocs a buffer glibc maps,
 * and freeing it raises the mmap threshold (a later 1 MiB block comes from the heap);
 * sort_inplace leaves it (the block is mapped). Each in a child of its own. */
static int child_sorts(bool use_qsort)
{
	pid_t pid = fork();
	if (pid == 0) {
		size_t n = 2 << 20 >> 3;
		uint64_t *v =
		    mmap(NULL, n * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		for (size_t i = 0; i < n; i++)
			v[i] = k_random(i, n);
		struct mallinfo2 before = mallinfo2();
		if (use_qsort)
			qsort(v, n, 8, cmp_key);
		else
			sort_inplace(v, n, 8, cmp_key);
		struct mallinfo2 after = mallinfo2();
		uint8_t *p = malloc(1 << 20);
		uint64_t size_word;
		memcpy(&size_word, (const void *)((uintptr_t)p - 8), sizeof(size_word));
		int rc = (size_word & 2) ? 0 : 1; /* IS_MMAPPED */
		if (after.uordblks != before.uordblks || after.hblks != before.hblks)
			rc |= 2;
		_exit(rc);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

START_TEST(test_no_allocation_and_the_mmap_threshold_left_alone)
{
	if (DDPROF_ASAN)
		return; /* ASan's malloc: no glibc threshold, no mallinfo */
	ck_assert_msg(child_sorts(true) & 1, "control: glibc's qsort no longer raises the mmap "
					     "threshold: the test shows nothing");
	ck_assert_int_eq(child_sorts(false), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sort");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_sorted_like_qsort_whatever_the_shape_and_size);
	tcase_add_test(tc, test_comparisons_stay_n_log_n_against_an_adversary);
	tcase_add_test(tc, test_no_allocation_and_the_mmap_threshold_left_alone);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
