/*
 * lock_pair.c - the lock profiler's micro-benchmark: uncontended pthread_mutex_lock /
 * pthread_mutex_unlock pairs on one thread.
 *
 * Run it alone, under LD_PRELOAD=build/libddprof.so with DD_PROFILING_LOCK_ENABLED off
 * (the default: the lock call goes straight to libc) and on (the hook: a trylock and a
 * call more): the difference is the hook's cost on the path every uncontended lock
 * takes. Prints "pairs N", "ns_per_pair X" (CLOCK_MONOTONIC over the loop) and which
 * module the program's pthread_mutex_lock slot leads to.
 * usage: lock_pair [pairs=100000000]. Never run next to other timing work.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	uint64_t pairs = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000000ULL;
	static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	int (*volatile slot)(pthread_mutex_t *) = pthread_mutex_lock;
	Dl_info info;
	const char *mod = "?";
	if (dladdr((void *)slot, &info) && info.dli_fname) {
		mod = strrchr(info.dli_fname, '/');
		mod = mod ? mod + 1 : info.dli_fname;
	}
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < pairs; i++) {
		pthread_mutex_lock(&m);
		pthread_mutex_unlock(&m);
	}
	uint64_t t1 = now_ns();
	printf("lock_module %s\npairs %llu\nns_per_pair %.2f\n", mod, (unsigned long long)pairs,
	       pairs ? (double)(t1 - t0) / (double)pairs : 0.0);
	return 0;
}
