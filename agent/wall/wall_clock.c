/*
 * wall_clock.c - the wall-clock profile's per-thread accounting (see wall_clock.h).
 *
 * This file is async-signal-safe (every function but wall_clock_configure, which runs
 * at start-up): no lock, no allocation, no system call (the clock is the vDSO's).
 */
#include "agent/wall/wall_clock.h"

#include <sys/random.h>
#include <time.h>
#include <x86intrin.h>

#include "common/clock.h"
#include "common/fork_child.h"

__thread struct wall_account wall_clock_tls __attribute__((tls_model("initial-exec")));

/* Relaxed everywhere: set at start-up before any hook runs, then only read. */
_Atomic bool wall_clock_enabled;
static _Atomic uint64_t mean_interval = WALL_CLOCK_DEFAULT_INTERVAL_NS;
static _Atomic uint64_t seed_base;
static _Atomic uint64_t seed_counter;
/* The process's generation of accounts: a thread whose account holds another one (zero
 * TLS: a new thread; a fork child's threads: their parent's) resets it at its next
 * use. Accounts hold it plus one, so that a zero account is never current (fork-child
 * data is zero-initialized). Relaxed: written by the fork child's handler while it is
 * the only thread. */
FORK_CHILD_DATA static _Atomic uint32_t account_gen;
static _Atomic uint64_t wait_samples, running_samples, deferred_samples, abandoned_waits;

/* The budget of wait samples: a token bucket refilled with WALL_CLOCK_BUDGET_THREADS
 * threads' worth of samples per interval (each an unwind, several microseconds with cold
 * caches), holding at most BUDGET_BURST_SLOTS slots' worth, so that waits that end
 * together (threads woken at once) are sampled over a while, not only the first few.
 * A wait whose sample is refused stays pending and goes to a later sample of its thread:
 * a thread's waits are still charged in full, and a process whose 1000 threads wait
 * costs about what one with a few costs. The word: the slot of the last refill (high 32
 * bits) and the tokens left. */
#define BUDGET_SLOT_NS (10ULL * 1000 * 1000)
#define BUDGET_BURST_SLOTS 10
static _Atomic uint64_t budget;

/* Below 100 us a sample would be taken at nearly every wait; above a minute a thread
 * would rarely have one. */
#define INTERVAL_MIN_NS (100ULL * 1000)
#define INTERVAL_MAX_NS (60ULL * 1000 * 1000 * 1000)

const char *const wall_state_names[WALL_STATES] = {
    [WALL_RUNNING] = "running",
    [WALL_READ] = "read",
    [WALL_READV] = "readv",
    [WALL_RECV] = "recv",
    [WALL_RECVFROM] = "recvfrom",
    [WALL_RECVMSG] = "recvmsg",
    [WALL_WRITE] = "write",
    [WALL_WRITEV] = "writev",
    [WALL_SEND] = "send",
    [WALL_SENDTO] = "sendto",
    [WALL_SENDMSG] = "sendmsg",
    [WALL_ACCEPT] = "accept",
    [WALL_ACCEPT4] = "accept4",
    [WALL_CONNECT] = "connect",
    [WALL_POLL] = "poll",
    [WALL_PPOLL] = "ppoll",
    [WALL_SELECT] = "select",
    [WALL_PSELECT] = "pselect",
    [WALL_EPOLL_WAIT] = "epoll_wait",
    [WALL_EPOLL_PWAIT] = "epoll_pwait",
    [WALL_NANOSLEEP] = "nanosleep",
    [WALL_CLOCK_NANOSLEEP] = "clock_nanosleep",
    [WALL_USLEEP] = "usleep",
    [WALL_SLEEP] = "sleep",
    [WALL_WAITPID] = "waitpid",
    [WALL_WAIT] = "wait",
    [WALL_SEM_WAIT] = "sem_wait",
    [WALL_SEM_TIMEDWAIT] = "sem_timedwait",
    [WALL_SEM_CLOCKWAIT] = "sem_clockwait",
    [WALL_PTHREAD_JOIN] = "pthread_join",
    [WALL_MUTEX_LOCK] = "pthread_mutex_lock",
    [WALL_RWLOCK_RDLOCK] = "pthread_rwlock_rdlock",
    [WALL_RWLOCK_WRLOCK] = "pthread_rwlock_wrlock",
    [WALL_COND_WAIT] = "pthread_cond_wait",
    [WALL_COND_TIMEDWAIT] = "pthread_cond_timedwait",
};

void wall_clock_configure(bool on, uint64_t interval_ns)
{
	if (interval_ns < INTERVAL_MIN_NS || interval_ns > INTERVAL_MAX_NS)
		interval_ns = WALL_CLOCK_DEFAULT_INTERVAL_NS;
	atomic_store_explicit(&mean_interval, interval_ns, memory_order_relaxed);
	uint64_t seed = 0;
	/* Start-up, normal context: the threads' seeds derive from it without a system
	 * call of their own. */
	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
		seed = __rdtsc();
	atomic_store_explicit(&seed_base, seed, memory_order_relaxed);
	atomic_store_explicit(&budget, 0, memory_order_relaxed); /* full at the first take */
	atomic_store_explicit(&wall_clock_enabled, on, memory_order_relaxed);
}

uint64_t wall_clock_interval(void)
{
	return atomic_load_explicit(&mean_interval, memory_order_relaxed);
}

/* async-signal-safe */
struct wall_account *wall_clock_account(uint64_t now_ns)
{
	struct wall_account *a = &wall_clock_tls;
	uint32_t g = atomic_load_explicit(&account_gen, memory_order_relaxed) + 1;
	if (__builtin_expect(atomic_load_explicit(&a->gen, memory_order_relaxed) != g, 0)) {
		/* A signal handler of the application that blocks while this thread resets
		 * its account: the outer reset finishes it; this wait goes untimed. */
		if (a->busy == WALL_BUSY_RESETTING)
			return NULL;
		a->busy = WALL_BUSY_RESETTING;
		/* Pairs with the check above, in a handler that interrupts this thread. */
		atomic_signal_fence(memory_order_seq_cst);
		uint64_t n = atomic_fetch_add_explicit(&seed_counter, 1, memory_order_relaxed);
		/* A fork child's copy: not in its registry. */
		atomic_store_explicit(&a->registered, false, memory_order_relaxed);
		atomic_store_explicit(&a->open_since, 0, memory_order_relaxed);
		a->run_mark = now_ns;
		a->waited = 0;
		atomic_store_explicit(&a->pending, 0, memory_order_relaxed);
		alloc_sample_seed(&a->draw, atomic_load_explicit(&seed_base, memory_order_relaxed) ^
						(n * 0x9E3779B97F4A7C15ULL) ^ __rdtsc() ^
						(uint64_t)(uintptr_t)a);
		a->draw.until = alloc_sample_draw(
		    &a->draw, atomic_load_explicit(&mean_interval, memory_order_relaxed));
		atomic_store_explicit(&a->gen, g, memory_order_relaxed);
		/* Pairs with the checks of busy in a handler that interrupts this thread:
		 * the account is whole before it is free. */
		atomic_signal_fence(memory_order_seq_cst);
		a->busy = 0;
	}
	return a;
}

/* async-signal-safe. The hook that marked a busy left without ending its wait (a
 * signal handler's siglongjmp out of a blocking call): its wait is dropped, the
 * account restarts at now_ns (the time since its last charge is of unknown state). */
void wall_clock_abandon(struct wall_account *a, uint64_t now_ns)
{
	atomic_store_explicit(&a->open_since, 0, memory_order_relaxed);
	a->run_mark = now_ns;
	a->waited = 0;
	atomic_fetch_add_explicit(&abandoned_waits, 1, memory_order_relaxed);
	/* Pairs with the checks of busy in a handler that interrupts this thread. */
	atomic_signal_fence(memory_order_seq_cst);
	a->busy = 0;
}

/* async-signal-safe, lock-free. Takes one wait sample from the budget at now_ns. */
static bool budget_take(uint64_t now_ns)
{
	uint64_t mean = atomic_load_explicit(&mean_interval, memory_order_relaxed);
	uint64_t per_slot = WALL_CLOCK_BUDGET_THREADS * BUDGET_SLOT_NS / mean;
	if (per_slot == 0)
		per_slot = 1;
	uint64_t cap = per_slot * BUDGET_BURST_SLOTS;
	uint32_t slot = (uint32_t)(now_ns / BUDGET_SLOT_NS);
	uint64_t v = atomic_load_explicit(&budget, memory_order_relaxed), next;
	do {
		uint32_t last = (uint32_t)(v >> 32), at = slot;
		uint64_t tokens = v & 0xffffffffULL;
		/* Signed: a thread that read its clock before another's refill (preempted
		 * in between) is in that slot, not 2^32 slots later. */
		int32_t elapsed = (int32_t)(slot - last);
		if (elapsed < 0) {
			elapsed = 0;
			at = last;
		}
		if (v == 0 || elapsed >= BUDGET_BURST_SLOTS)
			tokens = cap; /* the first sample, or the bucket refilled */
		else
			tokens += (uint64_t)elapsed * per_slot;
		if (tokens > cap)
			tokens = cap;
		if (tokens == 0)
			return false;
		next = (uint64_t)at << 32 | (tokens - 1);
		/* Relaxed: a count, ordering nothing else. A failed CAS means another
		 * thread took a sample: retry with what it left. */
	} while (!atomic_compare_exchange_weak_explicit(&budget, &v, next, memory_order_relaxed,
							memory_order_relaxed));
	return true;
}

/* async-signal-safe */
uint64_t wall_clock_waited(struct wall_account *a, uint64_t t0, uint64_t from, uint64_t t1)
{
	uint64_t d = t1 > from ? t1 - from : 0;
	a->waited += t1 > t0 ? t1 - t0 : 0;
	if (d)
		atomic_fetch_add_explicit(&a->pending, d, memory_order_relaxed);
	a->draw.until -= d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
	if (a->draw.until > 0)
		return 0;
	uint64_t mean = atomic_load_explicit(&mean_interval, memory_order_relaxed);
	/* The next point: past this wait, however many points it held (its time is
	 * charged once, in full). */
	a->draw.until = alloc_sample_draw(&a->draw, mean);
	if (!budget_take(t1)) {
		atomic_fetch_add_explicit(&deferred_samples, 1, memory_order_relaxed);
		return 0; /* pending until a later point of this thread */
	}
	return atomic_exchange_explicit(&a->pending, 0, memory_order_relaxed);
}

/* async-signal-safe */
uint64_t wall_clock_running(uint64_t now_ns, uintptr_t sp, bool sp_on_stack)
{
	struct wall_account *a = wall_clock_account(now_ns);
	if (!a)
		return 0;
	if (a->busy) {
		/* The interrupted code above the busy hook's frame, on the same stack: that
		 * hook is gone (siglongjmp). Else a hook's wait or charge: its time. */
		if (!sp_on_stack || a->busy == WALL_BUSY_RESETTING || sp <= a->busy ||
		    sp - a->busy > WALL_SAME_STACK_SPAN)
			return 0;
		wall_clock_abandon(a, now_ns);
		return 0;
	}
	uint64_t elapsed = now_ns > a->run_mark ? now_ns - a->run_mark : 0;
	uint64_t run = elapsed > a->waited ? elapsed - a->waited : 0;
	a->run_mark = now_ns;
	a->waited = 0;
	return run;
}

bool wall_clock_is_current(const struct wall_account *a)
{
	return atomic_load_explicit(&a->gen, memory_order_relaxed) ==
		   atomic_load_explicit(&account_gen, memory_order_relaxed) + 1 &&
	       atomic_load_explicit(&a->registered, memory_order_relaxed);
}

FORK_CHILD_PATH void wall_clock_after_fork_child(void)
{
	atomic_store_explicit(&account_gen,
			      atomic_load_explicit(&account_gen, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

void wall_clock_count_sample(bool wait)
{
	atomic_fetch_add_explicit(wait ? &wait_samples : &running_samples, 1, memory_order_relaxed);
}

void wall_clock_get_stats(struct wall_clock_stats *out)
{
	out->wait_samples = atomic_load_explicit(&wait_samples, memory_order_relaxed);
	out->running_samples = atomic_load_explicit(&running_samples, memory_order_relaxed);
	out->deferred_samples = atomic_load_explicit(&deferred_samples, memory_order_relaxed);
	out->abandoned_waits = atomic_load_explicit(&abandoned_waits, memory_order_relaxed);
}
