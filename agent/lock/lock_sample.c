/*
 * lock_sample.c - the Poisson sampling of lock wait time (see lock_sample.h).
 *
 * This file is async-signal-safe (every function but lock_sample_set_interval, which
 * runs at start-up): no lock, no allocation, no system call, no libm.
 */
#include "agent/lock/lock_sample.h"

#include <stdatomic.h>
#include <sys/random.h>
#include <x86intrin.h>

__thread struct alloc_sample_state lock_sample_tls __attribute__((tls_model("initial-exec")));

/* Relaxed everywhere: set at start-up before any hook runs, then only read. */
static _Atomic uint64_t mean_interval = LOCK_SAMPLE_DEFAULT_INTERVAL_NS;
static _Atomic uint64_t seed_base;
static _Atomic uint64_t seed_counter;

/* Below 1 us a sample would be taken at nearly every contended acquisition (each a few
 * microseconds of unwinding); above a minute nothing would be sampled. */
#define INTERVAL_MIN_NS 1000ULL
#define INTERVAL_MAX_NS (60ULL * 1000 * 1000 * 1000)
/* As in alloc_sample.c: past this many intervals in one wait, whole blocks count at
 * once (the same expectation), so that the slow path stays bounded. */
#define DRAWS_MAX 64
/* The count weight's fraction, as a 53-bit fixed-point number (a double's mantissa). */
#define FRACTION_ONE (1ULL << 53)

void lock_sample_set_interval(uint64_t mean_ns)
{
	if (mean_ns < INTERVAL_MIN_NS || mean_ns > INTERVAL_MAX_NS)
		mean_ns = LOCK_SAMPLE_DEFAULT_INTERVAL_NS;
	atomic_store_explicit(&mean_interval, mean_ns, memory_order_relaxed);
	uint64_t seed = 0;
	/* Start-up, normal context: the hooks' seeds derive from it without a system
	 * call of their own. */
	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
		seed = __rdtsc();
	atomic_store_explicit(&seed_base, seed, memory_order_relaxed);
}

uint64_t lock_sample_interval(void)
{
	return atomic_load_explicit(&mean_interval, memory_order_relaxed);
}

/* async-signal-safe. A fresh seed for a thread's state: the process's base, a counter
 * that differs per thread, the state's address and the time stamp counter. */
static void seed_thread(struct alloc_sample_state *s)
{
	uint64_t n = atomic_fetch_add_explicit(&seed_counter, 1, memory_order_relaxed);
	alloc_sample_seed(s, atomic_load_explicit(&seed_base, memory_order_relaxed) ^
				 (n * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)(uintptr_t)s ^ __rdtsc());
}

/* async-signal-safe. x rounded down or up at random, up with probability its fraction:
 * the expectation is x. */
static uint64_t round_at_random(struct alloc_sample_state *s, double x)
{
	uint64_t whole = (uint64_t)x;
	double frac = x - (double)whole;
	uint64_t u = alloc_sample_random(s) >> 11; /* uniform in [0, 2^53) */
	return whole + ((double)u < frac * (double)FRACTION_ONE ? 1 : 0);
}

bool lock_sample_slow(struct alloc_sample_state *s, uint64_t wait_ns,
		      struct lock_sample_weights *out)
{
	uint64_t mean = atomic_load_explicit(&mean_interval, memory_order_relaxed);
	if (s->rng == 0) {
		/* The thread's first contended wait: its process starts at this wait's
		 * start (until was 0 before it). */
		seed_thread(s);
		s->until += alloc_sample_draw(s, mean);
		if (s->until > 0)
			return false;
	}
	uint64_t points = 0;
	int64_t block = (int64_t)(mean * DRAWS_MAX);
	while (s->until <= -block) {
		points += DRAWS_MAX;
		s->until += block;
	}
	while (s->until <= 0) {
		points++;
		s->until += alloc_sample_draw(s, mean);
	}
	out->wait_ns = points * mean;
	double w = wait_ns ? (double)out->wait_ns / (double)wait_ns : 1.0;
	out->count = round_at_random(s, w);
	return true;
}

void lock_sample_after_fork_child(void)
{
	if (lock_sample_tls.rng != 0)
		seed_thread(&lock_sample_tls);
}
