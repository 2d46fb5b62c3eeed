/*
 * alloc_sample.h - which allocations are sampled: a Poisson process over the bytes each
 * thread allocates.
 *
 * Owns: the per-thread byte countdown and random state, and the process's mean
 * interval. Sample points fall on the bytes a thread allocates as a Poisson process of
 * mean interval M (exponential gaps, as in Go, jemalloc, tcmalloc and ddprof); an
 * allocation that holds n >= 1 points is sampled with weight n * M, so the sum of the
 * weights is an unbiased estimate of the bytes allocated, whatever the sizes (an
 * allocation of size s holds s / M points on average). The unsampled path is a
 * thread-local subtraction and a test (initial-exec TLS: no lock, no atomic, no lazy
 * TLS allocation).
 * Context: async-signal-safe throughout (the allocation hooks run wherever the
 * application allocates, its signal handlers included). A signal that allocates
 * between the fast path's load and store of the countdown loses that allocation's
 * bytes from the countdown: it only moves the next sample point, never crashes.
 */
#ifndef DDPROF_AGENT_ALLOC_ALLOC_SAMPLE_H
#define DDPROF_AGENT_ALLOC_ALLOC_SAMPLE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

/* The default mean interval, as in Go, jemalloc and ddprof. */
#define ALLOC_SAMPLE_DEFAULT_INTERVAL (512u * 1024u)

struct alloc_sample_state {
	int64_t until; /* bytes before the next sample point; <= 0: the slow path decides */
	uint64_t rng;  /* xorshift state; 0: not seeded yet (the thread's first allocation) */
};

extern __thread struct alloc_sample_state alloc_sample_tls
    __attribute__((tls_model("initial-exec")));

/* Sets the mean interval in bytes (0 or absurd values: the default). Start-up, before
 * any hook runs; a fork child keeps it. */
void alloc_sample_set_interval(uint64_t mean_bytes);
uint64_t alloc_sample_interval(void);

/* async-signal-safe. The slow path: the countdown reached 0. Returns the weight. */
uint64_t alloc_sample_slow(struct alloc_sample_state *s);

/* async-signal-safe. Counts size bytes against the calling thread's countdown; true
 * when it ran out: the allocation may hold a sample point, and
 * alloc_sample_slow(&alloc_sample_tls) says its weight. */
static inline bool alloc_sample_due(size_t size)
{
	struct alloc_sample_state *s = &alloc_sample_tls;
	/* A size past INT64_MAX fails in the allocator anyway: counted as the most. */
	s->until -= size > (size_t)INT64_MAX ? INT64_MAX : (int64_t)size;
	return __builtin_expect(s->until <= 0, 0);
}

/* async-signal-safe. Counts size bytes against the calling thread's countdown; returns
 * the sample's weight (a multiple of the mean interval) when the allocation holds a
 * sample point, 0 when it is not sampled. */
static inline uint64_t alloc_sample_bytes(size_t size)
{
	return alloc_sample_due(size) ? alloc_sample_slow(&alloc_sample_tls) : 0;
}

/* The same on a given state (tests; the hooks use the thread's). */
static inline uint64_t alloc_sample_bytes_on(struct alloc_sample_state *s, size_t size)
{
	s->until -= size > (size_t)INT64_MAX ? INT64_MAX : (int64_t)size;
	if (s->until > 0)
		return 0;
	return alloc_sample_slow(s);
}

/* A state with a chosen seed (tests: reproducible draws). seed 0 is replaced. */
void alloc_sample_seed(struct alloc_sample_state *s, uint64_t seed);

/* async-signal-safe. One gap of the process: exponential with the given mean, >= 1. */
int64_t alloc_sample_draw(struct alloc_sample_state *s, uint64_t mean);
/* async-signal-safe. 64 uniform random bits from the state's generator (the lock
 * profiler's random rounding, agent/lock/lock_sample.c). The state must be seeded. */
uint64_t alloc_sample_random(struct alloc_sample_state *s);

/* Fork child: each thread's state is a copy of its parent thread's; the child's
 * thread reseeds at its next slow path so that parent and child do not sample the
 * same allocations. */
void alloc_sample_after_fork_child(void);

#endif
