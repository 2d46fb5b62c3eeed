/*
 * alloc_sample.c - the Poisson sampling of allocated bytes (see alloc_sample.h).
 *
 * This file is async-signal-safe (every function but alloc_sample_set_interval, which
 * runs at start-up): no lock, no allocation, no system call, no libm (the exponential
 * draw computes its own logarithm).
 */
#include "agent/alloc/alloc_sample.h"

#include <stdatomic.h>
#include <sys/random.h>
#include <x86intrin.h>

__thread struct alloc_sample_state alloc_sample_tls __attribute__((tls_model("initial-exec")));

/* Relaxed everywhere: set at start-up before any hook runs, then only read. */
static _Atomic uint64_t mean_interval = ALLOC_SAMPLE_DEFAULT_INTERVAL;
static _Atomic uint64_t seed_base;
static _Atomic uint64_t seed_counter;

/* An interval above this would sample almost nothing of a real program; below
 * 1 byte there is no interval. */
#define INTERVAL_MAX (1ULL << 40)
/* Crossings counted one draw at a time up to this many intervals; beyond it (a huge
 * allocation against a small interval) whole blocks of this many count at once, with
 * the same expectation (a Poisson process holds L / M points in L bytes on average),
 * so that the slow path stays bounded. */
#define DRAWS_MAX 64

void alloc_sample_set_interval(uint64_t mean_bytes)
{
	if (mean_bytes == 0 || mean_bytes > INTERVAL_MAX)
		mean_bytes = ALLOC_SAMPLE_DEFAULT_INTERVAL;
	atomic_store_explicit(&mean_interval, mean_bytes, memory_order_relaxed);
	uint64_t seed = 0;
	/* Start-up, normal context: the hooks' seeds derive from it without a system
	 * call of their own (a sandboxed thread may not be allowed one). */
	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
		seed = __rdtsc();
	atomic_store_explicit(&seed_base, seed, memory_order_relaxed);
}

uint64_t alloc_sample_interval(void)
{
	return atomic_load_explicit(&mean_interval, memory_order_relaxed);
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

void alloc_sample_seed(struct alloc_sample_state *s, uint64_t seed)
{
	s->rng = splitmix64(seed);
	if (s->rng == 0)
		s->rng = 0x2545F4914F6CDD1DULL;
}

/* async-signal-safe. A fresh seed for the calling thread's state: the process's base,
 * a counter that differs per thread, the state's address and the time stamp counter
 * (a fork child's copy of a thread must not draw what its parent draws). */
static void seed_thread(struct alloc_sample_state *s)
{
	uint64_t n = atomic_fetch_add_explicit(&seed_counter, 1, memory_order_relaxed);
	alloc_sample_seed(s, atomic_load_explicit(&seed_base, memory_order_relaxed) ^
				 splitmix64(n) ^ (uint64_t)(uintptr_t)s ^ __rdtsc());
}

/* async-signal-safe. xorshift64*. */
static uint64_t rng_next(struct alloc_sample_state *s)
{
	uint64_t x = s->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	s->rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

uint64_t alloc_sample_random(struct alloc_sample_state *s)
{
	return rng_next(s);
}

#define LN2 0.69314718055994530942

/* async-signal-safe. -ln(u) for u = m / 2^53, m in [1, 2^53]: m = x * 2^e with x in
 * [1, 2); ln(x) = 2 atanh(z), z = (x - 1) / (x + 1) <= 1/3, whose series to z^11 is
 * within 2e-7 of it. */
static double neg_ln_unit(uint64_t m)
{
	int e = 63 - __builtin_clzll(m);
	double x = (double)m / (double)(1ULL << e);
	double z = (x - 1.0) / (x + 1.0);
	double z2 = z * z;
	double ln_x =
	    2.0 * z *
	    (1.0 + z2 * (1.0 / 3 + z2 * (1.0 / 5 + z2 * (1.0 / 7 + z2 * (1.0 / 9 + z2 / 11)))));
	return -(ln_x + (double)(e - 53) * LN2);
}

int64_t alloc_sample_draw(struct alloc_sample_state *s, uint64_t mean)
{
	uint64_t m = (rng_next(s) >> 11) + 1; /* 1 .. 2^53: u in (0, 1] */
	double gap = neg_ln_unit(m) * (double)mean;
	/* Below 1 byte (u close to 1): the next byte. At most 36.8 intervals (u = 2^-53). */
	return gap < 1.0 ? 1 : (int64_t)(gap + 0.5);
}

uint64_t alloc_sample_slow(struct alloc_sample_state *s)
{
	uint64_t mean = atomic_load_explicit(&mean_interval, memory_order_relaxed);
	if (s->rng == 0) {
		/* The thread's first allocation: its process starts here, at the first
		 * byte of this allocation (until was 0). */
		seed_thread(s);
		s->until += alloc_sample_draw(s, mean);
		if (s->until > 0)
			return 0;
	}
	uint64_t points = 0;
	int64_t block = (int64_t)(mean * DRAWS_MAX);
	if (s->until <= -block) {
		/* Whole blocks at once: a request of up to 2^63 bytes (counted before the
		 * allocator refuses it) is a division, not 2^38 turns of a loop. */
		/* until > INT64_MIN: it was positive before at most INT64_MAX was taken. */
		uint64_t blocks = (uint64_t)(-s->until) / (uint64_t)block;
		points += blocks * DRAWS_MAX;
		s->until += (int64_t)(blocks * (uint64_t)block);
	}
	while (s->until <= 0) {
		points++;
		s->until += alloc_sample_draw(s, mean);
	}
	return points * mean;
}

void alloc_sample_after_fork_child(void)
{
	/* The countdown stays (what remains of an exponential gap is one: memoryless);
	 * only the draws after it must differ from the parent's. */
	if (alloc_sample_tls.rng != 0)
		seed_thread(&alloc_sample_tls);
}
