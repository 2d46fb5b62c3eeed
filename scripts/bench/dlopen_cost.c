/*
 * dlopen_cost.c - the time of one dlopen, for scripts/bench/peers_dlopen.py: the
 * caller's own dlopen is where libddprof builds the new modules' unwind tables.
 *
 * usage: dlopen_cost LIB...   dlopens each LIB (RTLD_NOW), in order, once; prints
 *                             "load LIB NS" per library (CLOCK_MONOTONIC around the
 *                             call), then "mapped PATH" for every module the calls
 *                             mapped (the driver reads their .eh_frame sizes).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define BEFORE_MAX 256

static uintptr_t before[BEFORE_MAX];
static int nbefore;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int note_before(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (nbefore < BEFORE_MAX)
		before[nbefore++] = info->dlpi_addr;
	return 0;
}

static int print_new(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	for (int i = 0; i < nbefore; i++)
		if (before[i] == info->dlpi_addr)
			return 0;
	printf("mapped %s\n", info->dlpi_name);
	return 0;
}

int main(int argc, char **argv)
{
	dl_iterate_phdr(note_before, NULL);
	for (int i = 1; i < argc; i++) {
		uint64_t t0 = now_ns();
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		uint64_t t1 = now_ns();
		if (!h) {
			fprintf(stderr, "dlopen %s: %s\n", argv[i], dlerror());
			return 1;
		}
		printf("load %s %llu\n", argv[i], (unsigned long long)(t1 - t0));
	}
	dl_iterate_phdr(print_new, NULL);
	return 0;
}
