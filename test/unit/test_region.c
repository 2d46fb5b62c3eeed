/*
 * test_region.c - unit tests of agent/region.c: the lock-free bump allocator over chunks
 * mapped on demand.
 *
 * Single-threaded: alignment, zeroed and disjoint blocks, the ceiling to the byte (in one
 * chunk and across chunks), the refusal counter; only the first chunk mapped at init;
 * room asked for past two thirds of what is mapped, refusal while no mapped chunk has
 * room, the next chunk taken once mapped, doubling chunks; reset giving back zeroed
 * reusable memory and unmapping the chunks never reached; a failed mapping asking no
 * more until the reset; a fork child starting empty with every chunk of its parent.
 * Multi-threaded: THREADS threads allocate small blocks, stamping every block with their
 * id, until the region is exhausted; in one test the whole ceiling is one chunk, in the
 * other the chunks are mapped by a grower thread while they allocate. Afterwards no
 * stamp may be damaged, no two blocks may overlap, every block lies in one mapped chunk
 * and the bytes handed out fit under the ceiling.
 */
#include "agent/region.h"

#include <check.h>

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

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define PAGE ((size_t)4096)
#define THREADS 8
#define ROUNDS 3
#define STRESS_CEILING MIB
#define STRESS_FIRST_CHUNK (4 * KIB) /* 9 chunks to 1 MiB: 4, 4, 8, ... 512 KiB */
#define MAX_BLOCK 128		     /* bytes, a multiple of 8 */
/* Enough room to record every block a thread could get: the region holds at most
 * STRESS_CEILING / REGION_ALIGN blocks in total. */
#define MAX_BLOCKS_PER_THREAD (STRESS_CEILING / REGION_ALIGN)

/* The one region of a test maps its chunks here (region_destroy frees it). */
static struct region_map map;

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

/* Usable bytes of chunk i as region.h describes them: first, first, 2 first, 4 first...
 * the last one cut at the ceiling. */
static size_t chunk_bytes(const struct region *r, unsigned i)
{
	size_t start = i == 0 ? 0 : r->first << (i - 1);
	size_t nominal = i == 0 ? r->first : start;
	return nominal < r->ceiling - start ? nominal : r->ceiling - start;
}

static unsigned chunks_mapped(const struct region *r)
{
	return atomic_load(&r->map->mapped);
}

/* Whether every page of [p, p + len) is mapped (mincore fails with ENOMEM otherwise). */
static int range_mapped(const void *p, size_t len)
{
	size_t pages = (len + PAGE - 1) / PAGE;
	unsigned char *vec = malloc(pages);
	ck_assert_ptr_nonnull(vec);
	int rc = mincore((void *)((uintptr_t)p & ~(PAGE - 1)), pages * PAGE, vec);
	free(vec);
	return rc == 0;
}

/* Resident pages of [p, p + len). */
static size_t resident_pages(const void *p, size_t len)
{
	size_t pages = (len + PAGE - 1) / PAGE, n = 0;
	unsigned char *vec = malloc(pages);
	ck_assert_ptr_nonnull(vec);
	ck_assert_int_eq(mincore((void *)p, pages * PAGE, vec), 0);
	for (size_t i = 0; i < pages; i++)
		n += vec[i] & 1;
	free(vec);
	return n;
}

/* The chunk holding [p, p + size), or -1 when no mapped chunk holds all of it. */
static int chunk_of(const struct region *r, const void *p, size_t size)
{
	const uint8_t *b = p;
	for (unsigned i = 0; i < chunks_mapped(r); i++) {
		const uint8_t *base = r->map->base[i];
		if (b >= base && b + size <= base + chunk_bytes(r, i))
			return (int)i;
	}
	return -1;
}

/* This process's VmSize (KiB), from /proc/self/status. */
static long vm_size_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	ck_assert_ptr_nonnull(f);
	char line[256];
	long kib = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

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
	bool chunked; /* another thread maps the chunks: a refusal may be temporary */
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
	for (size_t i = 0; i < MAX_BLOCKS_PER_THREAD;) {
		size_t size = 8 * (1 + (i * 7 + (size_t)st->id) % (MAX_BLOCK / 8));
		/* Read before: a refusal once every chunk was mapped is final. */
		bool all_mapped = region_mapped(st->r) == st->r->ceiling;
		uint64_t *p = region_alloc(st->r, size);
		if (!p) {
			st->refusals++;
			if (!st->chunked || all_mapped)
				break;
			sched_yield(); /* for the grower */
			continue;
		}
		if (!all_bytes_are(p, size, 0))
			st->not_zero++;
		for (size_t w = 0; w < size / 8; w++)
			p[w] = stamp(st->id, i);
		st->blocks[st->nblocks++] = (struct block){p, size};
		i++;
	}
	return NULL;
}

struct grower {
	pthread_t thread;
	struct region *r;
	atomic_bool stop;
	uint64_t grows; /* region_grow calls that mapped a chunk */
};

/* Grows the region whenever it asks, as the uploader thread does. */
static void *grower_main(void *arg)
{
	struct grower *g = arg;
	while (!atomic_load_explicit(&g->stop, memory_order_relaxed)) {
		if (!region_wants_room(g->r)) {
			sched_yield();
			continue;
		}
		unsigned before = chunks_mapped(g->r);
		ck_assert_int_eq(region_grow(g->r), 0);
		g->grows += chunks_mapped(g->r) > before;
	}
	return NULL;
}

static int by_address(const void *a, const void *b)
{
	const struct block *x = a, *y = b;
	return x->p < y->p ? -1 : x->p > y->p;
}

/* One round of THREADS allocating threads until r is exhausted (with a grower thread
 * when chunked), then every check on what they got. */
static void stress_round(struct region *r, bool chunked, int round, struct block *all)
{
	static struct stress_thread st[THREADS];
	struct grower g = {.r = r};
	atomic_init(&g.stop, false);
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, THREADS);
	for (int t = 0; t < THREADS; t++) {
		st[t] =
		    (struct stress_thread){.id = t, .r = r, .start = &start, .chunked = chunked};
		st[t].blocks = all + (size_t)t * MAX_BLOCKS_PER_THREAD;
		ck_assert_int_eq(pthread_create(&st[t].thread, NULL, stress_main, &st[t]), 0);
	}
	if (chunked)
		ck_assert_int_eq(pthread_create(&g.thread, NULL, grower_main, &g), 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(st[t].thread, NULL);
	if (chunked) {
		atomic_store(&g.stop, true);
		pthread_join(g.thread, NULL);
	}
	pthread_barrier_destroy(&start);

	size_t total = 0, bytes = 0;
	uint64_t refusals = 0;
	for (int t = 0; t < THREADS; t++) {
		ck_assert_msg(st[t].not_zero == 0,
			      "round %d thread %d: expected zeroed blocks, saw %zu dirty", round, t,
			      st[t].not_zero);
		refusals += st[t].refusals;
		for (size_t i = 0; i < st[t].nblocks; i++) {
			const struct block *b = &st[t].blocks[i];
			size_t w = 0;
			while (w < b->size / 8 && b->p[w] == stamp(t, i))
				w++;
			if (w < b->size / 8)
				ck_abort_msg("round %d thread %d block %zu word %zu: "
					     "expected stamp %#llx, saw %#llx",
					     round, t, i, w, (unsigned long long)stamp(t, i),
					     (unsigned long long)b->p[w]);
			if (chunk_of(r, b->p, b->size) < 0)
				ck_abort_msg("round %d thread %d block %zu at %p (+%zu): outside "
					     "every mapped chunk",
					     round, t, i, (void *)b->p, b->size);
			all[total] = *b; /* compacts in place: total <= t*MAX + i */
			total++;
			bytes += round_up(b->size);
		}
	}
	size_t used = region_used(r);
	/* Each chunk the position left may end in an unused tail, less than a block. */
	size_t tails = (size_t)(r->chunks_max - 1) * MAX_BLOCK;
	ck_assert_msg(used <= STRESS_CEILING && bytes <= used && used - bytes < tails + 1,
		      "round %d: expected %zu bytes handed out within used %zu <= %zu (tails "
		      "< %zu), saw otherwise",
		      round, bytes, used, (size_t)STRESS_CEILING, tails);
	/* Every thread stopped on a final refusal, so the region is full to within one
	 * block. */
	ck_assert_msg(used > STRESS_CEILING - MAX_BLOCK,
		      "round %d: expected the region exhausted, saw %zu of %zu used", round, used,
		      (size_t)STRESS_CEILING);
	ck_assert_msg(atomic_load(&r->refused) == refusals,
		      "round %d: expected %llu refusals counted, saw %llu", round,
		      (unsigned long long)refusals, (unsigned long long)atomic_load(&r->refused));
	if (chunked)
		ck_assert_msg(chunks_mapped(r) == r->chunks_max && g.grows >= 1 &&
				  g.grows <= r->chunks_max - 1,
			      "round %d: expected %u chunks mapped by 1 to %u growths, saw %u "
			      "chunks, %llu growths",
			      round, r->chunks_max, r->chunks_max - 1, chunks_mapped(r),
			      (unsigned long long)g.grows);
	qsort(all, total, sizeof(*all), by_address);
	for (size_t i = 0; i + 1 < total; i++) {
		if ((uint8_t *)all[i].p + round_up(all[i].size) > (uint8_t *)all[i + 1].p)
			ck_abort_msg("round %d: expected disjoint blocks, saw %p (+%zu) overlap %p",
				     round, (void *)all[i].p, all[i].size, (void *)all[i + 1].p);
	}
}

START_TEST(test_concurrent_allocs_never_overlap_and_fit_the_ceiling)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, &map, STRESS_CEILING, STRESS_CEILING), 0);
	struct block *all = calloc(THREADS * MAX_BLOCKS_PER_THREAD, sizeof(struct block));
	ck_assert_ptr_nonnull(all);
	for (int round = 0; round < ROUNDS; round++) {
		stress_round(&r, false, round, all);
		region_reset(&r);
	}
	free(all);
	region_destroy(&r);
}
END_TEST

START_TEST(test_concurrent_allocs_across_chunks_while_another_thread_maps_them)
{
	struct block *all = calloc(THREADS * MAX_BLOCKS_PER_THREAD, sizeof(struct block));
	ck_assert_ptr_nonnull(all);
	for (int round = 0; round < ROUNDS; round++) {
		struct region r;
		/* 4, 4, 8, ... 512 KiB: 8 chunks to map while the threads allocate. */
		ck_assert_int_eq(region_init(&r, &map, STRESS_CEILING, STRESS_FIRST_CHUNK), 0);
		ck_assert_uint_eq(r.chunks_max, 9);
		stress_round(&r, true, round, all);
		region_destroy(&r);
	}
	free(all);
}
END_TEST

/* --- fork --- */

/* In the child: exit status 0, or the number of the check that failed. */
static int child_chunk_checks(struct region *r, uint8_t *const base[3])
{
	if (region_after_fork(r) != 0)
		return 1;
	if (region_used(r) != 0 || chunks_mapped(r) != 3 || region_mapped(r) != 16 * KIB)
		return 2;
	for (int i = 0; i < 3; i++)
		if (r->map->base[i] != base[i] || !all_bytes_are(base[i], chunk_bytes(r, i), 0))
			return 3 + i;
	/* Every chunk usable at once, no growth needed. */
	if (region_alloc(r, 4 * KIB) != base[0] || region_alloc(r, 4 * KIB) != base[1] ||
	    region_alloc(r, 8 * KIB) != base[2])
		return 6;
	/* A grow lock a parent thread held at the fork is free: the child grows. */
	if (region_alloc(r, 16) != NULL || !region_wants_room(r) || region_grow(r) != 0 ||
	    chunks_mapped(r) != 4 || region_alloc(r, 16) != r->map->base[3])
		return 7;
	return 0;
}

START_TEST(test_fork_child_starts_empty_with_every_chunk_of_its_parent)
{
	struct region r;
	ck_assert_int_eq(region_init(&r, &map, MIB, 4 * KIB), 0);
	ck_assert_int_eq(region_reserve(&r, 16 * KIB), 0); /* 4 + 4 + 8 */
	uint8_t *base[3];
	memcpy(base, r.map->base, sizeof(base));
	memset(region_alloc(&r, 4 * KIB), 0xAB, 4 * KIB);
	memset(region_alloc(&r, 4 * KIB), 0xAB, 4 * KIB);
	memset(region_alloc(&r, 4 * KIB), 0xAB, 4 * KIB);
	atomic_store(&r.growing, true); /* as if a thread were growing it at the fork */
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(child_chunk_checks(&r, base));
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child: check %d failed (status %#x)", WEXITSTATUS(status), status);
	/* The parent's blocks and chunks are as they were. */
	ck_assert(all_bytes_are(base[0], 4 * KIB, 0xAB) && all_bytes_are(base[1], 4 * KIB, 0xAB));
	ck_assert(all_bytes_are(base[2], 4 * KIB, 0xAB));
	ck_assert_uint_eq(region_used(&r), 12 * KIB);
	ck_assert_uint_eq(chunks_mapped(&r), 3);
	atomic_store(&r.growing, false);
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
	tcase_add_test(tc, test_init_failures_return_negative_errno_and_no_mapping);
	tcase_add_test(tc, test_init_maps_the_first_chunk_only);
	tcase_add_test(tc, test_room_is_asked_for_past_two_thirds_of_what_is_mapped);
	tcase_add_test(tc,
		       test_alloc_refuses_without_mapped_room_and_takes_the_next_chunk_once_mapped);
	tcase_add_test(tc, test_chunks_double_and_stop_at_the_ceiling_to_the_byte);
	tcase_add_test(tc, test_reset_gives_pages_back_and_unmaps_the_chunks_never_reached);
	tcase_add_test(tc, test_a_failed_growth_asks_no_more_until_reset);
	tcase_add_test(tc, test_concurrent_allocs_never_overlap_and_fit_the_ceiling);
	tcase_add_test(tc, test_concurrent_allocs_across_chunks_while_another_thread_maps_them);
	tcase_add_test(tc, test_fork_child_starts_empty_with_every_chunk_of_its_parent);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(region_suite());
}
