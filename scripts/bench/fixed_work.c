/*
 * fixed_work.c - the CPU-overhead workload: a fixed amount of work, not a fixed time.
 *
 * THREADS threads each run ITERS rounds of the same arithmetic loop (work the agent does
 * not change), so whatever a profiler costs the application shows as more wall time and
 * more CPU time for the same work. Times only the work: from before the first thread is
 * created to after the last is joined (wall), and the sum of the workers' own CPU clocks
 * (CPU: signal handling is charged to the interrupted thread). The agent's own threads
 * and its exit flush are measured by the runner from the whole process's rusage.
 *
 * usage: fixed_work THREADS MILLIONS_OF_ITERATIONS_PER_THREAD
 * Prints "wall_s W cpu_s C proc_cpu_s P": P is the whole process's CPU time at the end of
 * main (getrusage: the profiler's own threads so far included, its exit flush not).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_THREADS 256

static uint64_t iters;
static volatile uint64_t sink;
static double thread_cpu[MAX_THREADS];

static double now_s(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A few nested calls so sampled stacks have some depth, as in real code. */
__attribute__((noinline)) static uint64_t work_leaf(uint64_t x, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

__attribute__((noinline)) static uint64_t work_mid(uint64_t x, uint64_t n)
{
	return work_leaf(x, n) ^ 1;
}

static void *worker(void *arg)
{
	int idx = (int)(intptr_t)arg;
	uint64_t x = (uint64_t)idx;
	/* Chunks of 1M iterations (~0.5 ms): stacks alternate between two callers. */
	for (uint64_t done = 0; done < iters; done += 1000000)
		x = (done / 1000000) & 1 ? work_mid(x, 1000000) : work_leaf(x, 1000000);
	sink += x;
	thread_cpu[idx] = now_s(CLOCK_THREAD_CPUTIME_ID);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2;
	double millions = argc > 2 ? atof(argv[2]) : 500;
	if (n < 1 || n > MAX_THREADS || millions <= 0) {
		fprintf(stderr, "usage: fixed_work THREADS MILLIONS_OF_ITERATIONS_PER_THREAD\n");
		return 2;
	}
	iters = (uint64_t)(millions * 1e6);
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
	for (int i = 0; i < n; i++)
		cpu += thread_cpu[i];
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double proc = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
		      (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	printf("wall_s %.6f cpu_s %.6f proc_cpu_s %.6f\n", wall, cpu, proc);
	return 0;
}
