/*
 * fork_children.c - fork children of a warmed-up parent: idle ones and one computing.
 *
 * usage: fork_children WARMUP_S CHILD_S [IDLE=1]
 * The parent burns WARMUP_S of CPU (a profiler has built its unwind tables by then),
 * then forks IDLE idle children (each sleeps CHILD_S, exit(0)) and a compute child
 * (burns CHILD_S of CPU in child_burn, checking every result against one computed
 * before, and between two results polls no descriptor, as a worker checks for work,
 * then exit(0)). Meanwhile it polls /proc/PID/task of all every 20 ms.
 * Prints "idle PID:N,PID:N,... compute PID tasks M thread_after_ms T bad B cpu_seconds
 * C": N, M: most threads seen in each child; T: when the compute child first had a
 * second thread (-1: never); B: results that differed; C: the compute child's CPU time.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Floating-point and integer state live across the loop: a register the profiler
 * failed to restore shows as a different result. */
__attribute__((noinline)) static double child_burn(unsigned seed, unsigned long *hash)
{
	double a = seed, b = 1.0;
	unsigned long h = seed * 0x9e3779b97f4a7c15UL;
	for (int i = 1; i < 100000; i++) {
		a = a * 0.999999 + 1.0 / i;
		b = b + a * 1e-7;
		h = (h ^ (unsigned long)i) * 0x100000001b3UL;
	}
	*hash = h;
	return a + b;
}

static int tasks_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: fork_children WARMUP_S CHILD_S [IDLE]\n");
		return 2;
	}
	double warmup = atof(argv[1]), child_s = atof(argv[2]);
	int n_idle = argc > 3 ? atoi(argv[3]) : 1;
	if (n_idle < 1 || n_idle > 64)
		n_idle = 1;
	unsigned long h;
	volatile double sink = 0;
	double until = now_s(CLOCK_THREAD_CPUTIME_ID) + warmup;
	while (now_s(CLOCK_THREAD_CPUTIME_ID) < until)
		sink += child_burn(1, &h);
	/* The compute child's verdict and CPU time, written before it exits. */
	double *shared =
	    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
		return 1;
	fflush(stdout);
	pid_t idle[64];
	int idle_max[64] = {0};
	for (int i = 0; i < n_idle; i++) {
		idle[i] = fork();
		if (idle[i] == 0) {
			struct timespec ts = {(time_t)child_s,
					      (long)((child_s - (long)child_s) * 1e9)};
			nanosleep(&ts, NULL);
			exit(0);
		}
		if (idle[i] < 0)
			return 1;
	}
	double t_fork = now_s(CLOCK_MONOTONIC);
	pid_t compute = fork();
	if (compute == 0) {
		double ref[4];
		unsigned long ref_h[4];
		for (unsigned s = 0; s < 4; s++)
			ref[s] = child_burn(s, &ref_h[s]);
		double bad = 0;
		double end = now_s(CLOCK_THREAD_CPUTIME_ID) + child_s;
		for (unsigned s = 0; now_s(CLOCK_THREAD_CPUTIME_ID) < end; s = (s + 1) % 4) {
			double v = child_burn(s, &h);
			bad += v != ref[s] || h != ref_h[s];
			poll(NULL, 0, 0);
		}
		struct rusage ru;
		getrusage(RUSAGE_SELF, &ru);
		shared[0] = bad;
		shared[1] = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
			    (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
		exit(0);
	}
	if (compute < 0)
		return 1;
	int compute_max = 0;
	double thread_after = -1;
	int live = n_idle + 1;
	while (live > 0) {
		for (int i = 0; i < n_idle; i++) {
			int ti = tasks_of(idle[i]);
			idle_max[i] = ti > idle_max[i] ? ti : idle_max[i];
		}
		int tc = tasks_of(compute);
		compute_max = tc > compute_max ? tc : compute_max;
		if (tc >= 2 && thread_after < 0)
			thread_after = now_s(CLOCK_MONOTONIC) - t_fork;
		int st;
		pid_t p;
		while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
			live--;
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
				return 1;
		}
		usleep(20000);
	}
	printf("idle ");
	for (int i = 0; i < n_idle; i++)
		printf("%s%d:%d", i ? "," : "", (int)idle[i], idle_max[i]);
	printf(" compute %d tasks %d thread_after_ms %.0f bad %.0f cpu_seconds %.3f\n",
	       (int)compute, compute_max, thread_after < 0 ? -1.0 : thread_after * 1e3, shared[0],
	       shared[1]);
	return 0;
}
