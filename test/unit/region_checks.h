/*
 * region_checks.h - what the region suites (test_region.c, test_region_stress.c) check
 * a struct region with: its chunks' sizes as region.h describes them, which chunk holds
 * a block, whether memory is mapped or resident, the process's VmSize.
 * Included by one test file per binary: definitions, static.
 */
#ifndef DDPROF_TEST_UNIT_REGION_CHECKS_H
#define DDPROF_TEST_UNIT_REGION_CHECKS_H
#include "agent/store/region.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

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

static __attribute__((unused)) size_t round_up(size_t size)
{
	return (size + REGION_ALIGN - 1) & ~(size_t)(REGION_ALIGN - 1);
}

static __attribute__((unused)) int all_bytes_are(const void *p, size_t n, uint8_t v)
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
static __attribute__((unused)) size_t chunk_bytes(const struct region *r, unsigned i)
{
	size_t start = i == 0 ? 0 : r->first << (i - 1);
	size_t nominal = i == 0 ? r->first : start;
	return nominal < r->ceiling - start ? nominal : r->ceiling - start;
}

static __attribute__((unused)) unsigned chunks_mapped(const struct region *r)
{
	return atomic_load(&r->map->mapped);
}

/* Whether every page of [p, p + len) is mapped (mincore fails with ENOMEM otherwise). */
static __attribute__((unused)) int range_mapped(const void *p, size_t len)
{
	size_t pages = (len + PAGE - 1) / PAGE;
	unsigned char *vec = malloc(pages);
	ck_assert_ptr_nonnull(vec);
	int rc = mincore((void *)((uintptr_t)p & ~(PAGE - 1)), pages * PAGE, vec);
	free(vec);
	return rc == 0;
}

/* Resident pages of [p, p + len). */
static __attribute__((unused)) size_t resident_pages(const void *p, size_t len)
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
static __attribute__((unused)) int chunk_of(const struct region *r, const void *p, size_t size)
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
static __attribute__((unused)) long vm_size_kib(void)
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
#endif
