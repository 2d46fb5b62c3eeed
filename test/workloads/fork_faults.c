/*
 * fork_faults.c - page faults a fork costs the parent and the child.
 *
 * usage: fork_faults N
 * A thread burns CPU (so a profiler samples, and the parent's copy-on-write faults
 * need TLB shoot-downs, as in a real server); main forks N children one after another,
 * each calls exit(0) (atexit handlers and destructors run) and is waited for.
 * Prints "parent_minflt X child_minflt Y child_minflt_mean Z": minor faults per fork in
 * the parent (between the forks after the first, all its threads; getrusage), and in a
 * child: the median child and the mean (wait4). A child the profiler happens to sample
 * right after the fork (a few in a hundred) starts its uploader thread and uploads,
 * hundreds of faults: the median is the typical child. Counts, not times: they do not depend on
 * the machine's speed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_bool stop;

static void *burn(void *arg)
{
	volatile unsigned long x = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		x = x * 6364136223846793005UL + 1;
	return arg;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200;
	pthread_t b;
	pthread_create(&b, NULL, burn, NULL);
	/* Past start-up (1 s): the profiler has built its unwind tables; a child forked
	 * before that starts its uploader thread at once (uploader_atfork_child). */
	struct timespec ts = {1, 0};
	nanosleep(&ts, NULL);
	struct rusage s0, s1, ru;
	long *child = calloc((size_t)n, sizeof(*child));
	if (!child)
		return 1;
	/* A process's first fork has one-time work (the profiler's thread reads the symbol
	 * tables its children will use, a few hundred faults): one fork first, out of the
	 * count, as a server forks its first worker long before the others. */
	pid_t first = fork();
	if (first == 0)
		exit(0);
	if (first < 0 || waitpid(first, NULL, 0) != first)
		return 1;
	ts.tv_sec = 0;
	ts.tv_nsec = 300 * 1000 * 1000;
	nanosleep(&ts, NULL);
	getrusage(RUSAGE_SELF, &s0);
	long sum = 0;
	for (int i = 0; i < n; i++) {
		pid_t p = fork();
		if (p == 0)
			exit(0);
		if (p < 0 || wait4(p, NULL, 0, &ru) != p)
			return 1;
		child[i] = ru.ru_minflt;
		sum += ru.ru_minflt;
	}
	getrusage(RUSAGE_SELF, &s1);
	atomic_store_explicit(&stop, true, memory_order_relaxed);
	pthread_join(b, NULL);
	qsort(child, (size_t)n, sizeof(*child), cmp_long);
	printf("parent_minflt %.2f child_minflt %ld child_minflt_mean %.2f\n",
	       (double)(s1.ru_minflt - s0.ru_minflt) / n, child[n / 2], (double)sum / n);
	free(child);
	return 0;
}
