/*
 * fork_sampled.c - short fork children that each compute briefly, one after another.
 *
 * usage: fork_sampled WARMUP_S CHILDREN CHILD_S GAP_S
 * The parent burns WARMUP_S of CPU (a profiler has started its thread by then), then
 * forks CHILDREN children one at a time: each burns CHILD_S of CPU in child_work and
 * calls exit(0); the parent waits for it, then sleeps GAP_S. Prints "parent P pids
 * P,P,... exit_ms E,E,...": E, each child's exit (from its exit call to the parent's wait
 * returning, in ms: what a profiler's exit work adds to a short child).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 64

static double now_s(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static unsigned long child_work(double cpu_s)
{
	volatile unsigned long x = 1;
	double until = now_s(CLOCK_THREAD_CPUTIME_ID) + cpu_s;
	while (now_s(CLOCK_THREAD_CPUTIME_ID) < until)
		for (int i = 0; i < 10000; i++)
			x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: fork_sampled WARMUP_S CHILDREN CHILD_S GAP_S\n");
		return 2;
	}
	double warmup = atof(argv[1]), child_s = atof(argv[3]), gap = atof(argv[4]);
	int n = atoi(argv[2]);
	if (n < 1 || n > MAX_CHILDREN)
		return 2;
	/* Shared with the children: when each called exit. */
	volatile double *exit_at = mmap(NULL, MAX_CHILDREN * sizeof(double), PROT_READ | PROT_WRITE,
					MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (exit_at == MAP_FAILED)
		return 1;
	child_work(warmup);
	pid_t pids[MAX_CHILDREN];
	double exit_ms[MAX_CHILDREN];
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			child_work(child_s);
			exit_at[i] = now_s(CLOCK_MONOTONIC);
			exit(0);
		}
		int status;
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "fork_sampled: child %d failed\n", i);
			return 1;
		}
		exit_ms[i] = (now_s(CLOCK_MONOTONIC) - exit_at[i]) * 1e3;
		pids[i] = pid;
		struct timespec ts = {(time_t)gap, (long)((gap - (double)(time_t)gap) * 1e9)};
		nanosleep(&ts, NULL);
	}
	printf("parent %d pids ", (int)getpid());
	for (int i = 0; i < n; i++)
		printf("%s%d", i ? "," : "", (int)pids[i]);
	printf(" exit_ms ");
	for (int i = 0; i < n; i++)
		printf("%s%.2f", i ? "," : "", exit_ms[i]);
	printf("\n");
	return 0;
}
