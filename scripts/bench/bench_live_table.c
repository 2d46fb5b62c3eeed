/*
 * bench_live_table.c - what the live heap's table (agent/alloc/live_table.c) costs the
 * application: nanoseconds per untracked remove (what every free of an unsampled
 * allocation will pay) and per insert + remove pair (a sampled allocation's life), each
 * beside a baseline loop that reads the same addresses without the table.
 *
 * The table has the default budget (DD_PROFILING_HEAP_TABLE_SIZE's, 8 MiB) and TRACKED
 * entries (what about 1 GiB of live heap sampled every 512 KiB leaves in it). Cases:
 *   untracked-hot   removes of 1024 addresses over and over: their control words stay
 *                   in the cache (a program freeing what it just allocated)
 *   untracked-cold  removes of 4M addresses spread like a heap's (48-byte stride, 192
 *                   MiB): control words spread over the whole filter, mostly not cached
 *   malloc-free     a ring of 4096 live blocks of mixed sizes, each step freeing the
 *                   oldest and allocating a new one, with and without the remove before
 *                   free (the baseline is the same ring, without the table)
 *   pair            insert then remove of one address, 1024 addresses in turn
 * each with 1 thread and with 2 threads on the same table (disjoint addresses). The
 * figures are ns per operation in each thread (the slowest one's), the medians of RUNS
 * runs of each, alternating; ratio: the median of the pairs' ratios, with table /
 * baseline. Also printed: the share of untracked removes whose tag matched
 * (the filter's false hits) at TRACKED entries.
 *
 * usage: bench_live_table [--quick]
 * Prints one line per case: "case threads ns_per_op baseline_ns ratio".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/alloc/live_table.h"
#include "common/config.h"
#include "common/hash.h"

#define RUNS 5
#define TRACKED 2048
#define HOT 1024
#define COLD (4u << 20)
#define RING 4096
#define MAX_THREADS 2

static long iterations = 20000000;
static struct live_table table;
static uintptr_t *cold_addrs[MAX_THREADS];
static pthread_barrier_t start_line;

enum { CASE_HOT, CASE_COLD, CASE_MALLOC, CASE_PAIR, CASES };
static const char *const case_names[CASES] = {"untracked-hot", "untracked-cold", "malloc-free",
					      "pair"};

struct job {
	int idx, kind;
	bool baseline;
	long n;
	double ns;
	uint64_t sink;
};

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Addresses of thread idx, never inserted: malloc-like, 16-byte aligned. */
static uintptr_t hot_addr(int idx, long i)
{
	return ((uintptr_t)(idx + 1) << 40) + (uintptr_t)(i % HOT) * 48;
}

static uint64_t run_untracked(struct job *j, const uintptr_t *addrs, long mask)
{
	uint64_t sink = 0;
	if (j->baseline) {
		for (long i = 0; i < j->n; i++)
			sink += addrs[i & mask] >> 4; /* the same loads, no table */
	} else {
		for (long i = 0; i < j->n; i++)
			sink += live_table_remove(&table, addrs[i & mask], NULL);
	}
	return sink;
}

static uint64_t run_malloc(struct job *j)
{
	void *ring[RING] = {0};
	uint64_t sink = 0, r = 0x9e3779b97f4a7c15ULL + (uint64_t)j->idx;
	for (long i = 0; i < j->n; i++) {
		void **slot = &ring[i % RING];
		if (*slot) {
			if (!j->baseline)
				sink += live_table_remove(&table, (uintptr_t)*slot, NULL);
			free(*slot);
		}
		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		*slot = malloc(16 + (r & 0x1ff));
		sink += (uintptr_t)*slot & 1;
	}
	for (int i = 0; i < RING; i++)
		free(ring[i]);
	return sink;
}

static uint64_t run_pair(struct job *j)
{
	uint64_t sink = 0;
	for (long i = 0; i < j->n; i++) {
		uintptr_t a = hot_addr(j->idx + 4, i);
		if (j->baseline) {
			sink += a >> 4;
			continue;
		}
		sink += live_table_insert(&table, a, (uint64_t)i, 64, 524288);
		sink += live_table_remove(&table, a, NULL);
	}
	return sink;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	uintptr_t hot[HOT];
	for (long i = 0; i < HOT; i++)
		hot[i] = hot_addr(j->idx, i);
	pthread_barrier_wait(&start_line);
	double t0 = now_ns();
	switch (j->kind) {
	case CASE_HOT:
		j->sink = run_untracked(j, hot, HOT - 1);
		break;
	case CASE_COLD:
		j->sink = run_untracked(j, cold_addrs[j->idx], COLD - 1);
		break;
	case CASE_MALLOC:
		j->sink = run_malloc(j);
		break;
	default:
		j->sink = run_pair(j);
	}
	j->ns = (now_ns() - t0) / (double)j->n;
	return NULL;
}

/* ns per operation per thread (the slowest thread's). */
static double one_run(int threads, int kind, bool baseline)
{
	pthread_t t[MAX_THREADS];
	struct job jobs[MAX_THREADS];
	long n = kind == CASE_PAIR || kind == CASE_MALLOC ? iterations / 4 : iterations;
	pthread_barrier_init(&start_line, NULL, (unsigned)threads);
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct job){.idx = i, .kind = kind, .baseline = baseline, .n = n};
		pthread_create(&t[i], NULL, worker, &jobs[i]);
	}
	double worst = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		worst = jobs[i].ns > worst ? jobs[i].ns : worst;
	}
	pthread_barrier_destroy(&start_line);
	return worst;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
	return v[n / 2];
}

/* RUNS pairs, the table and the baseline alternating (the machine's drift hits both):
 * the medians of each, and the median of the pairs' ratios. */
static void measure(int threads, int kind, double *with, double *base, double *ratio)
{
	double w[RUNS], b[RUNS], r[RUNS];
	for (int i = 0; i < RUNS; i++) {
		w[i] = one_run(threads, kind, false);
		b[i] = one_run(threads, kind, true);
		r[i] = w[i] / b[i];
	}
	*with = median(w, RUNS);
	*base = median(b, RUNS);
	*ratio = median(r, RUNS);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--quick"))
		iterations /= 10;
	if (live_table_init(&table, CONFIG_DEFAULT_HEAP_TABLE) != 0) {
		fprintf(stderr, "bench_live_table: live_table_init failed\n");
		return 1;
	}
	uint64_t seed = 1;
	for (int i = 0; i < TRACKED; i++) {
		seed = hash_mix64(seed);
		live_table_insert(&table, (seed & ((1ULL << 46) - 16)) | 16, (uint64_t)i, 4096,
				  524288);
	}
	for (int t = 0; t < MAX_THREADS; t++) {
		cold_addrs[t] = malloc(COLD * sizeof(uintptr_t));
		for (uint32_t i = 0; i < COLD; i++)
			cold_addrs[t][i] = ((uintptr_t)(t + 8) << 40) + (uintptr_t)i * 48;
	}
	/* The filter's false hits at TRACKED entries, over the cold addresses. */
	struct live_table_stats before, after;
	live_table_stats(&table, &before);
	for (uint32_t i = 0; i < COLD; i++)
		live_table_remove(&table, cold_addrs[0][i], NULL);
	live_table_stats(&table, &after);
	printf("# %llu entries in %llu slots (%zu bytes): %.4f%% of untracked removes read a "
	       "slot\n",
	       (unsigned long long)after.entries, (unsigned long long)after.capacity, after.bytes,
	       100.0 * (double)(after.false_hits - before.false_hits) / COLD);
	for (int kind = 0; kind < CASES; kind++)
		for (int threads = 1; threads <= MAX_THREADS; threads++) {
			double with, base, ratio;
			measure(threads, kind, &with, &base, &ratio);
			printf("%s %d %.2f %.2f %.2f\n", case_names[kind], threads, with, base,
			       ratio);
			fflush(stdout);
		}
	for (int t = 0; t < MAX_THREADS; t++)
		free(cold_addrs[t]);
	live_table_destroy(&table);
	return 0;
}
