/*
 * lock_hooks.h - the functions the application's lock calls reach while lock profiling
 * is on.
 *
 * Owns: one hook per blocking pthread lock entry point (pthread_mutex_lock,
 * pthread_mutex_timedlock, pthread_mutex_clocklock, pthread_rwlock_rdlock and wrlock
 * and their timed and clock variants), one per condition wait (pthread_cond_wait,
 * timedwait, clockwait) and per wake-up (pthread_cond_signal, broadcast), the process's
 * original functions they call, and what they record. Like the allocation hooks
 * (agent/alloc/alloc_hooks.h) they are reached through the modules' GOT slots
 * (agent/alloc/got_patch.h, a table of their own), never through exported symbols: with
 * lock profiling off no lock call passes through us.
 *
 * A lock hook first tries the lock (pthread_mutex_trylock, pthread_rwlock_tryrdlock,
 * ...): acquired, it returns (the uncontended cost: the try and the hook's call). Busy,
 * it reads CLOCK_MONOTONIC (the vDSO), calls the original blocking function and, if
 * that acquired the lock, counts the time waited against the thread's countdown
 * (agent/lock/lock_sample.h); a sampled wait is unwound from the hook's caller and
 * recorded as a lock sample (PROFILE_LOCK: lock-count, lock-time). The application sees
 * what the original returns: a try that fails otherwise than busy (a robust mutex whose
 * owner died: EOWNERDEAD, the lock acquired, returned as is; ENOTRECOVERABLE, EAGAIN,
 * EINVAL) is followed by the original call unless it acquired the lock; an
 * error-checking mutex the caller holds is busy to the try and EDEADLK to the original,
 * which is returned, nothing counted. A timed lock that times out counts nothing: lock-
 * count counts acquisitions, lock-time the waits that ended in one.
 *
 * Condition variables: pthread_cond_wait releases the mutex, waits, and takes the mutex
 * again inside libc, where no hook reaches. The time counted is that reacquisition,
 * measured from the wake-up to the return: each pthread_cond_signal or broadcast
 * through a hook stamps the time in a small table indexed by the condition variable's
 * address; a waiter that returns reads the stamp, and a stamp between its call and its
 * return is its wake-up. A signal stamps only an empty entry, or one older than the
 * latest waiter's call, and the waiter it woke empties it, so with one waiter at a time
 * (producer and consumer) the stamp is the first signal since it began to wait: the one
 * that woke it; a broadcast always stamps, and every waiter it woke reads it.
 * Approximations: with several waiters woken by successive signals a waiter may read
 * another's stamp (an earlier one: its wait counts from then) or none (nothing
 * counted); two condition variables sharing an entry mix their stamps; a wake-up by a
 * signal that passed no hook (a library patched late, a process-shared condition
 * variable signalled from another process), a timeout or a spurious wake-up counts
 * nothing. Known limit (as for every GOT hook): the 2.2.5 versions of the condition
 * functions (programs linked before glibc 2.3.2) are replaced by the default ones.
 *
 * The profiler's own threads (libcurl's and libdw's locks on them) pass through the
 * hooks but record nothing (own_thread_is_self).
 * Context: the hooks are async-signal-safe in what they add (no lock of ours, no
 * allocation, no stdio): they run wherever the application locks, in threads the agent
 * did not create and in fork children. The other functions run in normal context.
 */
#ifndef DDPROF_AGENT_LOCK_LOCK_HOOKS_H
#define DDPROF_AGENT_LOCK_LOCK_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

/* Start-up, after sampling is enabled: points every loaded module's slots for the lock
 * entry points at the hooks. record_locks: the lock profile records contended waits;
 * without it the hooks serve only the wall profile (agent/wall/wall_clock.h: mutex and
 * condition waits). 0 or a negative errno (nothing is hooked). */
int lock_hooks_install(bool record_locks);
bool lock_hooks_installed(void);

/* The application called dlopen (before the load) or dlclose (after): the host's
 * service rescans the modules for a while. Any thread, normal context. */
void lock_hooks_notify(void);
/* Whether a notify is waiting or the profiler loaded a library (the host's poll). */
bool lock_hooks_rescan_wanted(void);
/* The host thread: patches the modules loaded since the last rescan; returns when it is
 * next due (CLOCK_MONOTONIC; UINT64_MAX when nothing is installed). */
uint64_t lock_hooks_service(uint64_t now_ns);

/* Counters for diagnostics (relaxed loads, any thread). */
struct lock_hooks_stats {
	uint64_t contended;  /* acquisitions that found the lock busy (all, sampled or not) */
	uint64_t samples;    /* sampled waits recorded */
	uint64_t cond_waits; /* condition waits whose reacquisition was measured */
};
void lock_hooks_get_stats(struct lock_hooks_stats *out);

/* Fork child: the forking thread's countdown reseeds. */
void lock_hooks_after_fork_child(void);

#endif
