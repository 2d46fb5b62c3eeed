/*
 * cpu_split.c - the accuracy workload: N threads each burn a fixed amount of CPU,
 * 75% of it in hot_a and 25% in hot_b (the same loop body, 3 : 1 iterations).
 *
 * usage: cpu_split [threads=4] [cpu seconds per thread=1.0]
 * Prints the process CPU time (user + system) it used, as seen by the kernel, and its
 * pid.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define ROUND_ITERS 200000 /* ~0.2 ms of work per unit: fine-grained 75/25 mixing */
#define CHECK_EVERY 64	   /* rounds between reads of the thread CPU clock (~70 ms) */

static volatile uint64_t sink;

/* The loop sits in each hot function itself so the sampled leaf is hot_a or hot_b. */
#define SPIN(n, seed)                                                                              \
	do {                                                                                       \
		uint64_t x_ = (seed);                                                              \
		for (uint64_t i_ = 0; i_ < (n); i_++) {                                            \
			x_ = x_ * 6364136223846793005ULL + 1442695040888963407ULL;                 \
			__asm__ volatile("" : "+r"(x_));                                           \
		}                                                                                  \
		sink += x_;                                                                        \
	} while (0)

/* A call makes hot_a/hot_b non-leaf, so they set up a frame (GCC 12 ignores
 * -mno-omit-leaf-frame-pointer) and frame-pointer stacks keep their caller. */
__attribute__((noinline)) void round_done(void)
{
	__asm__ volatile("");
}

__attribute__((noinline)) void hot_a(uint64_t n)
{
	SPIN(n, sink);
	round_done();
}

__attribute__((noinline)) void hot_b(uint64_t n)
{
	SPIN(n, sink + 1);
	round_done();
}

static double thread_cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double target_seconds = 1.0;

static void *worker(void *arg)
{
	char name[16];
	snprintf(name, sizeof(name), "burner-%d", (int)(intptr_t)arg);
	prctl(PR_SET_NAME, name);
	/* The CPU clock is read every CHECK_EVERY rounds only: a syscall every round
	 * measurably skewed where 99 Hz CPU-timer signals landed (hot_a +4 points). */
	/* Round lengths vary at random (the 3 : 1 ratio stays): the kernel samples CPU
	 * timers at ticks only, so a strictly periodic loop would alias against the tick
	 * lattice of the thread's CPU time and bias the split by a few points. */
	uint64_t rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)(intptr_t)arg;
	for (unsigned r = 0;; r++) {
		if (r % CHECK_EVERY == 0 && thread_cpu_seconds() >= target_seconds)
			break;
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		uint64_t unit = ROUND_ITERS / 2 + rng % ROUND_ITERS; /* 0.5x to 1.5x */
		hot_a(3 * unit);
		hot_b(unit);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 4;
	if (argc > 2)
		target_seconds = atof(argv[2]);
	if (n < 1 || n > 1024 || target_seconds <= 0) {
		fprintf(stderr, "usage: cpu_split [threads] [cpu seconds per thread]\n");
		return 2;
	}
	pthread_t *t = calloc((size_t)n, sizeof(*t));
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0) {
			perror("pthread_create");
			return 1;
		}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	/* One line, one write: several exec'd copies may share a pipe. */
	printf("cpu_seconds %.6f pid %d\n",
	       (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
		   ru.ru_stime.tv_usec / 1e6,
	       (int)getpid());
	free(t);
	return 0;
}
