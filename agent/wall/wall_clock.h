/*
 * wall_clock.h - the wall-clock profile's accounting: every thread's wall time, split
 * into the calls it waited in and the rest.
 *
 * Owns: each thread's wall account (initial-exec TLS), the process's interval and
 * switch, and the states a wall sample is labelled with. No signal is ever sent for
 * the wall profile, so a waiting thread is never interrupted (no EINTR):
 *  - waits: the hooks on blocking calls (agent/wall/wall_hooks.h, and the lock hooks for
 *    mutex and condition waits) time each call with two vDSO clock reads and add it to
 *    the thread's pending wait time. When the waits since the last wall sample cross
 *    the thread's next sample point (an exponential gap of mean the interval, as the
 *    other profiles draw theirs), the hook unwinds its caller and records one sample
 *    that carries the whole pending time, labelled with the call it returns from. So a
 *    thread's waits are charged in full (but for what is pending), and a wait holds a
 *    sample point with probability growing with its length: with exponential gaps,
 *    which have no memory, the pending time goes to the stack of a later wait of the
 *    same thread, close in expectation to where it was spent.
 *  - the rest ("running": on a CPU, runnable, or blocked where no hook sees it: page
 *    faults, calls libc makes internally, raw system calls): charged at each CPU sample
 *    of the thread (the sampling signal, which fires only in threads that run) to the
 *    sampled stack, the wall time since the last such charge minus the waits since.
 * A thread that waits costs nothing while it waits, however many there are; a sample
 * costs an unwind, at most one per interval of waiting per thread, and at most
 * WALL_CLOCK_BUDGET_THREADS per interval in the process: past that, waits stay pending
 * and are charged, in full, at a later sample of their thread.
 * Context: async-signal-safe (the hooks run wherever the application blocks, in threads
 * the agent did not create and in its signal handlers; the CPU charge in the sampling
 * handler) but wall_clock_configure (start-up).
 */
#ifndef DDPROF_AGENT_WALL_WALL_CLOCK_H
#define DDPROF_AGENT_WALL_WALL_CLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/alloc/alloc_sample.h"
#include "agent/unwind/unwind.h"
#include "common/own_thread.h"

/* The default interval: a wall sample per 10 ms of waiting per thread. */
#define WALL_CLOCK_DEFAULT_INTERVAL_NS (10ULL * 1000 * 1000)
/* The process's wait samples per interval, at most: as many as this many threads that
 * always wait would take (wall_clock.c: the budget). */
#define WALL_CLOCK_BUDGET_THREADS 4

/* What a thread did during the wall time of a sample: the call it waited in, or
 * WALL_RUNNING. The name is the sample's "state" label. */
enum wall_state {
	WALL_RUNNING,
	WALL_READ,
	WALL_READV,
	WALL_RECV,
	WALL_RECVFROM,
	WALL_RECVMSG,
	WALL_WRITE,
	WALL_WRITEV,
	WALL_SEND,
	WALL_SENDTO,
	WALL_SENDMSG,
	WALL_ACCEPT,
	WALL_ACCEPT4,
	WALL_CONNECT,
	WALL_POLL,
	WALL_PPOLL,
	WALL_SELECT,
	WALL_PSELECT,
	WALL_EPOLL_WAIT,
	WALL_EPOLL_PWAIT,
	WALL_NANOSLEEP,
	WALL_CLOCK_NANOSLEEP,
	WALL_USLEEP,
	WALL_SLEEP,
	WALL_WAITPID,
	WALL_WAIT,
	WALL_SEM_WAIT,
	WALL_SEM_TIMEDWAIT,
	WALL_SEM_CLOCKWAIT,
	WALL_PTHREAD_JOIN,
	WALL_MUTEX_LOCK,
	WALL_RWLOCK_RDLOCK,
	WALL_RWLOCK_WRLOCK,
	WALL_COND_WAIT,
	WALL_COND_TIMEDWAIT,
	WALL_STATES
};

/* "running", "read", "pthread_cond_wait"... */
extern const char *const wall_state_names[WALL_STATES];

/* A wall sample's stack ends (outermost) in the synthetic pc of its state, which the
 * encoder turns into the "state" label (and, for a wait, a leaf frame named for the
 * call). In the synthetic range of agent/unwind/unwind.h. */
#define PC_WALL_STATE_BASE ((uintptr_t)0x100)
_Static_assert(PC_WALL_STATE_BASE + WALL_STATES <= PC_SYNTHETIC_MAX,
	       "wall states are synthetic pcs");

static inline bool wall_clock_is_state_pc(uintptr_t pc)
{
	return pc >= PC_WALL_STATE_BASE && pc < PC_WALL_STATE_BASE + WALL_STATES;
}

/* async-signal-safe. Appends s's pc to the stack of n pcs in a buffer of
 * UNWIND_MAX_DEPTH (over its last pc when full); returns the new length. */
static inline uint32_t wall_clock_tag(uintptr_t *pcs, uint32_t n, enum wall_state s)
{
	if (n >= UNWIND_MAX_DEPTH)
		n = UNWIND_MAX_DEPTH - 1;
	pcs[n] = PC_WALL_STATE_BASE + (uintptr_t)s;
	return n + 1;
}

#define WALL_BUSY_RESETTING ((uintptr_t)1)
/* A busy frame and a later frame (or sampled sp) above it are taken to be on the same
 * stack, the busy hook then gone, when this close: an alternate signal stack or a
 * coroutine's is most often farther. */
#define WALL_SAME_STACK_SPAN ((uintptr_t)8 << 20)

/* A thread's account. */
struct wall_account {
	/* The fork generation it was reset in, plus one. Relaxed atomics, as registered:
	 * written by the thread, read by the host (wall_clock_is_current). */
	_Atomic uint32_t gen;
	/* The frame (__builtin_frame_address) of the hook measuring or charging a wait,
	 * WALL_BUSY_RESETTING during a reset, 0: none. While set, the CPU charge waits and
	 * a hook in an application's signal handler (inside the wait) goes untimed; a hook
	 * outside any handler, or a CPU sample above that frame, finds it abandoned. */
	uintptr_t busy;
	uint64_t run_mark; /* CLOCK_MONOTONIC ns: wall charged up to here ("running") */
	uint64_t waited;   /* ns waited since run_mark (charged or pending) */
	/* ns waited, not charged yet: added by the thread, taken by whoever charges (the
	 * thread's sample, or the host with an open wait: wall_threads.h). Relaxed: a
	 * value on its own (each nanosecond is taken once by the exchange). */
	_Atomic uint64_t pending;
	struct alloc_sample_state draw; /* until: ns of waiting before the next sample */
	/* The wait in progress, for the host thread's charge at a snapshot
	 * (agent/wall/wall_threads.h), kept only while the account is registered there.
	 * open_since: CLOCK_MONOTONIC ns from which the wait is not charged yet (its start,
	 * or the host's last charge); 0 when no wait is open. Exchanged by the thread as
	 * the wait ends and advanced by the host's CAS: each nanosecond is charged by one
	 * of them. The caller's registers and the state are published with it. */
	_Atomic uint64_t open_since;
	_Atomic uintptr_t wait_pc, wait_sp, wait_fp;
	_Atomic uint32_t wait_state;
	_Atomic bool registered; /* in the host's registry (wall_threads_begin) */
	int32_t tid;		 /* the thread's, for the host's samples */
	uintptr_t stack_hi;	 /* its stack's top: the host's unwind stays below it */
};
extern __thread struct wall_account wall_clock_tls __attribute__((tls_model("initial-exec")));

/* Start-up, before any hook runs: on or off, and the interval (0 or absurd: the
 * default). */
void wall_clock_configure(bool on, uint64_t interval_ns);
uint64_t wall_clock_interval(void);

extern _Atomic bool wall_clock_enabled;
static inline bool wall_clock_on(void)
{
	return atomic_load_explicit(&wall_clock_enabled, memory_order_relaxed);
}

/* async-signal-safe. Drops the wait of a hook that left without ending it (a signal
 * handler's siglongjmp out of a blocking call): the account restarts at now_ns. */
void wall_clock_abandon(struct wall_account *a, uint64_t now_ns);

/* async-signal-safe. The calling thread's account, reset (its wall counted from now)
 * when it is new to this process (a thread's first hook, a fork child's thread); NULL
 * inside a signal handler that interrupted that reset. */
struct wall_account *wall_clock_account(uint64_t now_ns);

/* async-signal-safe. A hook begins a wait at t0 in state, its caller's registers in
 * regs, its frame address in frame: the calling thread's account, marked busy, to end the wait with
 * (WALL_WAIT_END, agent/wall/wall_hooks.h); NULL when the wall profile is off, on the profiler's
 * own threads, and when a hook of this thread is already measuring (a signal handler of the
 * application that blocks inside a wait: the outer wait counts its time). */
static inline struct wall_account *wall_clock_wait_begin(uint64_t t0, enum wall_state state,
							 const struct unwind_regs *regs,
							 uintptr_t frame, bool (*in_handler)(void))
{
	if (!wall_clock_on() || own_thread_is_self())
		return NULL;
	struct wall_account *a = wall_clock_account(t0);
	if (!a)
		return NULL;
	if (a->busy) {
		/* In one of the application's signal handlers (it interrupted the busy
		 * hook's wait): nested, untimed. Outside any: the busy hook was left without
		 * an end (its handler jumped out). in_handler: app_signals_in_handler, given
		 * by the hooks (agent/wall/wall_hooks.h). */
		if (a->busy == WALL_BUSY_RESETTING || in_handler())
			return NULL;
		wall_clock_abandon(a, t0);
	}
	a->busy = frame;
	/* Pairs with the sampling handler's read of busy (wall_clock_running), on this
	 * thread: the wait's time is never also charged as running. */
	atomic_signal_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&a->registered, memory_order_relaxed)) {
		atomic_store_explicit(&a->wait_pc, regs->pc, memory_order_relaxed);
		atomic_store_explicit(&a->wait_sp, regs->sp, memory_order_relaxed);
		atomic_store_explicit(&a->wait_fp, regs->fp, memory_order_relaxed);
		atomic_store_explicit(&a->wait_state, (uint32_t)state, memory_order_relaxed);
		/* Release pairs with the host's acquire load of open_since: the registers
		 * and state above are this wait's. */
		atomic_store_explicit(&a->open_since, t0 ? t0 : 1, memory_order_release);
	}
	return a;
}

/* async-signal-safe. A hook's wait ends: the start of what is left to charge (t0, or
 * later when the host charged its beginning at a snapshot). */
static inline uint64_t wall_clock_wait_close(struct wall_account *a, uint64_t t0)
{
	if (!atomic_load_explicit(&a->registered, memory_order_relaxed))
		return t0;
	/* Acq_rel pairs with the host's CAS: what it charged is before the value read. */
	uint64_t c = atomic_exchange_explicit(&a->open_since, 0, memory_order_acq_rel);
	return c > t0 ? c : t0;
}

/* async-signal-safe. A hook: a wait of the calling thread from t0 to t1 ended (the
 * account was marked busy by the hook), its part from `from` on not charged yet
 * (wall_clock_wait_close). Returns the ns to charge to the hook's caller now (the
 * pending waits, this one included), or 0 when no sample point fell in it. */
uint64_t wall_clock_waited(struct wall_account *a, uint64_t t0, uint64_t from, uint64_t t1);

/* async-signal-safe. The sampling handler, in a thread that runs (sp: the interrupted
 * stack pointer, sp_on_stack: whether it is on the thread's own stack): the wall time to
 * charge as running to the stack it sampled (0: nothing, e.g. a hook is busy). */
uint64_t wall_clock_running(uint64_t now_ns, uintptr_t sp, bool sp_on_stack);

/* Whether a's thread (another thread's account: the host's registry) belongs to this
 * process's generation and is registered: a fork child's copies of its parent's other
 * threads' accounts are not. */
bool wall_clock_is_current(const struct wall_account *a);

/* Fork child: every thread's account is its parent's; each resets at its next use. */
void wall_clock_after_fork_child(void);

/* Counters for diagnostics (relaxed). */
struct wall_clock_stats {
	uint64_t wait_samples;	   /* samples of waits recorded */
	uint64_t running_samples;  /* samples of running time recorded */
	uint64_t deferred_samples; /* wait samples refused by the budget (left pending) */
	uint64_t abandoned_waits;  /* waits left without an end (siglongjmp) */
};
void wall_clock_get_stats(struct wall_clock_stats *out);
void wall_clock_count_sample(bool wait);

#endif
