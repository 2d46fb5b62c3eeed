/*
 * lock_hooks.c - the lock hooks (see lock_hooks.h).
 *
 * The hooks in this file are async-signal-safe in what they add to the call: each calls
 * the function the application called (orig.*, or the try variant first), in the
 * context the application called it from, then only lock-free, allocation-free code of
 * ours (clock_gettime through the vDSO, the thread's countdown, sampler_caller_*). They
 * run on any thread, before or after the agent knows it, and in fork children (the
 * countdown is initial-exec TLS; the stamp table and counters are plain atomics).
 * Install, notify and the service run in normal context. Every hook is a function of
 * its own with a frame pointer (the library is built with -fno-omit-frame-pointer), so
 * that CALLER_REGS reads its caller's state exactly, as in alloc_hooks.c.
 */
#include "agent/lock/lock_hooks.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "agent/alloc/hook_set.h"
#include "agent/lock/lock_sample.h"
#include "agent/wall/wall_hooks.h"
#include "agent/sample/sampler.h"
#include "agent/unwind/unwind.h"
#include "common/clock.h"
#include "common/fork_child.h"
#include "common/own_thread.h"

/* The process's lock functions: what the hooks call. An entry point libc lacks (the
 * clock variants before glibc 2.30) stays NULL and its slots unpatched (got_patch.h),
 * so its hook is never reached. */
static struct {
	int (*mutex_lock)(pthread_mutex_t *);
	int (*mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
	int (*mutex_clocklock)(pthread_mutex_t *, clockid_t, const struct timespec *);
	int (*rwlock_rdlock)(pthread_rwlock_t *);
	int (*rwlock_wrlock)(pthread_rwlock_t *);
	int (*rwlock_timedrdlock)(pthread_rwlock_t *, const struct timespec *);
	int (*rwlock_timedwrlock)(pthread_rwlock_t *, const struct timespec *);
	int (*rwlock_clockrdlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
	int (*rwlock_clockwrlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
	int (*cond_wait)(pthread_cond_t *, pthread_mutex_t *);
	int (*cond_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
	int (*cond_clockwait)(pthread_cond_t *, pthread_mutex_t *, clockid_t,
			      const struct timespec *);
	int (*cond_signal)(pthread_cond_t *);
	int (*cond_broadcast)(pthread_cond_t *);
} orig;

/* Relaxed: counters for diagnostics, ordering nothing. */
static _Atomic uint64_t contended, samples_recorded, cond_measured;
/* Lock waits recorded (the lock profile), or only the waits the wall profile counts.
 * Relaxed: set at start-up before any hook runs. */
static _Atomic bool record_lock_waits;

/* async-signal-safe */
static inline uint64_t now_ns(void)
{
	return clock_now_ns(CLOCK_MONOTONIC);
}

/* async-signal-safe. A sampled wait: unwound from the hook's caller and recorded. */
static __attribute__((noinline)) void sampled(const struct lock_sample_weights *w,
					      const struct unwind_regs *caller)
{
	struct sampler_caller c;
	if (!sampler_caller_begin(caller, &c))
		return;
	const uint64_t values[2] = {w->count, w->wait_ns};
	sampler_caller_record(&c, PROFILE_LOCK, values);
	sampler_caller_end(&c);
	atomic_fetch_add_explicit(&samples_recorded, 1, memory_order_relaxed);
}

/* async-signal-safe. Counts a wait of wait_ns that ended in an acquisition, and records
 * it when sampled; the profiler's own threads count nothing. caller: the hook's
 * HOOK_CALLER_REGS (ACCOUNT reads them, in the hook's own frame, only when sampled). */
#define ACCOUNT_AT(wait_ns, caller)                                                                \
	do {                                                                                       \
		if (atomic_load_explicit(&record_lock_waits, memory_order_relaxed) &&              \
		    !own_thread_is_self()) {                                                       \
			struct lock_sample_weights w_;                                             \
			atomic_fetch_add_explicit(&contended, 1, memory_order_relaxed);            \
			if (__builtin_expect(lock_sample_wait((wait_ns), &w_), 0))                 \
				sampled(&w_, (caller));                                            \
		}                                                                                  \
	} while (0)
#define ACCOUNT(wait_ns) ACCOUNT_AT((wait_ns), &HOOK_CALLER_REGS())

/* async-signal-safe. The lock hooks: try, and only when busy time the blocking call
 * (lock_hooks.h says what is returned). The uncontended path is the hook alone, a try
 * and a return; everything else is in a function of its own (slow_*, below) that gets
 * the hook's caller registers, so that the hook saves no register it does not use on
 * that path. */
#define LOCK_HOOK(try_call, slow_call)                                                             \
	do {                                                                                       \
		int rc_ = (try_call);                                                              \
		if (__builtin_expect(rc_ == 0, 1))                                                 \
			return 0;                                                                  \
		const struct unwind_regs caller_ = HOOK_CALLER_REGS();                             \
		return (slow_call);                                                                \
	} while (0)

/* async-signal-safe. The body of a slow_* function: rc, what the try returned; caller,
 * the hook's caller registers. EOWNERDEAD from the try: the lock is the caller's (a
 * robust mutex whose owner died), returned as the blocking call would have. Another
 * error than EBUSY: the blocking call decides, untimed. */
#define LOCK_SLOW(rc, blocking_call, state, caller)                                                \
	do {                                                                                       \
		if ((rc) != EBUSY)                                                                 \
			return (rc) == EOWNERDEAD ? (rc) : (blocking_call);                        \
		uint64_t t0_ = now_ns();                                                           \
		struct wall_account *wa_ = WALL_WAIT_BEGIN_AT(t0_, (state), (caller));             \
		int rc_ = (blocking_call);                                                         \
		uint64_t f_ = WALL_WAIT_CLOSE(wa_, t0_);                                           \
		uint64_t t1_ = now_ns();                                                           \
		if (rc_ == 0 || rc_ == EOWNERDEAD)                                                 \
			ACCOUNT_AT(t1_ - t0_, (caller));                                           \
		WALL_WAIT_END_AT(wa_, t0_, f_, t1_, (state), (caller));                            \
		return rc_;                                                                        \
	} while (0)

/*
 * Mutexes whose try is not a pure test go straight to libc, unprofiled: robust ones
 * (glibc 2.36's trylock of a robust mutex that is no longer recoverable leaves the lock
 * word holding the caller's id, so a blocking call after it would wait on itself where
 * alone the program gets ENOTRECOVERABLE), priority-inheritance and priority-protect
 * ones (their try is a system call, and the kernel arbitrates). glibc's kind bits
 * (nptl: PTHREAD_MUTEX_ROBUST_NORMAL_NP 16, PTHREAD_MUTEX_PRIO_INHERIT_NP 32,
 * PTHREAD_MUTEX_PRIO_PROTECT_NP 64) in the public structure's __kind, which glibc too
 * reads with a relaxed load.
 */
#define MUTEX_KINDS_PASSED (16 | 32 | 64)

/* async-signal-safe */
static inline bool mutex_passed(const pthread_mutex_t *m)
{
	return (__atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED) & MUTEX_KINDS_PASSED) != 0;
}

/* async-signal-safe. The arguments glibc refuses before it looks at the lock (EINVAL,
 * the lock left as it is): a clock other than CLOCK_REALTIME and CLOCK_MONOTONIC (the
 * clock variants), and for rwlocks a deadline whose nanoseconds are out of range. */
static inline bool clock_refused(clockid_t clk)
{
	return clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC;
}

static inline bool deadline_refused(const struct timespec *t)
{
	return t && (t->tv_nsec < 0 || t->tv_nsec >= 1000000000L);
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_mutex_lock(pthread_mutex_t *m, int rc,
						     const struct unwind_regs *caller)
{
	LOCK_SLOW(rc, orig.mutex_lock(m), WALL_MUTEX_LOCK, caller);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_mutex_lock(pthread_mutex_t *m)
{
	if (__builtin_expect(mutex_passed(m), 0))
		return orig.mutex_lock(m);
	LOCK_HOOK(pthread_mutex_trylock(m), slow_mutex_lock(m, rc_, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_mutex_timedlock(pthread_mutex_t *m,
							  const struct timespec *t, int rc,
							  const struct unwind_regs *caller)
{
	LOCK_SLOW(rc, orig.mutex_timedlock(m, t), WALL_MUTEX_LOCK, caller);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_mutex_timedlock(pthread_mutex_t *m,
							  const struct timespec *t)
{
	if (__builtin_expect(mutex_passed(m), 0))
		return orig.mutex_timedlock(m, t);
	LOCK_HOOK(pthread_mutex_trylock(m), slow_mutex_timedlock(m, t, rc_, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_mutex_clocklock(pthread_mutex_t *m, clockid_t clk,
							  const struct timespec *t, int rc,
							  const struct unwind_regs *caller)
{
	LOCK_SLOW(rc, orig.mutex_clocklock(m, clk, t), WALL_MUTEX_LOCK, caller);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_mutex_clocklock(pthread_mutex_t *m, clockid_t clk,
							  const struct timespec *t)
{
	if (clock_refused(clk))
		return EINVAL;
	if (__builtin_expect(mutex_passed(m), 0))
		return orig.mutex_clocklock(m, clk, t);
	LOCK_HOOK(pthread_mutex_trylock(m), slow_mutex_clocklock(m, clk, t, rc_, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_rwlock_rdlock(pthread_rwlock_t *l, int rc,
							const struct unwind_regs *caller)
{
	LOCK_SLOW(rc, orig.rwlock_rdlock(l), WALL_RWLOCK_RDLOCK, caller);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_rwlock_rdlock(pthread_rwlock_t *l)
{
	LOCK_HOOK(pthread_rwlock_tryrdlock(l), slow_rwlock_rdlock(l, rc_, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_rwlock_wrlock(pthread_rwlock_t *l, int rc,
							const struct unwind_regs *caller)
{
	LOCK_SLOW(rc, orig.rwlock_wrlock(l), WALL_RWLOCK_WRLOCK, caller);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_rwlock_wrlock(pthread_rwlock_t *l)
{
	LOCK_HOOK(pthread_rwlock_trywrlock(l), slow_rwlock_wrlock(l, rc_, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_rwlock_timedrdlock(pthread_rwlock_t *l,
							     const struct timespec *t, int rc,
							     const struct unwind_regs *caller)
{
	LOCK_SLOW(rc, orig.rwlock_timedrdlock(l, t), WALL_RWLOCK_RDLOCK, caller);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_rwlock_timedrdlock(pthread_rwlock_t *l,
							     const struct timespec *t)
{
	if (deadline_refused(t))
		return EINVAL;
	LOCK_HOOK(pthread_rwlock_tryrdlock(l), slow_rwlock_timedrdlock(l, t, rc_, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_rwlock_timedwrlock(pthread_rwlock_t *l,
							     const struct timespec *t, int rc,
							     const struct unwind_regs *caller)
{
	LOCK_SLOW(rc, orig.rwlock_timedwrlock(l, t), WALL_RWLOCK_WRLOCK, caller);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_rwlock_timedwrlock(pthread_rwlock_t *l,
							     const struct timespec *t)
{
	if (deadline_refused(t))
		return EINVAL;
	LOCK_HOOK(pthread_rwlock_trywrlock(l), slow_rwlock_timedwrlock(l, t, rc_, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t clk,
							     const struct timespec *t, int rc,
							     const struct unwind_regs *caller)
{
	LOCK_SLOW(rc, orig.rwlock_clockrdlock(l, clk, t), WALL_RWLOCK_RDLOCK, caller);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t clk,
							     const struct timespec *t)
{
	if (clock_refused(clk) || deadline_refused(t))
		return EINVAL;
	LOCK_HOOK(pthread_rwlock_tryrdlock(l), slow_rwlock_clockrdlock(l, clk, t, rc_, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t clk,
							     const struct timespec *t, int rc,
							     const struct unwind_regs *caller)
{
	LOCK_SLOW(rc, orig.rwlock_clockwrlock(l, clk, t), WALL_RWLOCK_WRLOCK, caller);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t clk,
							     const struct timespec *t)
{
	if (clock_refused(clk) || deadline_refused(t))
		return EINVAL;
	LOCK_HOOK(pthread_rwlock_trywrlock(l), slow_rwlock_clockwrlock(l, clk, t, rc_, &caller_));
}

/* ---------------------------------------------------------------- condition variables */

/* The wake-up stamps (lock_hooks.h): CLOCK_MONOTONIC ns, the low bit set by a broadcast,
 * 0 when empty. 1024 entries: a process rarely has more condition variables with
 * waiters at once; two that share an entry only mix their stamps. Relaxed: a stamp is a
 * value on its own, read by a waiter that has been woken (the futex wake and wait order
 * the signaller's stamp before the waiter's read in practice; a stamp seen late or not
 * at all only leaves a wait uncounted, never a wrong access). */
#define STAMPS 1024
static _Atomic uint64_t stamps[STAMPS];
/* Per entry: when the latest waiter began to wait. A signal's stamp older than that
 * woke none of the waiters now waiting: the next signal replaces it. */
static _Atomic uint64_t wait_starts[STAMPS];
#define STAMP_BROADCAST 1ULL

/* async-signal-safe. c's entry in both tables. */
static uint32_t entry_of(const pthread_cond_t *c)
{
	uint64_t h = (uint64_t)(uintptr_t)c * 0x9E3779B97F4A7C15ULL; /* multiply-shift */
	return (uint32_t)(h >> 54); /* the top 10 bits: 1024 entries */
}
_Static_assert(STAMPS == 1 << 10, "entry_of takes the hash's top 10 bits");

/* async-signal-safe. Stamps the wake-up of c: a broadcast always; a signal an empty
 * entry or one stamped before the latest waiter began (the first signal since a
 * waiter waits is the one that woke it, for one waiter at a time). */
static void stamp(const pthread_cond_t *c, bool broadcast)
{
	uint32_t i = entry_of(c);
	uint64_t t = now_ns();
	if (broadcast) {
		atomic_store_explicit(&stamps[i], t | STAMP_BROADCAST, memory_order_relaxed);
		return;
	}
	uint64_t cur = atomic_load_explicit(&stamps[i], memory_order_relaxed);
	uint64_t since = atomic_load_explicit(&wait_starts[i], memory_order_relaxed);
	if (cur == 0 || (cur & ~STAMP_BROADCAST) < since)
		atomic_compare_exchange_strong_explicit(&stamps[i], &cur, t & ~STAMP_BROADCAST,
							memory_order_relaxed, memory_order_relaxed);
}

/* async-signal-safe. A waiter begins (it holds the mutex: a signaller that holds it too
 * stamps after this). */
static void wait_begins(const pthread_cond_t *c, uint64_t t0)
{
	atomic_store_explicit(&wait_starts[entry_of(c)], t0, memory_order_relaxed);
}

/* async-signal-safe. A waiter that called at t0 and returned at t1 holding its mutex:
 * the reacquisition's length when a stamp falls between, else 0. A signal's stamp, or
 * one older than the call (left by a wake-up no waiter took), is emptied. */
static uint64_t reacquired(const pthread_cond_t *c, uint64_t t0, uint64_t t1)
{
	_Atomic uint64_t *e = &stamps[entry_of(c)];
	uint64_t v = atomic_load_explicit(e, memory_order_relaxed);
	if (v == 0)
		return 0;
	uint64_t at = v & ~STAMP_BROADCAST;
	if (!(v & STAMP_BROADCAST) || at < t0)
		atomic_compare_exchange_strong_explicit(e, &v, 0, memory_order_relaxed,
							memory_order_relaxed);
	return at > t0 && at <= t1 ? t1 - at : 0;
}

/* async-signal-safe. The body of the condition waits: the wait untouched, the
 * reacquisition after a stamped wake-up counted. A timeout counts nothing. */
#define COND_HOOK(c, wait_call, state)                                                             \
	do {                                                                                       \
		uint64_t t0_ = now_ns();                                                           \
		wait_begins((c), t0_);                                                             \
		struct wall_account *wa_ = WALL_WAIT_BEGIN(t0_, (state));                          \
		int rc_ = (wait_call);                                                             \
		uint64_t f_ = WALL_WAIT_CLOSE(wa_, t0_);                                           \
		uint64_t t1_ = now_ns();                                                           \
		if (rc_ == 0 || rc_ == EOWNERDEAD) {                                               \
			uint64_t d_ = reacquired((c), t0_, t1_);                                   \
			if (d_) {                                                                  \
				atomic_fetch_add_explicit(&cond_measured, 1,                       \
							  memory_order_relaxed);                   \
				ACCOUNT(d_);                                                       \
			}                                                                          \
		}                                                                                  \
		WALL_WAIT_END(wa_, t0_, f_, t1_, (state));                                         \
		return rc_;                                                                        \
	} while (0)

/* async-signal-safe */
static __attribute__((noinline)) int hook_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	COND_HOOK(c, orig.cond_wait(c, m), WALL_COND_WAIT);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
							 const struct timespec *t)
{
	COND_HOOK(c, orig.cond_timedwait(c, m, t), WALL_COND_TIMEDWAIT);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m,
							 clockid_t clk, const struct timespec *t)
{
	COND_HOOK(c, orig.cond_clockwait(c, m, clk, t), WALL_COND_TIMEDWAIT);
}

/* async-signal-safe. Stamped before the wake-up: the waiter it wakes reads it. */
static __attribute__((noinline)) int hook_cond_signal(pthread_cond_t *c)
{
	stamp(c, false);
	return orig.cond_signal(c);
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_cond_broadcast(pthread_cond_t *c)
{
	stamp(c, true);
	return orig.cond_broadcast(c);
}

/* ---------------------------------------------------------------- install, service */

/* The table got_patch applies (its own, beside the allocation hooks'). */
static struct got_patch_entry table[] = {
    {"pthread_mutex_lock", (void *)hook_mutex_lock, (void **)&orig.mutex_lock},
    {"pthread_mutex_timedlock", (void *)hook_mutex_timedlock, (void **)&orig.mutex_timedlock},
    {"pthread_mutex_clocklock", (void *)hook_mutex_clocklock, (void **)&orig.mutex_clocklock},
    {"pthread_rwlock_rdlock", (void *)hook_rwlock_rdlock, (void **)&orig.rwlock_rdlock},
    {"pthread_rwlock_wrlock", (void *)hook_rwlock_wrlock, (void **)&orig.rwlock_wrlock},
    {"pthread_rwlock_timedrdlock", (void *)hook_rwlock_timedrdlock,
     (void **)&orig.rwlock_timedrdlock},
    {"pthread_rwlock_timedwrlock", (void *)hook_rwlock_timedwrlock,
     (void **)&orig.rwlock_timedwrlock},
    {"pthread_rwlock_clockrdlock", (void *)hook_rwlock_clockrdlock,
     (void **)&orig.rwlock_clockrdlock},
    {"pthread_rwlock_clockwrlock", (void *)hook_rwlock_clockwrlock,
     (void **)&orig.rwlock_clockwrlock},
    {"pthread_cond_wait", (void *)hook_cond_wait, (void **)&orig.cond_wait},
    {"pthread_cond_timedwait", (void *)hook_cond_timedwait, (void **)&orig.cond_timedwait},
    {"pthread_cond_clockwait", (void *)hook_cond_clockwait, (void **)&orig.cond_clockwait},
    {"pthread_cond_signal", (void *)hook_cond_signal, (void **)&orig.cond_signal},
    {"pthread_cond_broadcast", (void *)hook_cond_broadcast, (void **)&orig.cond_broadcast},
};
#define TABLE_N (sizeof(table) / sizeof(table[0]))

/* Read by every fork child's handler (installed): on the page it touches anyway. */
FORK_CHILD_DATA static struct hook_set set;

int lock_hooks_install(bool record_locks)
{
	atomic_store_explicit(&record_lock_waits, record_locks, memory_order_relaxed);
	return hook_set_install(&set, table, TABLE_N);
}

FORK_CHILD_PATH bool lock_hooks_installed(void)
{
	return hook_set_installed(&set);
}

void lock_hooks_notify(void)
{
	hook_set_notify(&set);
}

bool lock_hooks_rescan_wanted(void)
{
	return hook_set_rescan_wanted(&set);
}

uint64_t lock_hooks_service(uint64_t now)
{
	return hook_set_service(&set, now);
}

void lock_hooks_get_stats(struct lock_hooks_stats *out)
{
	out->contended = atomic_load_explicit(&contended, memory_order_relaxed);
	out->samples = atomic_load_explicit(&samples_recorded, memory_order_relaxed);
	out->cond_waits = atomic_load_explicit(&cond_measured, memory_order_relaxed);
}

void lock_hooks_after_fork_child(void)
{
	lock_sample_after_fork_child();
}
