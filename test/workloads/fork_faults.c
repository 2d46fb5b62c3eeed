/*
 * fork_faults.c - page faults a fork costs the parent and the child.
 *
 * usage: fork_faults N
 * A thread burns CPU (so a profiler samples, and the parent's copy-on-write faults
 * need TLB shoot-downs, as in a real server); main forks N children one after another,
 * each calls exit(0) (atexit handlers and destructors run) and is waited for.
 * Prints "parent_minflt X child_minflt Y": minor faults per fork in the parent (between
 * the forks, all its threads) and in each child, from getrusage. Counts, not times:
 * they do not depend on the machine's speed.
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

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200;
	pthread_t b;
	pthread_create(&b, NULL, burn, NULL);
	/* Past start-up (1 s): the profiler has built its unwind tables; a child forked
	 * before that starts its uploader thread at once (uploader_atfork_child). */
	struct timespec ts = {1, 0};
	nanosleep(&ts, NULL);
	struct rusage s0, c0, s1, c1;
	getrusage(RUSAGE_SELF, &s0);
	getrusage(RUSAGE_CHILDREN, &c0);
	for (int i = 0; i < n; i++) {
		pid_t p = fork();
		if (p == 0)
			exit(0);
		if (p < 0 || waitpid(p, NULL, 0) != p)
			return 1;
	}
	getrusage(RUSAGE_SELF, &s1);
	getrusage(RUSAGE_CHILDREN, &c1);
	atomic_store_explicit(&stop, true, memory_order_relaxed);
	pthread_join(b, NULL);
	printf("parent_minflt %.2f child_minflt %.2f\n", (double)(s1.ru_minflt - s0.ru_minflt) / n,
	       (double)(c1.ru_minflt - c0.ru_minflt) / n);
	return 0;
}
