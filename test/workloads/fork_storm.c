/*
 * fork_storm.c - a process that forks hundreds of short children while a busy thread
 * is being sampled.
 *
 * usage: fork_storm CHILDREN [exec ARGV...]
 * A burner thread spins (sampled at whatever rate the agent uses) while the main thread
 * forks CHILDREN children one after another. Each child mallocs, writes a line, and
 * ends with exit() (even-numbered) or _exit() (odd); the parent waits for each and
 * checks its status. With "exec ARGV...", each child execs ARGV instead.
 * Prints "children N failed F seconds S rate R pids P1,P2,..." (first 64 pids).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_bool stop;

static void *burner(void *arg)
{
	volatile unsigned long x = 0;
	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005UL + 1;
	return NULL;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	int children = argc > 1 ? atoi(argv[1]) : 200;
	char **exec_argv = argc > 3 && !strcmp(argv[2], "exec") ? argv + 3 : NULL;
	pthread_t t;
	pthread_create(&t, NULL, burner, NULL);
	int failed = 0;
	pid_t pids[64];
	int npids = 0;
	double t0 = now();
	for (int i = 0; i < children; i++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0) {
			failed++;
			continue;
		}
		if (pid == 0) {
			if (exec_argv) {
				execv(exec_argv[0], exec_argv);
				_exit(127);
			}
			size_t n = 4096 + (size_t)(i % 7) * 65536;
			char *p = malloc(n);
			memset(p, i & 0xff, n);
			char line[64];
			int len = snprintf(line, sizeof(line), "child %d byte %d\n", i, p[n - 1]);
			if (write(STDERR_FILENO, line, (size_t)len) != len)
				_exit(3);
			free(p);
			if (i & 1)
				_exit(0);
			exit(0);
		}
		if (npids < 64)
			pids[npids++] = pid;
		int status;
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0)
			failed++;
	}
	double secs = now() - t0;
	atomic_store(&stop, true);
	pthread_join(t, NULL);
	printf("children %d failed %d seconds %.3f rate %.1f pids ", children, failed, secs,
	       children / secs);
	for (int i = 0; i < npids; i++)
		printf("%s%d", i ? "," : "", (int)pids[i]);
	printf("\n");
	return failed ? 1 : 0;
}
