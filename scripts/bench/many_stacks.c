/*
 * many_stacks.c - the memory workload: many threads, many distinct stacks.
 *
 * THREADS threads each burn CPU_SECONDS of CPU in short bursts, every burst at the
 * bottom of a different call path: a recursion DEPTH deep through two functions (left,
 * right) chosen by the bits of a random number, so 2^DEPTH paths per thread and nearly
 * every sample is a new stack. The agent's memory then grows with its stack trie; the
 * runner compares peak RSS with and without it, and with a small DD_PROFILING_MAX_MEMORY.
 * At most one new stack per sample: the kernel checks CPU timers at its ticks, so even
 * at 1 kHz this gives about tick-rate x cores samples per second.
 *
 * usage: many_stacks THREADS CPU_SECONDS_PER_THREAD
 * Prints "maxrss_kib M" (getrusage of the whole process at the end).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#define DEPTH 13	  /* 8192 paths per thread */
#define BURST_ITERS 50000 /* ~50 us per path: many paths per 1 ms sampling period */
#define MAX_THREADS 256

static volatile uint64_t sink;
static double target_seconds;

__attribute__((noinline)) static void descend_left(uint32_t path, int depth);
__attribute__((noinline)) static void descend_right(uint32_t path, int depth);

static void burst(uint32_t path)
{
	uint64_t x = path;
	for (int i = 0; i < BURST_ITERS; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		__asm__ volatile("" : "+r"(x));
	}
	sink += x;
}

static void descend(uint32_t path, int depth)
{
	if (depth == 0)
		burst(path);
	else if (path & 1)
		descend_right(path >> 1, depth - 1);
	else
		descend_left(path >> 1, depth - 1);
}

__attribute__((noinline)) static void descend_left(uint32_t path, int depth)
{
	descend(path, depth);
	__asm__ volatile(""); /* no tail call: each level keeps its frame */
}

/* Not the same body as descend_left: GCC would fold identical functions into one. */
__attribute__((noinline)) static void descend_right(uint32_t path, int depth)
{
	descend(path, depth);
	sink++;
}

static double thread_cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	uint64_t rng = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)(intptr_t)arg << 32);
	for (unsigned r = 0;; r++) {
		if (r % 16 == 0 && thread_cpu_seconds() >= target_seconds)
			break;
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		descend((uint32_t)rng, DEPTH);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 64;
	target_seconds = argc > 2 ? atof(argv[2]) : 0.15;
	if (n < 1 || n > MAX_THREADS || target_seconds <= 0) {
		fprintf(stderr, "usage: many_stacks THREADS CPU_SECONDS_PER_THREAD\n");
		return 2;
	}
	pthread_t t[MAX_THREADS];
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0) {
			perror("pthread_create");
			return 1;
		}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("maxrss_kib %ld\n", ru.ru_maxrss);
	return 0;
}
