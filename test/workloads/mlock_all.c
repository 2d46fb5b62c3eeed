/*
 * mlock_all.c - a program that locks its memory: computes, calls mlockall(MCL_CURRENT),
 * reports what the kernel locked, computes a bit more and exits.
 *
 * usage: mlock_all [seconds before the lock=0.5] [seconds after=0.2] [--maps]
 * Prints "vmsize_kib N" (VmSize just before the call), "mlockall 0" or "mlockall -ERRNO",
 * "vmlck_kib N" (VmLck just after), and the process's CPU time as "cpu_seconds S".
 * --maps also prints /proc/self/maps before the call (to see who takes what).
 * Used by test/integration/tests_harm.py: the profiler must not make the lock bigger by
 * more than a little, nor make it fail where it succeeds alone.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

static volatile uint64_t sink;

static double cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Spins until the process has used until_s of CPU. The loop is in the function itself,
 * so that the sampled leaf is the function that names the phase. */
__attribute__((noinline)) void spin_before_lock(double until_s)
{
	uint64_t x = sink;
	while (cpu_seconds() < until_s)
		for (int i = 0; i < 100000; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			__asm__ volatile("" : "+r"(x));
		}
	sink = x;
}

__attribute__((noinline)) void spin_after_lock(double until_s)
{
	uint64_t x = sink + 1;
	while (cpu_seconds() < until_s)
		for (int i = 0; i < 100000; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			__asm__ volatile("" : "+r"(x));
		}
	sink = x;
}

/* The value of a "Key:   N kB" line of /proc/self/status, -1 if absent. */
static long file_kib(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[256];
	long v = -1;
	size_t n = strlen(key);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, n) == 0 && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static void print_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f))
		fputs(line, stdout);
	fclose(f);
}

int main(int argc, char **argv)
{
	double before = argc > 1 ? atof(argv[1]) : 0.5;
	double after = argc > 2 ? atof(argv[2]) : 0.2;
	int maps = argc > 3 && strcmp(argv[3], "--maps") == 0;
	spin_before_lock(before);
	long vmsize = file_kib("/proc/self/status", "VmSize");
	if (maps)
		print_maps();
	int rc = mlockall(MCL_CURRENT) == 0 ? 0 : -errno;
	long vmlck = file_kib("/proc/self/status", "VmLck");
	long locked_rss = file_kib("/proc/self/smaps_rollup", "Locked");
	struct rlimit rl;
	getrlimit(RLIMIT_MEMLOCK, &rl);
	printf("vmsize_kib %ld\nmlockall %d\nvmlck_kib %ld\nlocked_rss_kib %ld\n"
	       "memlock_limit_kib %lld\n",
	       vmsize, rc, vmlck, locked_rss,
	       rl.rlim_cur == RLIM_INFINITY ? -1LL : (long long)(rl.rlim_cur / 1024));
	fflush(stdout);
	spin_after_lock(before + after);
	printf("cpu_seconds %.6f\n", cpu_seconds());
	return 0;
}
