/*
 * fork_pages.c - which pages of a preloaded library's data a fork child touches.
 *
 * usage: fork_pages LIBNAME WARMUP_S   (run with libstop_at_exit.so preloaded after
 * the library)
 * A thread burns CPU throughout (a profiler samples it); main burns WARMUP_S seconds too,
 * forks 20 children that exit at once, then forks ROUNDS more that stop at the end of
 * their exit (libstop_at_exit.so) and reads each child's /proc/PID/smaps: the pages of the
 * library's writable data it referenced since the fork (fork starts the child's page
 * table entries "old"), split into the file-backed part (.data and what the linker
 * put there) and .bss, which is made its own mapping first (mprotect with a different
 * protection: diagnostics only, the child inherits it). On virtual machines whose
 * hypervisor shadows page tables, the first touch of each page costs a new process
 * 10-25 us, read or write.
 * Prints "child I data_kb D bss_kb B" for each, then "data_kb D bss_kb B" (referenced,
 * KiB, of the child that touched least).
 */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_bool stop;
static const char *lib_name;
static uintptr_t bss_lo, bss_hi; /* page-aligned */
/* Stopped children measured; the least is printed: a child the profiler happens to
 * sample in its millisecond of life (one in ten or so at 99 Hz) touches the sampler's
 * state too. */
#define ROUNDS 5

static void *burn(void *arg)
{
	volatile unsigned long x = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		x = x * 6364136223846793005UL + 1;
	return arg;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int find_bss(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	if (!strstr(info->dlpi_name, lib_name))
		return 0;
	long page = sysconf(_SC_PAGESIZE);
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
			continue;
		uintptr_t file_end = info->dlpi_addr + ph->p_vaddr + ph->p_filesz;
		uintptr_t mem_end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		bss_lo = (file_end + page - 1) & ~(uintptr_t)(page - 1);
		bss_hi = (mem_end + page - 1) & ~(uintptr_t)(page - 1);
	}
	return 1;
}

/* Forks a child that exits at once and stops at the end of its exit; the KiB of the
 * library's file-backed writable data and of its .bss the child referenced. 0 or -1. */
static int stopped_child_pages(long *data_kb, long *bss_kb)
{
	fflush(stdout); /* the child's exit would flush our buffer again */
	/* "Referenced" also counts a page whose memory the kernel marked accessed (for
	 * the parent and the child alike: they share it). Cleared here, it shows what the
	 * child touches from its fork on, not what the parent's threads did before. */
	FILE *refs = fopen("/proc/self/clear_refs", "w");
	if (!refs || fputs("1", refs) < 0 || fclose(refs) != 0) {
		perror("fork_pages: /proc/self/clear_refs");
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0)
		exit(0);
	int status;
	if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) {
		fprintf(stderr, "fork_pages: the child did not stop at exit\n");
		return -1;
	}
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	FILE *f = fopen(path, "r");
	long kb;
	*data_kb = *bss_kb = 0;
	int in = 0; /* 1: a file-backed writable mapping of the library, 2: its .bss */
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perm[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) == 3 &&
		    strchr(line, '-') < strchr(line, ' '))
			in = lo == bss_lo && hi == bss_hi		? 2
			     : perm[1] == 'w' && strstr(line, lib_name) ? 1
									: 0;
		else if (in && sscanf(line, "Referenced: %ld kB", &kb) == 1)
			*(in == 1 ? data_kb : bss_kb) += kb;
	}
	if (f)
		fclose(f);
	kill(pid, SIGCONT);
	waitpid(pid, &status, 0);
	return f ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: fork_pages LIBNAME WARMUP_S\n");
		return 2;
	}
	lib_name = argv[1];
	pthread_t b;
	pthread_create(&b, NULL, burn, NULL);
	volatile unsigned long x = 0;
	for (double until = now_s() + atof(argv[2]); now_s() < until;)
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + 1;
	for (int i = 0; i < 20; i++) {
		pid_t pid = fork();
		if (pid == 0)
			exit(0);
		waitpid(pid, NULL, 0);
	}
	if (!dl_iterate_phdr(find_bss, NULL) || bss_hi <= bss_lo) {
		fprintf(stderr, "fork_pages: %s not loaded, or no .bss\n", lib_name);
		return 1;
	}
	if (mprotect((void *)bss_lo, bss_hi - bss_lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
		perror("mprotect");
		return 1;
	}
	setenv("STOP_CHILD_AT_EXIT", "1", 1);
	long best_data = -1, best_bss = -1;
	for (int round = 0; round < ROUNDS; round++) {
		long data_kb, bss_kb;
		if (stopped_child_pages(&data_kb, &bss_kb) != 0)
			return 1;
		printf("child %d data_kb %ld bss_kb %ld\n", round, data_kb, bss_kb);
		if (best_data < 0 || data_kb + bss_kb < best_data + best_bss) {
			best_data = data_kb;
			best_bss = bss_kb;
		}
	}
	atomic_store_explicit(&stop, true, memory_order_relaxed);
	pthread_join(b, NULL);
	printf("data_kb %ld bss_kb %ld\n", best_data, best_bss);
	return 0;
}
