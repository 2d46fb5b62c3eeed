/*
 * wrap_create.c - a program whose library (libwrapcreate.so) wraps pthread_create under
 * its own mutex, and which computes while holding that mutex, polling between batches.
 *
 * usage: wrap_create SECONDS
 * Holds the wrapper's mutex for SECONDS of CPU, then creates two threads through the
 * wrapper and joins them. Prints "wrapped N" (threads the wrapper created: 2 unless
 * something bypassed or broke it) and "cpu_seconds C".
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void wrap_lock(void);
void wrap_unlock(void);
int wrap_created(void);

static volatile uint64_t sink;

static double thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static uint64_t wrapped_burn(uint64_t x)
{
	for (int i = 0; i < 200000; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}

static void *short_thread(void *arg)
{
	sink = wrapped_burn((uintptr_t)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 1.0;
	wrap_lock();
	uint64_t x = 1;
	for (double end = thread_cpu() + seconds; thread_cpu() < end;) {
		x = wrapped_burn(x);
		poll(NULL, 0, 0);
	}
	wrap_unlock();
	sink = x;
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, short_thread, (void *)(uintptr_t)(i + 1)) != 0)
			return 3;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	printf("wrapped %d\ncpu_seconds %.6f\n", wrap_created(), ts.tv_sec + ts.tv_nsec / 1e9);
	return 0;
}
