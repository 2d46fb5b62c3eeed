/*
 * small_stacks.c - an application that makes every new thread's default stack small.
 *
 * usage: small_stacks SECONDS
 * main sets the default thread stack to 64 KiB (pthread_setattr_default_np, as a server
 * with thousands of threads may), then starts 2 threads that burn CPU in
 * small_stack_work for SECONDS. Its first pthread_create is the profiler's first need
 * (its uploader thread starts then, after the default changed). Meanwhile main finds
 * the profiler's thread ("ddprof-upload" in /proc/self/task), reads its stack pointer
 * while it waits (/proc/self/task/TID/syscall) and the mapping that holds it, and prints
 * "uploader_stack_below_sp_kb K" (how far its stack reaches below that pointer: the
 * mapping starts above the guard page), or -1 if the thread was not found, then
 * "cpu_seconds C" (the process's CPU, rusage) once the threads are joined.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define SMALL_STACK (64 * 1024)

static double seconds;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

__attribute__((noinline)) static void *small_stack_work(void *arg)
{
	volatile unsigned long x = 0;
	for (double until = now_s() + seconds; now_s() < until;)
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + 1;
	return arg;
}

/* The stack pointer of a waiting thread of ours, or 0. */
static unsigned long waiting_sp(const char *tid)
{
	char path[320], line[512];
	snprintf(path, sizeof(path), "/proc/self/task/%s/syscall", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	unsigned long sp = 0;
	if (fgets(line, sizeof(line), f) && strncmp(line, "running", 7) != 0) {
		/* "nr arg1 .. arg6 sp pc": the next to last field. */
		char *fields[10];
		int n = 0;
		for (char *tok = strtok(line, " \n"); tok && n < 10; tok = strtok(NULL, " \n"))
			fields[n++] = tok;
		if (n >= 3)
			sp = strtoul(fields[n - 2], NULL, 16);
	}
	fclose(f);
	return sp;
}

/* KiB of the mapping holding sp below sp, or -1. */
static long below_sp_kb(unsigned long sp)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && sp >= lo && sp < hi)
			kb = (long)((sp - lo) / 1024);
	}
	if (f)
		fclose(f);
	return kb;
}

static long uploader_stack_kb(void)
{
	for (int attempt = 0; attempt < 200; attempt++) {
		DIR *d = opendir("/proc/self/task");
		struct dirent *e;
		while (d && (e = readdir(d))) {
			char path[320], comm[32] = "";
			snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
			FILE *f = fopen(path, "r");
			if (!f)
				continue;
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = 0;
			fclose(f);
			unsigned long sp =
			    strncmp(comm, "ddprof-upload", 13) == 0 ? waiting_sp(e->d_name) : 0;
			if (sp) {
				closedir(d);
				return below_sp_kb(sp);
			}
		}
		if (d)
			closedir(d);
		usleep(10000);
	}
	return -1;
}

int main(int argc, char **argv)
{
	seconds = argc > 1 ? atof(argv[1]) : 1.0;
	pthread_attr_t a;
	pthread_attr_init(&a);
	if (pthread_attr_setstacksize(&a, SMALL_STACK) != 0 ||
	    pthread_setattr_default_np(&a) != 0) {
		fprintf(stderr, "small_stacks: cannot set the default stack size\n");
		return 1;
	}
	pthread_attr_destroy(&a);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, small_stack_work, NULL) != 0) {
			fprintf(stderr, "small_stacks: pthread_create failed\n");
			return 1;
		}
	printf("uploader_stack_below_sp_kb %ld\n", uploader_stack_kb());
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("cpu_seconds %.3f\n", (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
					 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	return 0;
}
