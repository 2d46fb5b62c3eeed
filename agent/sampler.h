/*
 * sampler.h - the sampling signal: choosing it, its handler, per-thread state.
 *
 * Owns: the signal disposition of the profiling signal, the handler (unwind + record
 * into the active profile), and the per-thread state the handler reads (tid, stack
 * bounds) in initial-exec TLS, which never allocates.
 * Context: sampler_init from the constructor; sampler_thread_setup from each sampled
 * thread (non-signal); the handler in any sampled thread; sampler_after_fork_child in
 * the fork child.
 */
#ifndef DDPROF_AGENT_SAMPLER_H
#define DDPROF_AGENT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/profile.h"
#include "agent/unwind.h"

/* Put in sigev_value of our timers so the handler tells them from other senders. */
#define SAMPLER_COOKIE 0x0dd9f0f

/*
 * Chooses the signal (requested_signo if non-zero and free, else SIGPROF if free, else
 * a free real-time signal), installs the handler, and records into pp with weight
 * period_ns per timer expiry. Never replaces a handler the application installed.
 * Returns the signal number, or a negative errno when no signal is free.
 */
int sampler_init(struct profile_pair *pp, uint64_t period_ns, int requested_signo,
		 unwinder_fn unwinder);

int sampler_signal(void);
uint64_t sampler_period_ns(void);

/* Global gate read by the handler: samples are recorded only while enabled. */
void sampler_set_enabled(bool on);

/* In the calling thread: caches its tid and stack bounds for the handler. lo/hi may be
 * 0 when unknown (the handler then looks the stack up in the maps snapshot). may_fire:
 * a timer of ours may already target the thread (the start-up scan may have armed it),
 * so the signal is blocked while the bounds change (two system calls). */
void sampler_thread_setup(pid_t tid, uintptr_t stack_lo, uintptr_t stack_hi, bool may_fire);

/* Whether a sample was recorded in the calling thread. */
bool sampler_thread_sampled(void);

/* In the calling thread: marks it as a profiler thread; its samples are ignored. */
void sampler_thread_mark_internal(void);
/* Whether the calling thread is one of the profiler's own. */
bool sampler_thread_is_internal(void);

/* The calling thread's tid, cached (one syscall the first time). */
pid_t sampler_gettid(void);

/* Fork child, forking thread: forget the parent's cached tid. */
void sampler_after_fork_child(void);

/* Counters for diagnostics. */
uint64_t sampler_foreign_signals(void);

#endif
