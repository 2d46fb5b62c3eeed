/*
 * lock_contention.c - lock contention with a known truth, for the lock profile's
 * integration tests (test/integration/tests_lock.py).
 *
 *   lock_contention sites [seconds=3] [threads=4] [hold_us=200]
 *       threads take one mutex in a loop, 70% of the time from site_a, 30% from site_b
 *       (a seeded draw per acquisition), hold it hold_us burning CPU and sleep a
 *       quarter of that outside it. Each site
 *       measures its own wait: CLOCK_MONOTONIC read right before pthread_mutex_lock and
 *       right after it returns (what a hook times, from the call to the acquisition,
 *       plus the hook's own few nanoseconds). Prints per site its wait in ns, its
 *       acquisitions and those that waited over 5 us.
 *   lock_contention cond [seconds=2] [hold_us=300]
 *       one consumer, two producers on a queue behind a mutex and a condition
 *       variable: a producer pushes, signals, and keeps the mutex hold_us, so the
 *       consumer, woken, waits that long to take the mutex back inside
 *       pthread_cond_wait (consumer_wait). Prints the consumer's reacquisition time:
 *       from the first signal after it began to wait (stamped by the producer, under
 *       the mutex, right before pthread_cond_signal) to the return.
 *   lock_contention fork [children=2]
 *       0.3 s of contention (3 threads), then each child (forked from the main thread
 *       while the parent's threads contend) runs 0.5 s of contention of its own and
 *       exits; prints "child <pid>" for each.
 *   lock_contention probe
 *       prints which module the program's pthread_mutex_lock slot leads to
 *       ("lock_module libc.so.6" when nothing hooks it).
 * Every mode ends with the lock counters of ddprof_get_diagnostics when the agent is
 * there. Lines are "name value".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_diag.h"

#define CONTENDED_NS 5000 /* a wait longer than this found the mutex held */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void burn_until(uint64_t t)
{
	while (now_ns() < t)
		;
}

static void print_lock_diagnostics(void)
{
	struct ddprof_diagnostics d;
	if (!agent_diagnostics(&d))
		return;
	printf("diag_lock_hooks_installed %llu\ndiag_lock_contended %llu\ndiag_lock_samples "
	       "%llu\ndiag_lock_cond_waits %llu\n",
	       (unsigned long long)d.lock_hooks_installed, (unsigned long long)d.lock_contended,
	       (unsigned long long)d.lock_samples, (unsigned long long)d.lock_cond_waits);
}

/* ---------------------------------------------------------------- sites */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t hold_ns, end_ns;

struct site_stats {
	uint64_t wait_ns, acquisitions, contended;
};

struct worker {
	pthread_t thr;
	unsigned seed;
	struct site_stats a, b;
};

/* Holds the mutex hold_ns burning CPU, then sleeps a quarter of that outside it: the sleeper
 * leaves the mutex to the others (glibc's mutex is not fair: a thread that unlocks and
 * locks again at once keeps it while the waiter it woke is being scheduled). */
static void hold(void)
{
	burn_until(now_ns() + hold_ns);
	pthread_mutex_unlock(&mu);
	struct timespec pause = {0, (long)(hold_ns / 4)};
	nanosleep(&pause, NULL);
}

static __attribute__((noinline, noipa)) void site_a(struct site_stats *st)
{
	uint64_t t0 = now_ns();
	pthread_mutex_lock(&mu);
	uint64_t d = now_ns() - t0;
	st->wait_ns += d;
	st->acquisitions++;
	st->contended += d > CONTENDED_NS;
	hold();
}

static __attribute__((noinline, noipa)) void site_b(struct site_stats *st)
{
	uint64_t t0 = now_ns();
	pthread_mutex_lock(&mu);
	uint64_t d = now_ns() - t0;
	st->wait_ns += d;
	st->acquisitions++;
	st->contended += d > CONTENDED_NS;
	hold();
}

static void *contend(void *arg)
{
	struct worker *w = arg;
	while (now_ns() < end_ns) {
		if (rand_r(&w->seed) % 10 < 7)
			site_a(&w->a);
		else
			site_b(&w->b);
	}
	return NULL;
}

static void run_contention(int nthreads, double seconds, struct site_stats *a, struct site_stats *b)
{
	struct worker w[64];
	if (nthreads > 64)
		nthreads = 64;
	end_ns = now_ns() + (uint64_t)(seconds * 1e9);
	for (int i = 0; i < nthreads; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].seed = 1234 + (unsigned)i;
		pthread_create(&w[i].thr, NULL, contend, &w[i]);
	}
	memset(a, 0, sizeof(*a));
	memset(b, 0, sizeof(*b));
	for (int i = 0; i < nthreads; i++) {
		pthread_join(w[i].thr, NULL);
		a->wait_ns += w[i].a.wait_ns;
		a->acquisitions += w[i].a.acquisitions;
		a->contended += w[i].a.contended;
		b->wait_ns += w[i].b.wait_ns;
		b->acquisitions += w[i].b.acquisitions;
		b->contended += w[i].b.contended;
	}
}

static int run_sites(double seconds, int nthreads, uint64_t hold_us)
{
	hold_ns = hold_us * 1000;
	struct site_stats a, b;
	run_contention(nthreads, seconds, &a, &b);
	printf("site_a_wait_ns %llu\nsite_b_wait_ns %llu\n", (unsigned long long)a.wait_ns,
	       (unsigned long long)b.wait_ns);
	printf("site_a_acquisitions %llu\nsite_b_acquisitions %llu\n",
	       (unsigned long long)a.acquisitions, (unsigned long long)b.acquisitions);
	printf("site_a_contended %llu\nsite_b_contended %llu\n", (unsigned long long)a.contended,
	       (unsigned long long)b.contended);
	return 0;
}

/* ---------------------------------------------------------------- cond */

static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static int queued;
static bool done;
static uint64_t first_signal_ns; /* under qmu: the first signal since the consumer waits */
static uint64_t reacquire_ns, wakeups;

static __attribute__((noinline)) void consumer_wait(void)
{
	pthread_cond_wait(&qcond, &qmu);
}

static void *consumer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&qmu);
	for (;;) {
		while (!queued && !done) {
			first_signal_ns = 0;
			consumer_wait();
			if (first_signal_ns) {
				reacquire_ns += now_ns() - first_signal_ns;
				wakeups++;
			}
		}
		if (!queued && done)
			break;
		queued--;
		pthread_mutex_unlock(&qmu);
		burn_until(now_ns() + 20000); /* consume: 20 us */
		pthread_mutex_lock(&qmu);
	}
	pthread_mutex_unlock(&qmu);
	return NULL;
}

static __attribute__((noinline)) void producer_lock(void)
{
	pthread_mutex_lock(&qmu);
}

static void *producer(void *arg)
{
	(void)arg;
	while (now_ns() < end_ns) {
		producer_lock();
		queued++;
		if (!first_signal_ns)
			first_signal_ns = now_ns();
		pthread_cond_signal(&qcond);
		burn_until(now_ns() + hold_ns); /* the consumer, woken, waits for this */
		pthread_mutex_unlock(&qmu);
		struct timespec pause = {0, 1000000}; /* 1 ms */
		nanosleep(&pause, NULL);
	}
	return NULL;
}

static int run_cond(double seconds, uint64_t hold_us)
{
	hold_ns = hold_us * 1000;
	end_ns = now_ns() + (uint64_t)(seconds * 1e9);
	pthread_t c, p[2];
	pthread_create(&c, NULL, consumer, NULL);
	for (int i = 0; i < 2; i++)
		pthread_create(&p[i], NULL, producer, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(p[i], NULL);
	pthread_mutex_lock(&qmu);
	done = true;
	pthread_cond_broadcast(&qcond);
	pthread_mutex_unlock(&qmu);
	pthread_join(c, NULL);
	printf("consumer_reacquire_ns %llu\nconsumer_wakeups %llu\n",
	       (unsigned long long)reacquire_ns, (unsigned long long)wakeups);
	return 0;
}

/* ---------------------------------------------------------------- fork, probe */

struct bg {
	double seconds;
};

static void *background(void *arg)
{
	struct site_stats a, b;
	run_contention(3, ((struct bg *)arg)->seconds, &a, &b);
	return NULL;
}

static int run_fork(int children)
{
	hold_ns = 100000;
	struct bg arg = {0.3};
	pthread_t t;
	pthread_create(&t, NULL, background, &arg);
	struct timespec pause = {0, 100000000}; /* 0.1 s: the parent contends */
	nanosleep(&pause, NULL);
	pid_t pids[16];
	if (children > 16)
		children = 16;
	for (int i = 0; i < children; i++) {
		fflush(stdout); /* a child must not print the parent's buffered lines again */
		pids[i] = fork();
		if (pids[i] == 0) {
			/* The parent's threads may have held it at the fork: the child's
			 * copy would stay held forever. The child is single-threaded. */
			pthread_mutex_init(&mu, NULL);
			struct site_stats a, b;
			run_contention(3, 0.5, &a, &b);
			printf("child_site_a_wait_ns %llu\n", (unsigned long long)a.wait_ns);
			print_lock_diagnostics();
			fflush(stdout);
			exit(0);
		}
		printf("child %d\n", (int)pids[i]);
	}
	fflush(stdout);
	pthread_join(t, NULL);
	int failed = 0;
	for (int i = 0; i < children; i++) {
		int st;
		if (pids[i] < 0 || waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			failed++;
	}
	printf("children_failed %d\n", failed);
	return failed ? 1 : 0;
}

static int run_probe(void)
{
	int (*volatile slot)(pthread_mutex_t *) = pthread_mutex_lock;
	Dl_info info;
	const char *name = "?";
	if (dladdr((void *)slot, &info) && info.dli_fname) {
		name = strrchr(info.dli_fname, '/');
		name = name ? name + 1 : info.dli_fname;
	}
	printf("lock_module %s\n", name);
	/* A few contended acquisitions: none may be counted while profiling is off. */
	hold_ns = 200000;
	struct site_stats a, b;
	run_contention(3, 0.2, &a, &b);
	printf("site_a_contended %llu\n", (unsigned long long)a.contended);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "sites";
	int rc;
	if (strcmp(mode, "sites") == 0)
		rc = run_sites(argc > 2 ? atof(argv[2]) : 3.0, argc > 3 ? atoi(argv[3]) : 4,
			       argc > 4 ? strtoull(argv[4], NULL, 10) : 200);
	else if (strcmp(mode, "cond") == 0)
		rc = run_cond(argc > 2 ? atof(argv[2]) : 2.0,
			      argc > 3 ? strtoull(argv[3], NULL, 10) : 300);
	else if (strcmp(mode, "fork") == 0)
		rc = run_fork(argc > 2 ? atoi(argv[2]) : 2);
	else if (strcmp(mode, "probe") == 0)
		rc = run_probe();
	else {
		fprintf(stderr, "usage: lock_contention sites|cond|fork|probe [...]\n");
		return 2;
	}
	print_lock_diagnostics();
	return rc;
}
