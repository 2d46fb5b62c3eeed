/*
 * bench_serialize.c - what the uploader thread pays to turn a big profile into pprof.
 *
 * Fills a profile with STACKS distinct stacks (profiles_record, as the signal handler
 * does): DEPTH pcs each, drawn at random from a pool of POOL pcs spread over this
 * program's own code (so the symbolizer has real functions to name), on 8 thread ids.
 * Then swaps it out and calls pprof_build (symbolize, encode, gzip) twice with the same
 * symbolizer: cold (first profile of a process: every pc resolved) and warm (later
 * profiles: the symbolizer's pc cache answers). This runs on the uploader thread, never
 * on the application's. Each time is the median of RUNS builds (the cold one is taken
 * once per fresh symbolizer).
 *
 * usage: bench_serialize [--quick]
 * Prints "stacks N pool P cold_ms C warm_ms W gz_bytes G raw_bytes R locations L".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/store/profiles.h"
#include "agent/symbolize/symbolizer.h"
#include "uploader/pprof.h"

#define RUNS 3
#define DEPTH 12  /* typical native stack depth */
#define POOL 4096 /* distinct pcs: a large program's hot code */
#define TIDS 8
#define CEILING (256u << 20)
#define PERIOD_NS 10101010 /* 99 Hz */

extern char __executable_start[], etext[];

static long stacks = 100000;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--quick"))
		stacks = 20000;
	static struct profile_pair pp;
	if (profiles_init(&pp, CEILING, 0) != 0)
		return 1;
	/* The ceiling mapped at once: the agent maps more only as its uploader thread,
	 * which this benchmark does not run, sees the need (agent/store/profiles.h). */
	for (int i = 0; i < 2; i++)
		region_reserve(&pp.p[i].region, CEILING);
	uintptr_t lo = (uintptr_t)__executable_start, hi = (uintptr_t)etext;
	static uintptr_t pool[POOL];
	for (int i = 0; i < POOL; i++)
		pool[i] = lo + next_rand() % (hi - lo);
	for (long s = 0; s < stacks; s++) {
		uintptr_t pcs[DEPTH];
		for (int d = 0; d < DEPTH; d++)
			pcs[d] = pool[next_rand() % POOL];
		profiles_record(&pp, (int32_t)(getpid() + s % TIDS), pcs, DEPTH, PERIOD_NS);
	}
	struct profile *p = profiles_swap(&pp, 1);
	uint64_t nodes = trie_count(&p->trie);
	struct pprof_meta meta = {
	    .start_ns = 0, .end_ns = 1, .period_ns = PERIOD_NS, .pid = getpid()};
	struct pb_buf out;
	pb_init(&out);
	struct pprof_stats st;
	double cold[RUNS], warm[RUNS];
	for (int r = 0; r < RUNS; r++) {
		struct symbolizer *sym = symbolizer_new();
		if (!sym)
			return 1;
		symbolizer_refresh(sym);
		double t0 = now_ms();
		if (pprof_build(p, &meta, sym, &out, &st) != 0)
			return 1;
		cold[r] = now_ms() - t0;
		symbolizer_refresh(sym);
		t0 = now_ms();
		if (pprof_build(p, &meta, sym, &out, &st) != 0)
			return 1;
		warm[r] = now_ms() - t0;
		symbolizer_free(sym);
	}
	qsort(cold, RUNS, sizeof(cold[0]), cmp_double);
	qsort(warm, RUNS, sizeof(warm[0]), cmp_double);
	printf("stacks %llu pool %d cold_ms %.1f warm_ms %.1f gz_bytes %zu raw_bytes %zu "
	       "locations %zu\n",
	       (unsigned long long)nodes, POOL, cold[RUNS / 2], warm[RUNS / 2], st.gz_bytes,
	       st.raw_bytes, st.locations);
	pb_free(&out);
	profiles_destroy(&pp);
	return 0;
}
