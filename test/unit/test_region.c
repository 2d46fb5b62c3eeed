/*
 * test_region.c - unit tests of agent/region.c: the lock-free bump allocator.
 *
 * Single-threaded: alignment, zeroed and disjoint blocks, the ceiling to the byte, the
 * refusal counter, reset giving back zeroed reusable memory. Multi-threaded: THREADS
 * threads allocate small blocks until the region is exhausted, stamping every block
 * with their id; afterwards no stamp may be damaged, no two blocks may overlap and the
 * bytes handed out must fit under the ceiling.
 */
#include "agent/region.h"

#include <check.h>

#include "test/unit/check_run.h"
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define THREADS 8
#define ROUNDS 3
#define STRESS_CEILING MIB
#define MAX_BLOCK 128 /* bytes, a multiple of 8 */
/* Enough room to record every block a thread could get: the region holds at most
 * STRESS_CEILING / REGION_ALIGN blocks in total. */
#define MAX_BLOCKS_PER_THREAD (STRESS_CEILING / REGION_ALIGN)

static size_t round_up(size_t size)
{
	return (size + REGION_ALIGN - 1) & ~(size_t)(REGION_ALIGN - 1);
}

static int all_bytes_are(const void *p, size_t n, uint8_t v)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		if (b[i] != v)
			return 0;
	}
	return 1;
}

START_TEST(test_alloc_returns_aligned_zeroed_disjoint_blocks)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, MIB), 0);
	enum { N = 500 };
	uint8_t *blocks[N];
	size_t sizes[N];
	size_t expect_used = 0;
	for (int i = 0; i < N; i++) {
		sizes[i] = 1 + (size_t)(i * 37) % 200;
		blocks[i] = region_alloc(&r, sizes[i]);
		ck_assert_msg(blocks[i] != NULL, "alloc %d of %zu bytes: expected memory, saw NULL",
			      i, sizes[i]);
		ck_assert_msg((uintptr_t)blocks[i] % REGION_ALIGN == 0,
			      "alloc %d: expected %d-byte alignment, saw address %p", i,
			      REGION_ALIGN, (void *)blocks[i]);
		ck_assert_msg(blocks[i] >= r.base && blocks[i] + sizes[i] <= r.base + r.ceiling,
			      "alloc %d: block %p outside the reservation", i, (void *)blocks[i]);
		ck_assert_msg(all_bytes_are(blocks[i], sizes[i], 0),
			      "alloc %d: expected zeroed memory, saw non-zero bytes", i);
		memset(blocks[i], (uint8_t)(i + 1), sizes[i]);
		expect_used += round_up(sizes[i]);
		ck_assert_msg(region_used(&r) == expect_used,
			      "alloc %d: expected used %zu, saw %zu", i, expect_used,
			      region_used(&r));
	}
	/* Writing every block with its own byte damaged no other block. */
	for (int i = 0; i < N; i++)
		ck_assert_msg(all_bytes_are(blocks[i], sizes[i], (uint8_t)(i + 1)),
			      "block %d: expected its own pattern 0x%02x, saw it overwritten", i,
			      (uint8_t)(i + 1));
	ck_assert_uint_eq(atomic_load(&r.refused), 0);
	region_destroy(&r);
}
END_TEST

START_TEST(test_alloc_rounds_sizes_up_to_the_alignment)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, 4 * KIB), 0);
	uint8_t *a = region_alloc(&r, 1);
	uint8_t *b = region_alloc(&r, REGION_ALIGN);
	uint8_t *c = region_alloc(&r, REGION_ALIGN + 1);
	uint8_t *d = region_alloc(&r, 0);
	ck_assert_ptr_eq(a, r.base);
	ck_assert_msg(b == a + REGION_ALIGN, "expected b at a+%d, saw a+%td", REGION_ALIGN, b - a);
	ck_assert_msg(c == b + REGION_ALIGN, "expected c at b+%d, saw b+%td", REGION_ALIGN, c - b);
	ck_assert_msg(d == c + 2 * REGION_ALIGN, "expected d at c+%d, saw c+%td", 2 * REGION_ALIGN,
		      d - c);
	ck_assert_uint_eq(region_used(&r), 4 * REGION_ALIGN);
	region_destroy(&r);
}
END_TEST

START_TEST(test_ceiling_is_respected_to_the_byte)
{
	struct region r;
	const size_t ceiling = 1000; /* not a multiple of the block size nor of a page */
	ck_assert_int_eq(region_init(&r, ceiling), 0);
	size_t n = 0;
	while (region_alloc(&r, 48) != NULL)
		n++;
	ck_assert_msg(n == ceiling / 48, "expected %zu blocks of 48 bytes, saw %zu", ceiling / 48,
		      n);
	ck_assert_msg(region_used(&r) == n * 48 && region_used(&r) <= ceiling,
		      "expected used %zu <= %zu, saw %zu", n * 48, ceiling, region_used(&r));
	ck_assert_msg(atomic_load(&r.refused) == 1, "expected 1 refusal, saw %llu",
		      (unsigned long long)atomic_load(&r.refused));
	/* 40 bytes are left: 32 fit exactly, 17 (rounded to 32) do not anymore after. */
	size_t left = ceiling - region_used(&r);
	ck_assert_uint_eq(left, 40);
	ck_assert_ptr_eq(region_alloc(&r, 48), NULL);
	ck_assert_ptr_nonnull(region_alloc(&r, 32));
	ck_assert_ptr_eq(region_alloc(&r, 9), NULL); /* rounds to 16 > 8 left */
	ck_assert_msg(atomic_load(&r.refused) == 3, "expected 3 refusals, saw %llu",
		      (unsigned long long)atomic_load(&r.refused));
	ck_assert_uint_eq(region_used(&r), ceiling - 8);
	region_destroy(&r);
}
END_TEST

START_TEST(test_alloc_may_fill_the_ceiling_exactly)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, KIB), 0);
	ck_assert_ptr_nonnull(region_alloc(&r, 1000)); /* 1008 */
	uint8_t *last = region_alloc(&r, 16);
	ck_assert_msg(last == r.base + 1008, "expected the last 16 bytes, saw %p", (void *)last);
	ck_assert_uint_eq(region_used(&r), KIB);
	ck_assert_ptr_eq(region_alloc(&r, 1), NULL);
	ck_assert_uint_eq(region_used(&r), KIB);
	ck_assert_uint_eq(atomic_load(&r.refused), 1);
	region_destroy(&r);
}
END_TEST

START_TEST(test_alloc_larger_than_the_ceiling_reserves_nothing)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, 4 * KIB), 0);
	ck_assert_ptr_eq(region_alloc(&r, 4 * KIB + 1), NULL);
	ck_assert_ptr_eq(region_alloc(&r, SIZE_MAX / 2), NULL);
	ck_assert_uint_eq(region_used(&r), 0);
	ck_assert_uint_eq(atomic_load(&r.refused), 2);
	ck_assert_ptr_eq(region_alloc(&r, 4 * KIB), r.base);
	region_destroy(&r);
}
END_TEST

START_TEST(test_reset_makes_memory_reusable_and_zero)
{
	struct region r;
	const size_t ceiling = 3 * 4096 + 100; /* last page partly inside */
	ck_assert_int_eq(region_init(&r, ceiling), 0);
	for (int round = 0; round < 3; round++) {
		size_t n = 0;
		uint8_t *p;
		while ((p = region_alloc(&r, 64)) != NULL) {
			ck_assert_msg(p == r.base + n * 64,
				      "round %d: expected block %zu at +%zu, saw +%td", round, n,
				      n * 64, p - r.base);
			ck_assert_msg(all_bytes_are(p, 64, 0),
				      "round %d block %zu: expected zero after reset, saw pattern",
				      round, n);
			memset(p, 0xa5, 64);
			n++;
		}
		ck_assert_uint_eq(n, ceiling / 64);
		ck_assert_uint_ge(atomic_load(&r.refused), 1);
		region_reset(&r);
		ck_assert_msg(region_used(&r) == 0, "expected used 0 after reset, saw %zu",
			      region_used(&r));
		ck_assert_msg(atomic_load(&r.refused) == 0,
			      "expected refused 0 after reset, saw %llu",
			      (unsigned long long)atomic_load(&r.refused));
	}
	/* Also the tail that no block covered (bytes past the last whole block). */
	uint8_t *all = region_alloc(&r, ceiling & ~(size_t)(REGION_ALIGN - 1));
	ck_assert_ptr_eq(all, r.base);
	ck_assert(all_bytes_are(all, ceiling & ~(size_t)(REGION_ALIGN - 1), 0));
	region_destroy(&r);
}
END_TEST

START_TEST(test_reset_of_an_unused_region_is_harmless)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, 4 * KIB), 0);
	region_reset(&r);
	ck_assert_uint_eq(region_used(&r), 0);
	ck_assert_ptr_eq(region_alloc(&r, 16), r.base);
	region_destroy(&r);
	ck_assert_ptr_null(r.base);
	region_destroy(&r); /* twice is a no-op */
}
END_TEST

START_TEST(test_init_failure_returns_negative_errno_and_no_mapping)
{
	struct region r;
	memset(&r, 0xff, sizeof(r));
	/* More than any x86-64 / arm64 user address space. */
	int rc = region_init(&r, (size_t)1 << 62);
	ck_assert_msg(rc < 0, "expected a negative errno, saw %d", rc);
	ck_assert_ptr_null(r.base);
	region_destroy(&r); /* must not unmap anything */
}
END_TEST

/* --- multi-threaded stress --- */

struct block {
	uint64_t *p;
	size_t size; /* bytes requested, a multiple of 8 */
};

struct stress_thread {
	pthread_t thread;
	int id;
	struct region *r;
	pthread_barrier_t *start;
	struct block *blocks;
	size_t nblocks;
	size_t not_zero; /* blocks that were not zero when handed out */
	uint64_t refusals;
};

static uint64_t stamp(int thread, size_t block)
{
	return ((uint64_t)(thread + 1) << 48) | block;
}

static void *stress_main(void *arg)
{
	struct stress_thread *st = arg;
	pthread_barrier_wait(st->start);
	for (size_t i = 0; i < MAX_BLOCKS_PER_THREAD; i++) {
		size_t size = 8 * (1 + (i * 7 + (size_t)st->id) % (MAX_BLOCK / 8));
		uint64_t *p = region_alloc(st->r, size);
		if (!p) {
			st->refusals++;
			break;
		}
		if (!all_bytes_are(p, size, 0))
			st->not_zero++;
		for (size_t w = 0; w < size / 8; w++)
			p[w] = stamp(st->id, i);
		st->blocks[st->nblocks++] = (struct block){p, size};
	}
	return NULL;
}

static int by_address(const void *a, const void *b)
{
	const struct block *x = a, *y = b;
	return x->p < y->p ? -1 : x->p > y->p;
}

START_TEST(test_concurrent_allocs_never_overlap_and_fit_the_ceiling)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, STRESS_CEILING), 0);
	static struct stress_thread st[THREADS];
	struct block *all = calloc(THREADS * MAX_BLOCKS_PER_THREAD, sizeof(*all));
	ck_assert_ptr_nonnull(all);
	for (int round = 0; round < ROUNDS; round++) {
		pthread_barrier_t start;
		pthread_barrier_init(&start, NULL, THREADS);
		for (int t = 0; t < THREADS; t++) {
			st[t] = (struct stress_thread){.id = t, .r = &r, .start = &start};
			st[t].blocks = all + (size_t)t * MAX_BLOCKS_PER_THREAD;
			ck_assert_int_eq(pthread_create(&st[t].thread, NULL, stress_main, &st[t]),
					 0);
		}
		for (int t = 0; t < THREADS; t++)
			pthread_join(st[t].thread, NULL);
		pthread_barrier_destroy(&start);

		size_t total = 0, bytes = 0;
		uint64_t refusals = 0;
		for (int t = 0; t < THREADS; t++) {
			ck_assert_msg(st[t].not_zero == 0,
				      "round %d thread %d: expected zeroed blocks, saw %zu dirty",
				      round, t, st[t].not_zero);
			refusals += st[t].refusals;
			for (size_t i = 0; i < st[t].nblocks; i++) {
				const struct block *b = &st[t].blocks[i];
				size_t w = 0;
				while (w < b->size / 8 && b->p[w] == stamp(t, i))
					w++;
				if (w < b->size / 8)
					ck_abort_msg("round %d thread %d block %zu word %zu: "
						     "expected stamp %#llx, saw %#llx",
						     round, t, i, w,
						     (unsigned long long)stamp(t, i),
						     (unsigned long long)b->p[w]);
				all[total] = *b; /* compacts in place: total <= t*MAX + i */
				total++;
				bytes += round_up(b->size);
			}
		}
		ck_assert_msg(bytes == region_used(&r) && bytes <= STRESS_CEILING,
			      "round %d: expected used == %zu <= %zu, saw used %zu", round, bytes,
			      (size_t)STRESS_CEILING, region_used(&r));
		/* Every thread stopped on its first refusal, so the region is full to within
		 * one block. */
		ck_assert_msg(bytes > STRESS_CEILING - MAX_BLOCK,
			      "round %d: expected the region exhausted, saw %zu of %zu used", round,
			      bytes, (size_t)STRESS_CEILING);
		ck_assert_msg(atomic_load(&r.refused) == refusals,
			      "round %d: expected %llu refusals counted, saw %llu", round,
			      (unsigned long long)refusals,
			      (unsigned long long)atomic_load(&r.refused));
		qsort(all, total, sizeof(*all), by_address);
		for (size_t i = 0; i + 1 < total; i++) {
			if ((uint8_t *)all[i].p + round_up(all[i].size) > (uint8_t *)all[i + 1].p)
				ck_abort_msg(
				    "round %d: expected disjoint blocks, saw %p (+%zu) overlap %p",
				    round, (void *)all[i].p, all[i].size, (void *)all[i + 1].p);
		}
		region_reset(&r);
	}
	free(all);
	region_destroy(&r);
}
END_TEST

START_TEST(test_fork_child_starts_empty_and_parent_keeps_its_blocks)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, 64 * KIB), 0);
	uint8_t *p = region_alloc(&r, 4 * KIB);
	ck_assert_ptr_nonnull(p);
	memset(p, 0xAB, 4 * KIB);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int ok = region_after_fork(&r) == 0 && region_used(&r) == 0 &&
			 all_bytes_are(p, 4 * KIB, 0) && region_alloc(&r, 16) == p;
		_exit(ok ? 0 : 1);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert(all_bytes_are(p, 4 * KIB, 0xAB));
	ck_assert_uint_eq(region_used(&r), 4 * KIB);
	region_destroy(&r);
}
END_TEST

static Suite *region_suite(void)
{
	Suite *s = suite_create("region");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_alloc_returns_aligned_zeroed_disjoint_blocks);
	tcase_add_test(tc, test_alloc_rounds_sizes_up_to_the_alignment);
	tcase_add_test(tc, test_ceiling_is_respected_to_the_byte);
	tcase_add_test(tc, test_alloc_may_fill_the_ceiling_exactly);
	tcase_add_test(tc, test_alloc_larger_than_the_ceiling_reserves_nothing);
	tcase_add_test(tc, test_reset_makes_memory_reusable_and_zero);
	tcase_add_test(tc, test_reset_of_an_unused_region_is_harmless);
	tcase_add_test(tc, test_init_failure_returns_negative_errno_and_no_mapping);
	tcase_add_test(tc, test_concurrent_allocs_never_overlap_and_fit_the_ceiling);
	tcase_add_test(tc, test_fork_child_starts_empty_and_parent_keeps_its_blocks);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(region_suite());
}
