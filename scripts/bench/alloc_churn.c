/*
 * alloc_churn.c - the allocation profilers' micro-benchmark: malloc/free pairs of mixed
 * sizes on several threads, a small live set each.
 *
 * Each of THREADS threads keeps LIVE blocks (64 by default) and makes PAIRS
 * malloc/free pairs: it picks a slot, frees its block and puts a new one there,
 * writing the block's first and last bytes. Sizes come from a fixed-seed generator
 * (xorshift64*, seeded by the thread's index, so every run makes the same requests):
 * 31 in 32 log-uniform from 16 B to 4 KiB (an octave 16 << k picked evenly, k = 0..7,
 * then a size evenly in [16 << k, 32 << k)), 1 in 32 likewise from 4 KiB to 64 KiB
 * (k = 0..3): about 1.5 KB per pair on average.
 * Each thread fills its slots before its CPU clock is read and empties them after;
 * the wall time also covers the threads' creation and that filling (LIVE blocks each,
 * negligible next to the pairs).
 *
 * PAUSE_S: seconds the program sleeps before it starts the threads (and the clock): a
 * profiler's start-up work is then over (libddprof builds its unwind tables a second
 * after start-up; until then its allocation samples are unwound from the CFI in memory),
 * so the pairs show its steady cost; 0 shows the first moments of a process.
 *
 * usage: alloc_churn [THREADS [PAIRS_PER_THREAD [LIVE [PAUSE_S]]]]   (2, 5000000, 64, 0)
 * Prints one line "pairs_per_thread N threads T wall_s W cpu_s C ns_per_pair X
 * cpu_ns_per_pair Y bytes_per_pair B": W the wall time from before the first thread
 * is created to after the last is joined, C the sum of the workers' own CPU clocks,
 * X = W / N (the threads run side by side: the wall time of one pair on one thread),
 * Y = C / (N * T), B the mean bytes requested per pair.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 64
#define MAX_LIVE 4096

static uint64_t pairs;
static unsigned live;
static double thread_cpu[MAX_THREADS];
static uint64_t thread_bytes[MAX_THREADS];

static double now_s(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

static size_t pick_size(uint64_t r)
{
	/* Low 5 bits: 1 in 32 large; next 3: the octave; the rest: the size within it. */
	size_t base = (r & 31) == 0 ? (size_t)4096 << ((r >> 5) & 3) /* 4 KiB to 64 KiB */
				    : (size_t)16 << ((r >> 5) & 7);  /* 16 B to 4 KiB */
	return base + (size_t)((r >> 8) % base);
}

static void touch(char *p, size_t size)
{
	p[0] = (char)size;
	p[size - 1] = (char)size;
}

static void *worker(void *arg)
{
	int idx = (int)(intptr_t)arg;
	uint64_t seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(idx + 1);
	char *slot[MAX_LIVE];
	for (unsigned i = 0; i < live; i++) {
		size_t size = pick_size(next(&seed));
		slot[i] = malloc(size);
		if (!slot[i])
			abort();
		touch(slot[i], size);
	}
	uint64_t bytes = 0;
	double c0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	for (uint64_t n = 0; n < pairs; n++) {
		uint64_t r = next(&seed);
		unsigned i = (unsigned)(r >> 40) % live;
		size_t size = pick_size(next(&seed));
		free(slot[i]);
		slot[i] = malloc(size);
		if (!slot[i])
			abort();
		touch(slot[i], size);
		bytes += size;
	}
	thread_cpu[idx] = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	thread_bytes[idx] = bytes;
	for (unsigned i = 0; i < live; i++)
		free(slot[i]);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2;
	double p = argc > 2 ? atof(argv[2]) : 5e6;
	int l = argc > 3 ? atoi(argv[3]) : 64;
	double pause = argc > 4 ? atof(argv[4]) : 0;
	if (n < 1 || n > MAX_THREADS || p < 1 || l < 1 || l > MAX_LIVE || pause < 0) {
		fprintf(stderr,
			"usage: alloc_churn [THREADS [PAIRS_PER_THREAD [LIVE [PAUSE_S]]]]\n");
		return 2;
	}
	pairs = (uint64_t)p;
	live = (unsigned)l;
	if (pause > 0) {
		struct timespec ts = {(time_t)pause, (long)((pause - (double)(time_t)pause) * 1e9)};
		while (nanosleep(&ts, &ts) != 0)
			;
	}
	pthread_t t[MAX_THREADS];
	double t0 = now_s(CLOCK_MONOTONIC);
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0) {
			perror("pthread_create");
			return 1;
		}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	double wall = now_s(CLOCK_MONOTONIC) - t0;
	double cpu = 0;
	uint64_t bytes = 0;
	for (int i = 0; i < n; i++) {
		cpu += thread_cpu[i];
		bytes += thread_bytes[i];
	}
	double total = (double)pairs * n;
	printf("pairs_per_thread %llu threads %d wall_s %.6f cpu_s %.6f ns_per_pair %.3f "
	       "cpu_ns_per_pair %.3f bytes_per_pair %.1f\n",
	       (unsigned long long)pairs, n, wall, cpu, wall * 1e9 / (double)pairs,
	       cpu * 1e9 / total, (double)bytes / total);
	return 0;
}
