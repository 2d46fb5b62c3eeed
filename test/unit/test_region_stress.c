/*
 * test_region_stress.c - agent/store/region.c under many threads, and across fork (the
 * single-threaded behaviour is test_region.c's).
 *
 * THREADS threads allocate small blocks, stamping every block with their id, until the
 * region is exhausted; in one test the whole ceiling is one chunk, in the other the
 * chunks are mapped by a grower thread while they allocate. Afterwards no stamp may be
 * damaged, no two blocks may overlap, every block lies in one mapped chunk and the
 * bytes handed out fit under the ceiling. A fork child starts empty with every chunk of
 * its parent.
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

static Suite *region_stress_suite(void)
{
	Suite *s = suite_create("region_stress");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_concurrent_allocs_never_overlap_and_fit_the_ceiling);
	tcase_add_test(tc, test_concurrent_allocs_across_chunks_while_another_thread_maps_them);
	tcase_add_test(tc, test_fork_child_starts_empty_with_every_chunk_of_its_parent);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(region_stress_suite());
}
