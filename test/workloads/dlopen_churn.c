/*
 * dlopen_churn.c - loads a library, burns CPU in it, unloads it; over and over.
 *
 * usage: dlopen_churn LIBRARY SECONDS [WARMUP]
 * WARMUP: seconds of CPU burned in main first (the library is loaded only after).
 * Each round: dlopen(LIBRARY), call its churn_burn() for ~1 ms of CPU, dlclose. Runs
 * until SECONDS of wall time have passed, then prints "rounds N cpu_seconds X burn_seconds
 * B" (B: the CPU time spent inside churn_burn; the rest is the loader's, whose share
 * depends on the machine: mapping a library costs more on some).
 * The profiler must survive code being unmapped under it and still name churn_burn.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	long rounds = 0;
	double burn_s = 0;
	unsigned long sink = 0;
	if (argc > 3) {
		double warm_end = now(CLOCK_MONOTONIC) + atof(argv[3]);
		while (now(CLOCK_MONOTONIC) < warm_end)
			for (int i = 0; i < 100000; i++)
				sink = sink * 6364136223846793005UL + 1;
	}
	double end = now(CLOCK_MONOTONIC) + atof(argv[2]);
	while (now(CLOCK_MONOTONIC) < end) {
		void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "dlopen: %s\n", dlerror());
			return 1;
		}
		unsigned long (*burn)(double) = (unsigned long (*)(double))dlsym(h, "churn_burn");
		if (!burn) {
			fprintf(stderr, "dlsym: %s\n", dlerror());
			return 1;
		}
		double t0 = now(CLOCK_THREAD_CPUTIME_ID);
		sink += burn(0.001);
		burn_s += now(CLOCK_THREAD_CPUTIME_ID) - t0;
		if (dlclose(h) != 0) {
			fprintf(stderr, "dlclose: %s\n", dlerror());
			return 1;
		}
		rounds++;
	}
	printf("rounds %ld cpu_seconds %.6f burn_seconds %.6f sink %lu\n", rounds,
	       now(CLOCK_PROCESS_CPUTIME_ID), burn_s, sink & 1);
	return 0;
}
