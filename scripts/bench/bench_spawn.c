/*
 * bench_spawn.c - what a profiler costs thread creation and fork.
 *
 *   threads N  creates and joins N threads one after another (each returns at once):
 *              the agent arms a timer per thread and deletes it at thread exit
 *   fork N     forks N children one after another; each calls exit(0) (atexit handlers
 *              and library destructors run, as in real programs) and the parent waits
 * A thread burns CPU meanwhile in both modes, so the agent is sampling while it happens.
 *
 * usage: bench_spawn threads|fork N [WARMUP_S]
 * WARMUP_S: burn CPU that long first (so a profiler has uploaded once: its steady state).
 * Prints "rate R" (operations per second of wall time).
 */
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

static void *nothing(void *arg)
{
	return arg;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "threads") && strcmp(argv[1], "fork"))) {
		fprintf(stderr, "usage: bench_spawn threads|fork N\n");
		return 2;
	}
	int forking = !strcmp(argv[1], "fork");
	int n = atoi(argv[2]);
	pthread_t b;
	pthread_create(&b, NULL, burner, NULL);
	if (argc > 3) {
		volatile unsigned long x = 0;
		double until = now_s() + atof(argv[3]);
		while (now_s() < until)
			for (int i = 0; i < 100000; i++)
				x = x * 6364136223846793005UL + 1;
	}
	double t0 = now_s();
	for (int i = 0; i < n; i++) {
		if (forking) {
			pid_t pid = fork();
			if (pid < 0) {
				perror("fork");
				return 1;
			}
			if (pid == 0)
				exit(0);
			int status;
			if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
			    WEXITSTATUS(status) != 0) {
				fprintf(stderr, "bench_spawn: child %d failed\n", i);
				return 1;
			}
		} else {
			pthread_t t;
			if (pthread_create(&t, NULL, nothing, NULL) != 0) {
				perror("pthread_create");
				return 1;
			}
			pthread_join(t, NULL);
		}
	}
	double secs = now_s() - t0;
	atomic_store_explicit(&stop, true, memory_order_relaxed);
	pthread_join(b, NULL);
	printf("rate %.1f\n", n / secs);
	return 0;
}
