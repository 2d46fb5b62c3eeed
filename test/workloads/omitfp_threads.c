/*
 * omitfp_threads.c - CPU work in code built without frame pointers (-O2
 * -fomit-frame-pointer, see the Makefile): the stacks the DWARF unwinder must complete.
 *
 * usage: omitfp_threads THREADS SECONDS
 * Each thread runs a small call tree (omitfp_outer -> omitfp_middle -> omitfp_leaf, with
 * rbp used as a general register) until it has burned SECONDS of its own CPU time.
 * Prints "cpu_seconds X" (process CPU time) at the end.
 * THREADS 0: the main thread does the work and the program creates no thread (nor loads
 * any library); it also prints "threads_start N threads_mid M threads_end K", the
 * process's threads at the start, after half of the work, and at the end.
 * OMITFP_FORK_AFTER=S: the process first sleeps S seconds (no CPU, so no sample), then
 * forks, and the child does the work while the parent waits for it.
 * OMITFP_SYSCALLS=1 (with THREADS 0): the work is system calls instead, read(2) of
 * 16 MiB from /dev/zero in a loop, so that (almost) every sample arrives as a call
 * returns, in libc.
 * OMITFP_POLL=1 (with THREADS 0): between two batches of work the program polls no
 * descriptor (poll(2) with a zero timeout), as an event loop checks for events.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../preload/ddprof.h"

static double seconds;

static double thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* noinline + many live values: the compiler uses rbp as a scratch register. */
__attribute__((noinline)) static uint64_t omitfp_leaf(uint64_t x, unsigned n)
{
	uint64_t a = x, b = x ^ 0x9e3779b97f4a7c15ULL, c = x * 3, d = x + 7, e = x >> 3, f = x << 5,
		 g = ~x;
	for (unsigned i = 0; i < n; i++) {
		a = a * 6364136223846793005ULL + b;
		b ^= a >> 17;
		c += b * d;
		d = (d << 7) | (d >> 57);
		e ^= c + f;
		f += e ^ g;
		g = g * 31 + a;
	}
	return a ^ b ^ c ^ d ^ e ^ f ^ g;
}

__attribute__((noinline)) static uint64_t omitfp_middle(uint64_t x, unsigned depth)
{
	if (depth == 0)
		return omitfp_leaf(x, 2000);
	volatile char pad[64 * (depth & 3) + 16];
	pad[0] = (char)x;
	return omitfp_middle(x + depth, depth - 1) ^ (uint64_t)pad[0];
}

__attribute__((noinline)) static uint64_t omitfp_outer(uint64_t x)
{
	return omitfp_middle(x, 1 + (unsigned)(x % 6));
}

static void *worker(void *arg)
{
	uint64_t x = (uintptr_t)arg, acc = 0;
	while (thread_cpu() < seconds) {
		for (int i = 0; i < 32; i++)
			acc += omitfp_outer(x++);
	}
	return (void *)(uintptr_t)(acc & 1);
}

/* The process's threads, as /proc/self/task lists them. */
static int count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

#define READ_BYTES (16u << 20)

static int main_thread_only(bool syscalls, bool polls)
{
	int start = count_threads(), mid = -1;
	uint64_t x = 1, acc = 0;
	int zero = syscalls ? open("/dev/zero", O_RDONLY) : -1;
	char *buf = syscalls ? malloc(READ_BYTES) : NULL;
	if (syscalls && (zero < 0 || !buf))
		return 5;
	while (thread_cpu() < seconds) {
		if (syscalls) {
			/* 16 calls between clock reads: the program's own code (and the
			 * clock's, a libc frame above it) gets next to no sample. */
			for (int i = 0; i < 16; i++)
				acc += (uint64_t)read(zero, buf, READ_BYTES);
		} else {
			for (int i = 0; i < 32; i++)
				acc += omitfp_outer(x++);
		}
		if (polls)
			poll(NULL, 0, 0);
		if (mid < 0 && thread_cpu() >= seconds / 2)
			mid = count_threads();
	}
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	printf("threads_start %d threads_mid %d threads_end %d acc %d\n", start, mid,
	       count_threads(), (int)(acc & 1));
	/* The agent's diagnostics, when it is loaded (dlsym is no dlopen: no need). */
	int (*diag)(struct ddprof_diagnostics *, size_t) =
	    (int (*)(struct ddprof_diagnostics *, size_t))dlsym(RTLD_DEFAULT,
								"ddprof_get_diagnostics");
	struct ddprof_diagnostics d;
	if (diag && diag(&d, sizeof(d)) == 0)
		printf("uploader_started %llu boot_cfi_frames %llu unwind_tables %llu\n",
		       (unsigned long long)d.uploader_started,
		       (unsigned long long)d.boot_cfi_frames, (unsigned long long)d.unwind_tables);
	printf("cpu_seconds %.6f\n", ts.tv_sec + ts.tv_nsec / 1e9);
	return 0;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 4;
	seconds = argc > 2 ? atof(argv[2]) : 1.0;
	const char *fork_after = getenv("OMITFP_FORK_AFTER");
	if (fork_after) {
		double s = atof(fork_after);
		struct timespec nap = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
		nanosleep(&nap, NULL);
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0)
			return 3;
		if (pid > 0) {
			int st;
			waitpid(pid, &st, 0);
			return WIFEXITED(st) ? WEXITSTATUS(st) : 4;
		}
	}
	pthread_t t[64];
	if (threads == 0)
		return main_thread_only(getenv("OMITFP_SYSCALLS") != NULL,
					getenv("OMITFP_POLL") != NULL);
	if (threads < 1 || threads > 64)
		return 2;
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	printf("cpu_seconds %.6f\n", ts.tv_sec + ts.tv_nsec / 1e9);
	return 0;
}
