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

#include "agent/store/profiles.h"
#include "agent/unwind/unwind.h"

/* Put in the low 32 bits of our timers' sigev_value, so the handler tells them from
 * other senders. With SAMPLER_COOKIE, the high 32 bits carry where the timer's first
 * expiry falls on its thread's CPU clock, in microseconds (the weight of an exact
 * thread's first sample: sampler_thread_armed). For a thread that armed its own timer
 * as it started, its offset from then: the microseconds before are added at its end.
 * SAMPLER_COOKIE_CREDIT marks a thread the start-up scan found (it ran before the
 * profiler): its first sample weighs that position too, the CPU before the scan
 * included, and it is exact from then on. */
#define SAMPLER_COOKIE 0x0dd9f0fU
/* CPU a thread used before the profiler started is credited (a thread the start-up
 * scan found: SAMPLER_COOKIE_CREDIT; the main thread: profiles_note_startup) only up to
 * this: more means the library came late into a running process (dlopen), and that
 * CPU predates the first profile. */
#define SAMPLER_PRESTART_CREDIT_MAX_NS 1000000000ULL
/* The main thread's CPU before the profiler started (the loader, libc's start, earlier
 * preloads and constructors: a few ms, tens for the largest relocations) is credited to the first
 * profile only up to this. More is the CPU of the program this process ran before an
 * exec, which exec keeps counting on the thread: that program's own profile holds it
 * when it was profiled (preload/exec.c uploads it in the exec call), and it is not
 * this program's work either way. */
#define SAMPLER_STARTUP_CREDIT_MAX_NS 250000000ULL
#define SAMPLER_COOKIE_CREDIT 0x0dd9f1fU
static inline void *sampler_timer_value(uint64_t ns, uint32_t cookie)
{
	uint64_t us = ns / 1000;
	if (us > UINT32_MAX)
		us = UINT32_MAX; /* 71 minutes of CPU before arming: the end adds the rest */
	return (void *)(uintptr_t)((us << 32) | cookie);
}

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

/* Normal context, the calling thread: its tid and stack bounds as
 * sampler_thread_setup cached them (0 when unknown). */
void sampler_thread_bounds(pid_t *tid, uintptr_t *lo, uintptr_t *hi);

/* Whether a sample was recorded in the calling thread. */
bool sampler_thread_sampled(void);
/* Whether the calling thread's end will add the CPU no sample covered
 * (sampler_thread_armed with exact, not yet ended). */
bool sampler_thread_has_end_account(void);

/*
 * Exact CPU at a thread's end. A thread calls sampler_thread_armed(exact) before its
 * timer is armed (by itself or by the uploader thread); its first sample then weighs
 * its CPU clock (all it used so far) instead of a period, and at its end, its timer
 * deleted, sampler_thread_end adds what no sample covered:
 *  - a sampled thread: its CPU clock minus the weights recorded, on its last stack
 *    (counted as 0 samples);
 *  - a thread with no sample (short, or between two kernel ticks): its CPU, read with
 *    probability min(1, lifetime / period) and divided by it, on the stack of its
 *    start routine (root; NULL: not for this thread).
 * So a thread that ends is counted in full, not within a period of it.
 */
struct sampler_thread_root {
	uintptr_t start_fn;  /* the thread's start routine */
	uintptr_t caller_pc; /* a pc in the frame that called it */
	uintptr_t frame;     /* that frame's frame pointer (saved rbp, return address) */
};
/* Added to an unsampled thread's lifetime: CPU it used before it armed its timer. */
#define SAMPLER_END_SLACK_NS 50000ULL
/* exact: the thread's end will call sampler_thread_end with a root (our pthread_create
 * trampoline). Otherwise (the main thread, a fork child) its samples keep whole-period
 * weights, unbiased without an end account: an unsampled thread would count 0 while a
 * sampled one counted in full, which biases short ones low (C^2/P instead of C). */
void sampler_thread_armed(bool exact);
void sampler_thread_end(const struct sampler_thread_root *root);

/* A hook's caller, unwound (sampler_caller_begin): its stack, leaf first, in a buffer of
 * the calling thread's that stays valid until sampler_caller_end. */
struct sampler_caller {
	const uintptr_t *pcs;
	uint32_t n;
	int32_t tid;
	int saved_errno;
};
/* async-signal-safe. Unwinds the stack of a hook's caller in the calling thread: caller
 * holds the pc of its call (the return address minus one), its stack pointer as the
 * call left it and its frame pointer (agent/alloc/alloc_hooks.c). On the profiler's own
 * threads the stack is the one frame PC_PROFILER, tid 0: the profiler's share. false,
 * and nothing to end, while sampling is off or nested (a signal handler of the
 * application that allocates while the thread records). Then any number of
 * sampler_caller_record, and sampler_caller_end, which restores errno. */
bool sampler_caller_begin(const struct unwind_regs *caller, struct sampler_caller *out);
/* async-signal-safe. Records a sample of kind with values (profile_types.h) at c's stack
 * in the active profile. */
void sampler_caller_record(const struct sampler_caller *c, enum profile_kind kind,
			   const uint64_t *values);
/* async-signal-safe. The same with tag (a synthetic pc: agent/unwind/unwind.h) appended
 * as the stack's outermost pc (over its last one when the stack is full). */
void sampler_caller_record_tagged(const struct sampler_caller *c, enum profile_kind kind,
				  const uint64_t *values, uintptr_t tag);
void sampler_caller_end(const struct sampler_caller *c);

/* Whether the calling thread is one of the profiler's own (own_thread_create started it:
 * common/own_thread.h); a signal there records nothing. */
bool sampler_thread_is_internal(void);

/* The calling thread's tid, cached (one syscall the first time). */
pid_t sampler_gettid(void);
/* The same by system call, leaving the thread's state (TLS) untouched: for the fork
 * child handler, which must not touch that page. */
pid_t sampler_gettid_uncached(void);

/* Fork child, forking thread (tid: its id, read by the caller): its state (cached
 * tid, samples, end account) is stale; it is reset at its next use, not here (no write
 * to its TLS page). */
void sampler_after_fork_child(pid_t tid);

/* Counters for diagnostics. */
uint64_t sampler_foreign_signals(void);

#endif
