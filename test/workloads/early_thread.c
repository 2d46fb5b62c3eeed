/*
 * early_thread.c - built as libearly_thread.so. Preloaded AFTER libddprof.so, its
 * constructor runs first and starts a thread that burns CPU in early_burn for the
 * number of CPU seconds in EARLY_BURN_SECONDS (default 1). That thread exists before
 * the agent's constructor: the agent must find it in /proc/self/task and sample it.
 * With EARLY_MAIN_BURN_SECONDS, the main thread first burns that much CPU in this
 * constructor (the early thread then burns EARLY_BURN_SECONDS: 0 for none). With
 * EARLY_BLOCK_SIGNALS_LAST, the early thread burns that many of its seconds last with
 * every signal blocked.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;
static pthread_t early;

__attribute__((noinline)) void early_burn(double seconds)
{
	struct timespec t;
	do {
		for (int i = 0; i < 100000; i++)
			sink = sink * 6364136223846793005ULL + 1;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	} while ((double)t.tv_sec + (double)t.tv_nsec / 1e9 < seconds);
	__asm__ volatile("");
}

static void *early_main(void *arg)
{
	(void)arg;
	const char *s = getenv("EARLY_BURN_SECONDS");
	const char *b = getenv("EARLY_BLOCK_SIGNALS_LAST");
	double total = s ? atof(s) : 1.0, blocked = b ? atof(b) : 0;
	if (blocked > 0) {
		/* The last stretch with every signal blocked (a critical section): no sample
		 * can land there, only the thread's end account can count it. */
		early_burn(total - blocked);
		sigset_t all;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, NULL);
	}
	early_burn(total);
	return NULL;
}

__attribute__((constructor)) static void start_early(void)
{
	/* EARLY_MAIN_BURN_SECONDS: CPU the main thread burns here first, before the
	 * agent's constructor (start-up work the agent must still account for). */
	const char *m = getenv("EARLY_MAIN_BURN_SECONDS");
	if (m)
		early_burn(atof(m));
	/* Named here, before this constructor returns (and so before the agent's runs):
	 * a name set by the thread itself could race with the agent's /proc scan. */
	if (pthread_create(&early, NULL, early_main, NULL) == 0)
		pthread_setname_np(early, "early-thread");
}

__attribute__((destructor)) static void join_early(void)
{
	pthread_join(early, NULL);
}
