/*
 * thread_churn.c - creates threads that burn a little CPU and end, in waves, ending
 * through return, pthread_exit and cancellation. At the end prints how many POSIX
 * timers the process still holds (from /proc/self/timers): the agent must have deleted
 * the timer of every ended thread, and the process's CPU time (user + system). Each thread names
 * itself "churn-N" (N < 1000): the agent reads the name of a sampled thread when it ends.
 *
 * With the agent, also prints how many timers it armed late (ddprof_get_diagnostics:
 * threads that lived 1 ms), or -1 without it.
 *
 * usage: thread_churn [threads=600] [wave=8] [burn_us=2000]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../../preload/ddprof.h"

static volatile uint64_t sink;
static long burn_ns = 2000000L;

__attribute__((noinline)) void churn_burn(void)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	do {
		for (int i = 0; i < 20000; i++)
			sink = sink * 2862933555777941757ULL + 3037000493ULL;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < burn_ns);
}

static void *worker(void *arg)
{
	int how = (int)(intptr_t)arg % 3;
	char name[16];
	snprintf(name, sizeof(name), "churn-%d", (int)((intptr_t)arg % 1000));
	pthread_setname_np(pthread_self(), name);
	churn_burn();
	if (how == 1)
		pthread_exit(NULL);
	if (how == 2) {
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
		for (;;) {
			pthread_testcancel();
			churn_burn();
		}
	}
	return NULL;
}

static int count_timers(void)
{
	FILE *f = fopen("/proc/self/timers", "r");
	if (!f)
		return -1;
	char line[256];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n += strncmp(line, "ID:", 3) == 0;
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	int total = argc > 1 ? atoi(argv[1]) : 600;
	int wave = argc > 2 ? atoi(argv[2]) : 8;
	if (argc > 3)
		burn_ns = atol(argv[3]) * 1000L;
	pthread_t t[64];
	if (wave > 64)
		wave = 64;
	int peak = 0;
	for (int done = 0; done < total; done += wave) {
		for (int i = 0; i < wave; i++)
			if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)(done + i))) {
				perror("pthread_create");
				return 1;
			}
		int now = count_timers();
		if (now > peak)
			peak = now;
		for (int i = 0; i < wave; i++) {
			if ((done + i) % 3 == 2)
				pthread_cancel(t[i]);
			pthread_join(t[i], NULL);
		}
	}
	printf("threads %d peak_timers %d final_timers %d\n", total, peak, count_timers());
	struct ddprof_diagnostics d;
	int (*get)(struct ddprof_diagnostics *, size_t) =
	    (int (*)(struct ddprof_diagnostics *, size_t))dlsym(RTLD_DEFAULT,
								"ddprof_get_diagnostics");
	long long late = get && get(&d, sizeof(d)) == 0 ? (long long)d.timers_armed_late : -1;
	printf("armed_late %lld\n", late);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("cpu_seconds %.6f\n", (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
					 (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	return 0;
}
