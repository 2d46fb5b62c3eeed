/*
 * bench_trie.c - stack trie throughput: puts per second from 1 to 16 threads.
 *
 * Records through profiles_record (the signal handler's own call: enter the active
 * profile, trie_put, add the counters), two ways:
 *   existing  each thread re-records STACKS stacks it recorded before (the steady state
 *             of a profiled program: lookups and atomic adds only)
 *   new       each thread records stacks never seen (node allocation + CAS publication)
 *   existing-trie  as existing, but calling trie_put and adding to the node's counters
 *             directly, without the profile's shared counters (writers, totals): shows
 *             what those shared cache lines cost when threads record at once
 * Stacks are DEPTH pcs deep. The total number of puts is the same for every thread
 * count, split evenly, so puts/s shows how the trie scales (on this machine's cores;
 * more threads than cores cannot go faster). Each figure is the median of RUNS runs.
 *
 * usage: bench_trie [--quick]
 * Prints one line per case: "mode threads puts_per_second".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/store/profiles.h"

#define RUNS 5
#define DEPTH 16  /* a typical native stack */
#define STACKS 64 /* existing stacks per thread */
#define MAX_THREADS 16
#define CEILING (256u << 20) /* room for every new stack of one run */

static long total_existing = 4000000;
static long total_new = 400000;
static struct profile_pair pp;
static pthread_barrier_t start_line;

enum { MODE_EXISTING, MODE_NEW, MODE_EXISTING_TRIE, MODES };
static const char *const mode_names[MODES] = {"existing", "new", "existing-trie"};

struct job {
	int idx;
	long puts;
	int mode; /* MODE_* */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void make_stack(uintptr_t *pcs, int idx, uint64_t k)
{
	for (int d = 0; d < DEPTH; d++)
		pcs[d] = 0x400000 + (uintptr_t)d * 0x1000 + (uintptr_t)(idx * 16);
	pcs[0] += (uintptr_t)(k * 4) & 0xffffff; /* the leaf differs */
	pcs[1] += (uintptr_t)(k >> 22) * 4;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	uintptr_t pcs[DEPTH];
	if (j->mode != MODE_NEW)
		for (uint64_t k = 0; k < STACKS; k++) {
			make_stack(pcs, j->idx, k);
			profiles_record(&pp, j->idx + 1, pcs, DEPTH, 1000000);
		}
	pthread_barrier_wait(&start_line);
	struct stack_trie *trie = &profiles_active(&pp)->trie;
	for (long i = 0; i < j->puts; i++) {
		uint64_t k = j->mode == MODE_NEW ? (uint64_t)i + STACKS : (uint64_t)i % STACKS;
		make_stack(pcs, j->idx, k);
		if (j->mode != MODE_EXISTING_TRIE) {
			profiles_record(&pp, j->idx + 1, pcs, DEPTH, 1000000);
			continue;
		}
		struct trie_node *n = trie_put(trie, PROFILE_CPU, j->idx + 1, pcs, DEPTH, NULL);
		/* relaxed: counters only, read after the threads are joined */
		atomic_fetch_add_explicit(&n->values[0], 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&n->values[1], 1000000, memory_order_relaxed);
	}
	return NULL;
}

static double one_run(int threads, int mode)
{
	if (profiles_init(&pp, CEILING, 0) != 0) {
		fprintf(stderr, "bench_trie: profiles_init failed\n");
		exit(1);
	}
	/* The ceiling mapped at once: the agent maps more only as its uploader thread,
	 * which this benchmark does not run, sees the need (agent/store/profiles.h). */
	for (int i = 0; i < 2; i++)
		region_reserve(&pp.p[i].region, CEILING);
	pthread_t t[MAX_THREADS];
	struct job jobs[MAX_THREADS];
	long total = mode == MODE_NEW ? total_new : total_existing;
	pthread_barrier_init(&start_line, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++) {
		jobs[i] = (struct job){.idx = i, .puts = total / threads, .mode = mode};
		pthread_create(&t[i], NULL, worker, &jobs[i]);
	}
	pthread_barrier_wait(&start_line);
	double t0 = now_s();
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	double secs = now_s() - t0;
	pthread_barrier_destroy(&start_line);
	uint64_t dropped = profiles_dropped_samples(profiles_active(&pp));
	if (dropped)
		fprintf(stderr, "bench_trie: %llu samples dropped (ceiling too small)\n",
			(unsigned long long)dropped);
	profiles_destroy(&pp);
	return (double)(total / threads * threads) / secs;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--quick")) {
		total_existing /= 10;
		total_new /= 10;
	}
	static const int counts[] = {1, 2, 4, 8, 16};
	for (int mode = 0; mode < MODES; mode++)
		for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
			double runs[RUNS];
			for (int r = 0; r < RUNS; r++)
				runs[r] = one_run(counts[c], mode);
			qsort(runs, RUNS, sizeof(runs[0]), cmp_double);
			printf("%s %d %.0f\n", mode_names[mode], counts[c], runs[RUNS / 2]);
			fflush(stdout);
		}
	return 0;
}
