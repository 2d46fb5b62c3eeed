/*
 * lock_sample.h - which lock waits are sampled: a Poisson process over the time each
 * thread waits for locks.
 *
 * Owns: the per-thread wait countdown and random state, and the process's mean
 * interval. Sample points fall on the nanoseconds a thread spends waiting for a
 * contended lock as a Poisson process of mean interval M (exponential gaps: the
 * allocation profiler's process, agent/alloc/alloc_sample.h, over time instead of
 * bytes, drawn with its alloc_sample_draw). A wait of d ns that holds k >= 1 points is
 * sampled with two weights:
 *  - wait: k * M ns. E[k] = d / M, so the sum of the wait weights is an unbiased
 *    estimate of the time waited, whatever the durations (as alloc-space is of bytes);
 *  - count: k * M / d acquisitions, rounded at random to an integer with the right
 *    expectation. E[k * M / d] = 1, so the sum is an unbiased estimate of the number of
 *    contended acquisitions: a short wait is rarely sampled and then counts for many.
 * The unsampled path is a thread-local subtraction and a test (initial-exec TLS: no
 * lock, no atomic, no lazy TLS allocation).
 * Context: async-signal-safe throughout but lock_sample_set_interval (start-up). A
 * signal whose handler waits for a lock between the fast path's load and store of the
 * countdown loses that wait from the countdown: it moves the next sample point only.
 */
#ifndef DDPROF_AGENT_LOCK_LOCK_SAMPLE_H
#define DDPROF_AGENT_LOCK_LOCK_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/alloc/alloc_sample.h"

/* The default mean interval: 10 ms of waiting between samples. Go's mutex profile
 * samples 1 in N contention events (off by default; runtime.SetMutexProfileFraction),
 * async-profiler's lock profiler samples by total wait (its lock=DURATION option, 10 ms
 * in common use). By wait time, a heavily contended process (every thread of 8 always
 * waiting: 8 s of waiting a second) takes 800 samples a second, each an unwind of a few
 * microseconds made while the thread holds the lock it waited for: under 1% of one
 * core; a lightly contended one (10 ms a second) one. Per site the estimate's relative
 * spread is sqrt(M / wait): 1% for 100 s of waiting at a site in a period. */
#define LOCK_SAMPLE_DEFAULT_INTERVAL_NS (10ULL * 1000 * 1000)

/* The thread's state: the same shape as the allocation countdown (until counts
 * nanoseconds), so that alloc_sample_draw serves both. */
extern __thread struct alloc_sample_state lock_sample_tls
    __attribute__((tls_model("initial-exec")));

/* A sampled wait's weights (see the top). */
struct lock_sample_weights {
	uint64_t count;	  /* contended acquisitions it stands for (may be 0) */
	uint64_t wait_ns; /* nanoseconds waited it stands for */
};

/* Sets the mean interval in nanoseconds (0 or absurd values: the default). Start-up,
 * before any hook runs; a fork child keeps it. */
void lock_sample_set_interval(uint64_t mean_ns);
uint64_t lock_sample_interval(void);

/* async-signal-safe. The slow path: the countdown reached 0. */
bool lock_sample_slow(struct alloc_sample_state *s, uint64_t wait_ns,
		      struct lock_sample_weights *out);

/* async-signal-safe. Counts a wait of wait_ns against state s; true when it holds a
 * sample point, with its weights in *out. */
static inline bool lock_sample_wait_on(struct alloc_sample_state *s, uint64_t wait_ns,
				       struct lock_sample_weights *out)
{
	s->until -= wait_ns > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)wait_ns;
	if (__builtin_expect(s->until > 0, 1))
		return false;
	return lock_sample_slow(s, wait_ns, out);
}

/* async-signal-safe. The same on the calling thread's state (the hooks). */
static inline bool lock_sample_wait(uint64_t wait_ns, struct lock_sample_weights *out)
{
	return lock_sample_wait_on(&lock_sample_tls, wait_ns, out);
}

/* Fork child: the forking thread's draws must differ from its parent's. */
void lock_sample_after_fork_child(void);

#endif
