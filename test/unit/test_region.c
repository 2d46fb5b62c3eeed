/*
 * test_region.c - unit tests of agent/store/region.c: the lock-free bump allocator over chunks
 * mapped on demand, single-threaded (test_region_stress.c: many threads, and fork).
 *
 * Alignment, zeroed and disjoint blocks, the ceiling to the byte (in one chunk and
 * across chunks), the refusal counter; only the first chunk mapped at init; room asked
 * for past two thirds of what is mapped, refusal while no mapped chunk has room, the
 * next chunk taken once mapped, doubling chunks; reset giving back zeroed reusable
 * memory and unmapping the chunks never reached; a failed mapping asking no more until
 * the reset.
 */
#include "test/unit/region_checks.h"

#include "test/unit/check_run.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

START_TEST(test_alloc_returns_aligned_zeroed_disjoint_blocks)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, &map, MIB, MIB), 0);
	uint8_t *base = r.map->base[0];
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
		ck_assert_msg(blocks[i] >= base && blocks[i] + sizes[i] <= base + r.ceiling,
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
	ck_assert_int_eq(region_init(&r, &map, 4 * KIB, 4 * KIB), 0);
	uint8_t *a = region_alloc(&r, 1);
	uint8_t *b = region_alloc(&r, REGION_ALIGN);
	uint8_t *c = region_alloc(&r, REGION_ALIGN + 1);
	uint8_t *d = region_alloc(&r, 0);
	ck_assert_ptr_eq(a, r.map->base[0]);
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
	ck_assert_int_eq(region_init(&r, &map, ceiling, ceiling), 0);
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
	ck_assert_int_eq(region_init(&r, &map, KIB, KIB), 0);
	ck_assert_ptr_nonnull(region_alloc(&r, 1000)); /* 1008 */
	uint8_t *last = region_alloc(&r, 16);
	ck_assert_msg(last == r.map->base[0] + 1008, "expected the last 16 bytes, saw %p",
		      (void *)last);
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
	ck_assert_int_eq(region_init(&r, &map, 4 * KIB, 4 * KIB), 0);
	ck_assert_ptr_eq(region_alloc(&r, 4 * KIB + 1), NULL);
	ck_assert_ptr_eq(region_alloc(&r, SIZE_MAX / 2), NULL);
	ck_assert_uint_eq(region_used(&r), 0);
	ck_assert_uint_eq(atomic_load(&r.refused), 2);
	ck_assert_ptr_eq(region_alloc(&r, 4 * KIB), r.map->base[0]);
	region_destroy(&r);
}
END_TEST

START_TEST(test_reset_makes_memory_reusable_and_zero)
{
	struct region r;
	const size_t ceiling = 3 * 4096 + 100; /* last page partly inside */
	ck_assert_int_eq(region_init(&r, &map, ceiling, ceiling), 0);
	uint8_t *base = r.map->base[0];
	for (int round = 0; round < 3; round++) {
		size_t n = 0;
		uint8_t *p;
		while ((p = region_alloc(&r, 64)) != NULL) {
			ck_assert_msg(p == base + n * 64,
				      "round %d: expected block %zu at +%zu, saw +%td", round, n,
				      n * 64, p - base);
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
	ck_assert_ptr_eq(all, base);
	ck_assert(all_bytes_are(all, ceiling & ~(size_t)(REGION_ALIGN - 1), 0));
	region_destroy(&r);
}
END_TEST

START_TEST(test_reset_of_an_unused_region_is_harmless)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, &map, 4 * KIB, 4 * KIB), 0);
	region_reset(&r);
	ck_assert_uint_eq(region_used(&r), 0);
	ck_assert_ptr_eq(region_alloc(&r, 16), r.map->base[0]);
	region_destroy(&r);
	ck_assert_ptr_null(r.map);
	region_destroy(&r); /* twice is a no-op */
}
END_TEST

START_TEST(test_init_failures_return_negative_errno_and_no_mapping)
{
	struct region r, other;
	ck_assert_int_eq(region_init(&r, &map, MIB, 4 * KIB), 0);
	/* A map serves one region at a time. */
	ck_assert_int_eq(region_init(&other, &map, MIB, 4 * KIB), -EBUSY);
	ck_assert_ptr_null(other.map);
	region_destroy(&other); /* must not unmap anything */
	ck_assert_uint_eq(chunks_mapped(&r), 1);
	region_destroy(&r);
	/* 24 doublings of 4 KiB reach 32 GiB, not 1 TiB. */
	ck_assert_int_eq(region_init(&r, &map, (size_t)1 << 40, 4 * KIB), -EINVAL);
	ck_assert_ptr_null(r.map);
	/* More than any x86-64 / arm64 user address space in one chunk. */
	memset(&r, 0xff, sizeof(r));
	int rc = region_init(&r, &map, (size_t)1 << 50, (size_t)1 << 50);
	ck_assert_msg(rc == -ENOMEM, "expected -ENOMEM, saw %d", rc);
	ck_assert_ptr_null(r.map);
	ck_assert_uint_eq(chunks_mapped(&(struct region){.map = &map}), 0);
	region_destroy(&r);
	/* The map is free again. */
	ck_assert_int_eq(region_init(&r, &map, MIB, 4 * KIB), 0);
	region_destroy(&r);
}
END_TEST

/* --- chunks --- */

START_TEST(test_init_maps_the_first_chunk_only)
{
	struct region r;
	long before = vm_size_kib();
	ck_assert_int_eq(region_init(&r, &map, 64 * MIB, MIB), 0);
	long grew = vm_size_kib() - before;
	/* One reservation of the ceiling, the old way, grew it by 65536 KiB. */
	ck_assert_msg(grew == (long)(MIB / KIB),
		      "expected the address space to grow by the first chunk, 1024 KiB, saw "
		      "%ld KiB",
		      grew);
	ck_assert_uint_eq(chunks_mapped(&r), 1);
	ck_assert_uint_eq(region_mapped(&r), MIB);
	ck_assert(range_mapped(r.map->base[0], MIB));
	/* 1 + 1 + 2 + 4 + 8 + 16 + 32 MiB */
	ck_assert_uint_eq(r.chunks_max, 7);
	region_destroy(&r);
	ck_assert_msg(vm_size_kib() == before,
		      "expected the chunk unmapped, saw VmSize %ld KiB, "
		      "%ld before",
		      vm_size_kib(), before);
}
END_TEST

START_TEST(test_room_is_asked_for_past_two_thirds_of_what_is_mapped)
{
	struct region r;
	/* 12 KiB chunks: room is wanted past 8 KiB used. */
	ck_assert_int_eq(region_init(&r, &map, MIB, 12 * KIB), 0);
	for (int i = 0; i < 128; i++) /* 8192 bytes: not past */
		ck_assert_ptr_nonnull(region_alloc(&r, 64));
	ck_assert_msg(!region_wants_room(&r), "expected no request at %zu of %zu bytes",
		      region_used(&r), region_mapped(&r));
	ck_assert_ptr_nonnull(region_alloc(&r, 64));
	ck_assert_msg(region_wants_room(&r), "expected a request at %zu of %zu bytes",
		      region_used(&r), region_mapped(&r));
	ck_assert_int_eq(region_grow(&r), 0);
	ck_assert_msg(!region_wants_room(&r), "expected the request served");
	/* One chunk of 12 KiB more leaves 15.9 of 24 KiB ahead: a third is enough. */
	ck_assert_msg(region_mapped(&r) == 24 * KIB && chunks_mapped(&r) == 2,
		      "expected 2 chunks, 24 KiB, saw %u, %zu bytes", chunks_mapped(&r),
		      region_mapped(&r));
	/* Nothing more until two thirds of 24 KiB. */
	ck_assert_int_eq(region_grow(&r), 0);
	ck_assert_uint_eq(chunks_mapped(&r), 2);
	while (region_used(&r) < 16 * KIB)
		ck_assert_ptr_nonnull(region_alloc(&r, 64));
	ck_assert(!region_wants_room(&r));
	ck_assert_ptr_nonnull(region_alloc(&r, 64));
	ck_assert(region_wants_room(&r));
	region_destroy(&r);
}
END_TEST

START_TEST(test_alloc_refuses_without_mapped_room_and_takes_the_next_chunk_once_mapped)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, &map, 64 * KIB, 4 * KIB), 0);
	for (int i = 0; i < 64; i++)
		ck_assert_ptr_nonnull(region_alloc(&r, 64));
	ck_assert_ptr_eq(region_alloc(&r, 64), NULL);
	ck_assert_uint_eq(atomic_load(&r.refused), 1);
	ck_assert_uint_eq(region_used(&r), 4 * KIB);
	ck_assert(region_wants_room(&r));
	ck_assert_int_eq(region_grow(&r), 0);
	ck_assert_uint_eq(chunks_mapped(&r), 2);
	uint8_t *p = region_alloc(&r, 64);
	ck_assert_msg(p == r.map->base[1], "expected the start of chunk 1 %p, saw %p",
		      (void *)r.map->base[1], (void *)p);
	/* 4000 fit in what is left of chunk 1 (4032), then 64 do not: the 32 bytes left
	 * are skipped, the block goes to chunk 2 once it is mapped. */
	ck_assert_ptr_eq(region_alloc(&r, 4000), p + 64);
	ck_assert_ptr_eq(region_alloc(&r, 64), NULL);
	ck_assert_uint_eq(atomic_load(&r.refused), 2);
	ck_assert_int_eq(region_grow(&r), 0);
	ck_assert_uint_eq(chunks_mapped(&r), 3);
	ck_assert_ptr_eq(region_alloc(&r, 64), r.map->base[2]);
	ck_assert_uint_eq(region_used(&r), 8 * KIB + 64);
	/* A block goes to the next chunk or nowhere: bigger than chunk 3 (16 KiB), it is
	 * refused though chunk 4 (32 KiB) is mapped. */
	ck_assert_int_eq(region_reserve(&r, 64 * KIB), 0);
	ck_assert_uint_eq(chunks_mapped(&r), 5);
	ck_assert_ptr_eq(region_alloc(&r, 16 * KIB + 16), NULL);
	ck_assert_ptr_eq(region_alloc(&r, 16 * KIB), r.map->base[3]);
	ck_assert_ptr_eq(region_alloc(&r, 16), r.map->base[4]);
	region_destroy(&r);
}
END_TEST

START_TEST(test_chunks_double_and_stop_at_the_ceiling_to_the_byte)
{
	struct region r;
	const size_t ceiling = 100000; /* not a power of two nor a multiple of a page */
	ck_assert_int_eq(region_init(&r, &map, ceiling, 4 * KIB), 0);
	/* 4, 4, 8, 16, 32 KiB, then the 34464 bytes left. */
	const size_t expect[] = {4096, 4096, 8192, 16384, 32768, 34464};
	ck_assert_uint_eq(r.chunks_max, 6);
	size_t blocks = 0, expect_blocks = 0;
	for (unsigned i = 0; i < 6; i++) {
		ck_assert_msg(chunk_bytes(&r, i) == expect[i], "chunk %u: expected %zu, saw %zu", i,
			      expect[i], chunk_bytes(&r, i));
		expect_blocks += expect[i] / 48;
	}
	long before = vm_size_kib();
	ck_assert_int_eq(region_reserve(&r, SIZE_MAX), 0);
	ck_assert_uint_eq(chunks_mapped(&r), 6);
	ck_assert_uint_eq(region_mapped(&r), ceiling);
	/* Whole pages: the last chunk takes 9. */
	ck_assert_int_eq(vm_size_kib() - before, (4 + 8 + 16 + 32 + 36));
	for (unsigned i = 0; i < 6; i++)
		ck_assert_msg(range_mapped(r.map->base[i], expect[i]), "chunk %u not mapped", i);
	uint8_t *p;
	while ((p = region_alloc(&r, 48)) != NULL) {
		ck_assert_msg(chunk_of(&r, p, 48) >= 0, "block %zu at %p outside every chunk",
			      blocks, (void *)p);
		blocks++;
	}
	ck_assert_msg(blocks == expect_blocks, "expected %zu blocks of 48 bytes, saw %zu",
		      expect_blocks, blocks);
	ck_assert_msg(region_used(&r) == ceiling, "expected used %zu, saw %zu", ceiling,
		      region_used(&r));
	ck_assert_uint_eq(atomic_load(&r.refused), 1);
	/* The ceiling is final: nothing to ask for, nothing to map. */
	ck_assert(!region_wants_room(&r));
	ck_assert_int_eq(region_grow(&r), 0);
	ck_assert_uint_eq(chunks_mapped(&r), 6);
	region_destroy(&r);
}
END_TEST

START_TEST(test_reset_gives_pages_back_and_unmaps_the_chunks_never_reached)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, &map, MIB, 4 * KIB), 0);
	ck_assert_int_eq(region_reserve(&r, 64 * KIB), 0); /* 4 + 4 + 8 + 16 + 32 */
	ck_assert_uint_eq(chunks_mapped(&r), 5);
	uint8_t *base[5];
	memcpy(base, r.map->base, sizeof(base));
	/* Chunks 0 and 1 full, 100 blocks into chunk 2. */
	for (int i = 0; i < 128 + 100; i++)
		memset(region_alloc(&r, 64), 0xa5, 64);
	ck_assert_int_eq(chunk_of(&r, base[2] + 99 * 64, 64), 2);
	ck_assert_uint_eq(region_used(&r), 8 * KIB + 6400);
	ck_assert_uint_eq(resident_pages(base[2], 8 * KIB), 2);
	region_reset(&r);
	ck_assert_msg(chunks_mapped(&r) == 3 && region_mapped(&r) == 16 * KIB,
		      "expected the 3 chunks reached kept (16 KiB), saw %u (%zu bytes)",
		      chunks_mapped(&r), region_mapped(&r));
	ck_assert_msg(!range_mapped(base[3], 16 * KIB) && !range_mapped(base[4], 32 * KIB),
		      "expected chunks 3 and 4 unmapped");
	for (int i = 0; i < 3; i++)
		ck_assert_msg(resident_pages(base[i], chunk_bytes(&r, (unsigned)i)) == 0,
			      "chunk %d: expected its pages given back", i);
	ck_assert_uint_eq(region_used(&r), 0);
	ck_assert_uint_eq(atomic_load(&r.refused), 0);
	ck_assert(!region_wants_room(&r));
	/* Zero and in order again, through the kept chunks. */
	for (int i = 0; i < 128 + 100; i++) {
		uint8_t *p = region_alloc(&r, 64);
		ck_assert_ptr_eq(p,
				 base[i / 64 < 2 ? i / 64 : 2] + (i < 128 ? i % 64 : i - 128) * 64);
		ck_assert(all_bytes_are(p, 64, 0));
	}
	/* A period that stays in chunk 0 keeps chunk 0 only. */
	region_reset(&r);
	region_alloc(&r, 64);
	region_reset(&r);
	ck_assert_uint_eq(chunks_mapped(&r), 1);
	ck_assert_uint_eq(region_mapped(&r), 4 * KIB);
	region_destroy(&r);
}
END_TEST

/* In a child: the checks of test_a_failed_growth_asks_no_more_until_reset (exit status
 * 0, else the number of the check that failed). */
static int failed_growth_checks(void)
{
	struct region r;
	if (region_init(&r, &map, 64 * MIB, MIB) != 0)
		return 1;
	struct rlimit old, low;
	getrlimit(RLIMIT_AS, &old);
	low = old;
	low.rlim_cur = (rlim_t)vm_size_kib() * KIB + 64 * KIB; /* no room for 1 MiB more */
	if (setrlimit(RLIMIT_AS, &low) != 0)
		return 2;
	while (region_alloc(&r, 4 * KIB))
		;
	if (!region_wants_room(&r))
		return 3;
	if (region_grow(&r) != -ENOMEM || chunks_mapped(&r) != 1)
		return 4;
	/* Refused again and again: no request, no mapping tried in a loop. */
	for (int i = 0; i < 10; i++)
		if (region_alloc(&r, 64) || region_wants_room(&r))
			return 5;
	setrlimit(RLIMIT_AS, &old);
	region_reset(&r); /* the next period tries again */
	while (region_alloc(&r, 4 * KIB))
		;
	if (!region_wants_room(&r) || region_grow(&r) != 0 || chunks_mapped(&r) != 2)
		return 6;
	region_destroy(&r);
	return 0;
}

START_TEST(test_a_failed_growth_asks_no_more_until_reset)
{
#ifdef DDPROF_TSAN
	return; /* ThreadSanitizer's own mappings do not survive a low RLIMIT_AS */
#endif
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(failed_growth_checks());
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child: check %d failed (status %#x)", WEXITSTATUS(status), status);
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
	tcase_add_test(tc, test_init_failures_return_negative_errno_and_no_mapping);
	tcase_add_test(tc, test_init_maps_the_first_chunk_only);
	tcase_add_test(tc, test_room_is_asked_for_past_two_thirds_of_what_is_mapped);
	tcase_add_test(tc,
		       test_alloc_refuses_without_mapped_room_and_takes_the_next_chunk_once_mapped);
	tcase_add_test(tc, test_chunks_double_and_stop_at_the_ceiling_to_the_byte);
	tcase_add_test(tc, test_reset_gives_pages_back_and_unmaps_the_chunks_never_reached);
	tcase_add_test(tc, test_a_failed_growth_asks_no_more_until_reset);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(region_suite());
}
