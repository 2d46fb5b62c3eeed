/*
 * sampler.c - profiling signal handler and per-thread state (see sampler.h).
 *
 * This file is async-signal-safe in sampler_handler and everything it calls: initial-exec
 * TLS, C11 atomics, the unwinder, profiles_record. Set-up functions (sampler_init,
 * sampler_thread_setup) run in normal context and say so.
 *
 * The handler's whole path: check the sender is one of our timers, read registers from
 * the ucontext, unwind within the thread's stack, weigh the sample by the timer's
 * overrun count (the kernel checks CPU timers at its tick rate, CONFIG_HZ: with a
 * 250 Hz tick a 1 kHz timer fires every 4 ms with si_overrun = 3), and record it.
 * Nothing else: the handler never runs foreign code on the interrupted thread.
 */
#include "agent/sample/sampler.h"
#include "agent/sample/fork_local.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "agent/sample/app_signals.h"
#include "agent/sample/sandbox.h"
#include "agent/unwind/stack_bounds.h"
#include "agent/unwind/stack_ranges.h"
#include "agent/wall/wall_clock.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/own_thread.h"
#include "common/raw_syscall.h"

struct thread_state {
	uint32_t gen;	      /* fork_gen when last valid: see tls_current */
	pid_t tid;	      /* 0 = not cached yet */
	bool sampled;	      /* a sample was recorded in this thread */
	bool exact;	      /* armed its own timer: its end is accounted (sampler_thread_end) */
	bool ended;	      /* its end was accounted: a late signal records nothing */
	bool first_seen;      /* exact: its timer's first expiry came */
	uint32_t last_n;      /* frames of its last sample, still in pcs */
	uint64_t recorded_ns; /* weights recorded for this thread (exact: its CPU up to then) */
	uint64_t armed_ns;    /* CLOCK_MONOTONIC when it registered for its timer */
	uintptr_t stack_lo;   /* 0 = unknown */
	uintptr_t stack_hi;   /* 0 = unknown */
	/* The handler's pc buffer lives here, not on the interrupted stack: 2 KiB more on
	 * a small fiber stack near its limit would hit the guard page. The handler cannot
	 * nest (every signal is blocked while it runs), so one buffer per thread is
	 * enough. Last: the fields above, which a fork child writes, stay on one page
	 * (each page the child writes is a copy-on-write fault on its exit path). */
	uintptr_t pcs[UNWIND_MAX_DEPTH];
};

/* initial-exec: the handler must not trigger lazy TLS allocation (invariant 1). */
static __thread struct thread_state tls_state __attribute__((tls_model("initial-exec")));

static struct profile_pair *sampler_profiles;
static uint64_t sampler_period;
static unwinder_fn sampler_unwinder;
static int sampler_signo;
/* A fork child writes it at exit (sampler_set_enabled): on the page it writes anyway. */
FORK_CHILD_DATA static _Atomic bool sampler_enabled;
/*
 * Fork generation: a fork child increments it instead of resetting the forking
 * thread's state, whose TLS page it then never touches unless it samples: each page a
 * new process touches costs it a fault, and under a hypervisor that keeps shadow page
 * tables a read can cost as much as a write. A thread whose gen differs holds its
 * parent's values (tls_current resets them). Written only in a fork child's handler,
 * while it is the only thread (relaxed).
 */
FORK_CHILD_DATA static _Atomic uint32_t fork_gen;
/* The tid of a fork child's only thread (the forking one, whose state is stale until
 * tls_reset), read by its fork handler: the sampling handler needs no system call. */
FORK_CHILD_DATA static pid_t fork_child_tid;
/* That thread's state: the only one fork_child_tid is the tid of, until that state is
 * reset (then no other is: glibc may give a thread the child creates later the
 * address of a thread that ended). A thread the child creates also finds a generation
 * that is not fork_gen (its state is fresh), and must not take the forking thread's
 * tid: its timer would be the forking thread's, and its samples charged to it.
 * Relaxed: only the forking thread's own reset stores it after the fork handler. */
FORK_CHILD_DATA static _Atomic(const struct thread_state *) fork_child_state;
/* An exact thread (sampler_thread_armed) armed since the process began or forked: until
 * then no thread has an end account, and exit need not look at its own state. */
FORK_CHILD_DATA static _Atomic bool exact_armed;

/* async-signal-safe. What the fork child's main thread is: a new task, its timer
 * armed with whole-period weights (not exact), nothing sampled. */
FORK_CHILD_PATH static void tls_reset(struct thread_state *ts, uint32_t g)
{
	/* The only thread a fork child starts with is the forking one; a thread created
	 * later reads its own tid (sampler_gettid, sampler_thread_setup). */
	if (ts == atomic_load_explicit(&fork_child_state, memory_order_relaxed)) {
		ts->tid = fork_child_tid;
		atomic_store_explicit(&fork_child_state, NULL, memory_order_relaxed);
	} else {
		ts->tid = 0;
	}
	ts->sampled = false;
	ts->exact = false;
	ts->ended = false;
	ts->first_seen = false;
	ts->last_n = 0;
	ts->recorded_ns = 0;
	ts->armed_ns = 0;
	ts->gen = g;
}

/* async-signal-safe. In the handler (every signal blocked): the calling thread's state,
 * reset first if it came through a fork. */
static struct thread_state *tls_current_in_handler(void)
{
	struct thread_state *ts = &tls_state;
	uint32_t g = atomic_load_explicit(&fork_gen, memory_order_relaxed);
	if (ts->gen != g)
		tls_reset(ts, g);
	return ts;
}

/* async-signal-safe. The same in normal context: the reset runs with the sampling
 * signal blocked, or a sample landing in its middle (the thread's timer is armed) would
 * be recorded and then half erased. Two system calls, once per thread per fork. */
FORK_CHILD_PATH static struct thread_state *tls_current(void)
{
	struct thread_state *ts = &tls_state;
	uint32_t g = atomic_load_explicit(&fork_gen, memory_order_relaxed);
	if (ts->gen != g) {
		sigset_t block, old;
		sigemptyset(&block);
		if (sampler_signo > 0)
			sigaddset(&block, sampler_signo);
		raw_sigmask(SIG_BLOCK, &block, &old);
		if (ts->gen != g)
			tls_reset(ts, g);
		raw_sigmask(SIG_SETMASK, &old, NULL);
	}
	return ts;
}
static _Atomic uint64_t foreign_signals;

/* async-signal-safe */
FORK_CHILD_PATH pid_t sampler_gettid(void)
{
	struct thread_state *ts = tls_current();
	if (ts->tid == 0)
		ts->tid = (pid_t)raw_syscall(SYS_gettid, 0, 0, 0, 0);
	return ts->tid;
}

/* async-signal-safe. The tid without touching the thread's state (fork child handler). */
FORK_CHILD_PATH pid_t sampler_gettid_uncached(void)
{
	return (pid_t)raw_syscall(SYS_gettid, 0, 0, 0,
				  0); /* not libc's: see common/raw_syscall.h */
}

/* async-signal-safe. In the handler: the thread's cached tid, read now if it has none
 * (a thread the start-up scan found), unless a seccomp filter forbids a new kind of
 * system call here: then 0 ("unknown"). */
static pid_t handler_tid(struct thread_state *ts)
{
	if (ts->tid == 0 && !sandbox_thread_active())
		ts->tid = (pid_t)raw_syscall(SYS_gettid, 0, 0, 0, 0);
	return ts->tid;
}

/* The calling thread's CPU clock: a system call, the vDSO does not serve CPU clocks. */
static uint64_t thread_cpu_ns(void)
{
	struct timespec t;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
		return 0;
	return timespec_ns(&t);
}

/* async-signal-safe. The wall profile: the thread's wall time since its last charge,
 * waits excluded, goes to the stack just sampled (agent/wall/wall_clock.h). */
static void charge_running(struct thread_state *ts, uintptr_t *pcs, uint32_t n, uintptr_t sp,
			   bool sp_on_stack)
{
	uint64_t run = wall_clock_running(clock_now_ns(CLOCK_MONOTONIC), sp, sp_on_stack);
	if (run == 0)
		return;
	/* The tag may replace the last pc of a full stack, which the thread's end
	 * account still needs (last_n). */
	uint32_t last = n < UNWIND_MAX_DEPTH ? n : UNWIND_MAX_DEPTH - 1;
	uintptr_t kept = pcs[last];
	uint32_t m = wall_clock_tag(pcs, n, WALL_RUNNING);
	const uint64_t v[PROFILE_VALUES_MAX] = {1, run};
	profiles_add(sampler_profiles, PROFILE_WALL, handler_tid(ts), pcs, m, v);
	pcs[last] = kept;
	wall_clock_count_sample(false);
}

/* async-signal-safe */
static void sampler_handler(int signo, siginfo_t *si, void *ucv)
{
	int saved_errno = errno;
	uint64_t value = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
	uint32_t cookie = (uint32_t)value;
	if (si->si_code != SI_TIMER ||
	    (cookie != SAMPLER_COOKIE && cookie != SAMPLER_COOKIE_CREDIT)) {
		/* Not one of our timers (kill, the application's setitimer or timer): it
		 * gets the action the application chose for this signal. */
		atomic_fetch_add_explicit(&foreign_signals, 1, memory_order_relaxed);
		app_signals_deliver(signo, si, ucv);
		errno = saved_errno;
		return;
	}
	struct thread_state *ts = tls_current_in_handler();
	if (ts->ended) {
		/* An expiry that was pending (the signal blocked) when the thread's timer
		 * was deleted: its CPU is already in the end's account. */
		errno = saved_errno;
		return;
	}
	/* si_overrun: expiries the kernel merged into this one signal. The first expiry
	 * of an exact thread (sampler_thread_armed) weighs where it falls on the thread's
	 * CPU clock, which the timer's value carries (sampler_timer_value): all the CPU
	 * before it, the part before the timer was armed included (a thread armed late
	 * by threads_service). Not the clock read here: the kernel checks CPU timers at
	 * its tick, so that would count the lag to the tick twice. The CPU after the last
	 * expiry is added at the thread's end. A thread found by the start-up scan
	 * (SAMPLER_COOKIE_CREDIT: it ran before the profiler) is weighed the same way,
	 * and is exact from then on: its end adds the CPU after its last expiry when it
	 * runs through our trampoline (under load a signal carries tens of ms). */
	uint64_t weight = sampler_period * (1 + (uint64_t)(unsigned)si->si_overrun);
	if (!ts->first_seen && (ts->exact || cookie == SAMPLER_COOKIE_CREDIT)) {
		weight = weight - sampler_period + (value >> 32) * 1000;
		ts->first_seen = true;
		ts->exact = true;
	}
	if (!atomic_load_explicit(&sampler_enabled, memory_order_relaxed) || own_thread_is_self()) {
		errno = saved_errno;
		return;
	}
	const ucontext_t *uc = ucv;
	struct unwind_regs regs = {
	    .pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP],
	    .sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP],
	    .fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP],
	    .gregs = uc->uc_mcontext.gregs,
	};
	if (ts->stack_hi == 0) {
		/* A thread that existed before we loaded: find its stack once. */
		struct stack_range r;
		if (stack_ranges_lookup(regs.sp, &r)) {
			ts->stack_lo = r.lo;
			ts->stack_hi = r.hi;
		}
	}
	/* The interrupted sp must lie on the thread's own stack; on an alternate signal
	 * stack or a coroutine stack we know only the leaf. */
	if (regs.sp >= ts->stack_lo && regs.sp < ts->stack_hi) {
		regs.stack_hi = ts->stack_hi;
		regs.stack_lo = ts->stack_lo;
	}
	uintptr_t *pcs = tls_state.pcs;
	uint32_t n = sampler_unwinder(&regs, pcs, UNWIND_MAX_DEPTH);
	profiles_record(sampler_profiles, handler_tid(ts), pcs, n, weight);
	ts->sampled = true;
	ts->recorded_ns += weight;
	ts->last_n = n;
	if (wall_clock_on())
		charge_running(ts, pcs, n, regs.sp, regs.stack_hi != 0);
	errno = saved_errno;
}

static bool signal_is_free(int signo)
{
	struct sigaction old;
	if (app_signals_sigaction(signo, NULL, &old) != 0) /* as the application sees it */
		return false;
	if (old.sa_flags & SA_SIGINFO)
		return false;
	return old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN;
}

/* Real-time signals skipped at the bottom of the range: other runtimes' favourites. */
#define SAMPLER_RT_SKIP 4

static int choose_signal(int requested)
{
	if (requested > 0) {
		if (signal_is_free(requested))
			return requested;
		log_warn("DD_PROFILING_SIGNAL=%d already has a handler installed by the "
			 "application; choosing another signal",
			 requested);
	}
	if (signal_is_free(SIGPROF))
		return SIGPROF;
	for (int s = SIGRTMIN + SAMPLER_RT_SKIP; s <= SIGRTMAX; s++)
		if (signal_is_free(s))
			return s;
	return -EBUSY;
}

/* Normal context (constructor). */
int sampler_init(struct profile_pair *pp, uint64_t period_ns, int requested_signo,
		 unwinder_fn unwinder)
{
	sampler_profiles = pp;
	sampler_period = period_ns;
	sampler_unwinder = unwinder;
	int signo = choose_signal(requested_signo);
	if (signo < 0)
		return signo;
	int rc = app_signals_install_sampling(signo, sampler_handler);
	if (rc < 0)
		return rc;
	if (signo != SIGPROF)
		log_info("SIGPROF is taken by the application; sampling with signal %d", signo);
	sampler_signo = signo;
	return signo;
}

int sampler_signal(void)
{
	return sampler_signo;
}

uint64_t sampler_period_ns(void)
{
	return sampler_period;
}

FORK_CHILD_PATH void sampler_set_enabled(bool on)
{
	atomic_store_explicit(&sampler_enabled, on, memory_order_relaxed);
}

/* Normal context, in the thread itself. */
void sampler_thread_setup(pid_t tid, uintptr_t stack_lo, uintptr_t stack_hi, bool may_fire)
{
	if (!may_fire) {
		/* No timer of ours targets this thread yet: no handler can interleave. */
		tls_current();
		tls_state.tid = tid;
		tls_state.stack_lo = stack_lo;
		tls_state.stack_hi = stack_hi;
		return;
	}
	/* A timer armed by the /proc scan may already fire in this thread: keep the
	 * handler from seeing lo and hi from two different sources. */
	sigset_t block, old;
	sigemptyset(&block);
	if (sampler_signo > 0)
		sigaddset(&block, sampler_signo);
	raw_sigmask(SIG_BLOCK, &block, &old);
	tls_current();
	tls_state.tid = tid;
	tls_state.stack_lo = stack_lo;
	tls_state.stack_hi = stack_hi;
	raw_sigmask(SIG_SETMASK, &old, NULL);
}

void sampler_thread_bounds(pid_t *tid, uintptr_t *lo, uintptr_t *hi)
{
	struct thread_state *ts = tls_current();
	*tid = ts->tid;
	*lo = ts->stack_lo;
	*hi = ts->stack_hi;
}

FORK_CHILD_PATH bool sampler_thread_sampled(void)
{
	return tls_current()->sampled;
}

FORK_CHILD_PATH bool sampler_thread_has_end_account(void)
{
	/* The flag first: a fork child's main thread never reads its TLS for this. */
	return atomic_load_explicit(&exact_armed, memory_order_relaxed) && tls_current()->exact;
}

/* Normal context, in the thread itself, before its timer is armed (by itself, or later
 * by the uploader thread: the registry's lock orders these writes before that). Samples
 * and weights it recorded before (a timer the start-up scan armed) stay counted. */
FORK_CHILD_PATH void sampler_thread_armed(bool exact)
{
	/* Not exact (the main thread at start-up, a fork child): the state is already what
	 * it should be (zero TLS, or reset by tls_current at its next use), and a fork
	 * child must not touch its TLS page here. */
	if (!exact)
		return;
	if (!atomic_load_explicit(&exact_armed, memory_order_relaxed))
		atomic_store_explicit(&exact_armed, true, memory_order_relaxed);
	struct thread_state *ts = tls_current();
	ts->armed_ns = clock_now_ns(CLOCK_MONOTONIC);
	ts->exact = true;
	ts->ended = false;
	ts->first_seen = false;
	/* Pairs with the handler, which runs on this thread only once the timer armed
	 * after this call fires: the fields above are written before it can. */
	atomic_signal_fence(memory_order_seq_cst);
}

/* splitmix64: a coin per thread end, seeded by when and which thread. */
static uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

/* The stack an unsampled thread's CPU goes to: its start routine, called from the
 * frame at root->frame (ours, with a frame pointer), and that frame's callers. */
static uint32_t root_stack(const struct sampler_thread_root *root, uintptr_t *pcs)
{
	uint32_t n = 0;
	pcs[n++] = root->start_fn;
	pcs[n++] = root->caller_pc;
	const uintptr_t *fr = (const uintptr_t *)root->frame;
	struct unwind_regs regs = {.pc = fr[1], .sp = root->frame + 16, .fp = fr[0]};
	if (regs.sp >= tls_state.stack_lo && regs.sp < tls_state.stack_hi)
		regs.stack_hi = tls_state.stack_hi;
	return n + sampler_unwinder(&regs, pcs + n, UNWIND_MAX_DEPTH - n);
}

/* Normal context, in the thread itself, once its timer is deleted, or while the uploader
 * thread may still be arming one for it (threads_service): once ended is set no handler
 * records for it any more, so tls_state.pcs is ours. */
void sampler_thread_end(const struct sampler_thread_root *root)
{
	struct thread_state *ts = tls_current();
	ts->ended = true;
	/* Pairs with the handler's check of ended: a signal after this store records
	 * nothing, and the reads below come after it (they see what a signal before it
	 * recorded). */
	atomic_signal_fence(memory_order_seq_cst);
	bool exact = ts->exact;
	ts->exact = false;
	if (!exact || own_thread_is_self() ||
	    !atomic_load_explicit(&sampler_enabled, memory_order_relaxed))
		return;
	if (ts->sampled) {
		/* The CPU after its last expiry (and before its timer was armed). */
		uint64_t cpu = thread_cpu_ns();
		if (cpu > ts->recorded_ns && ts->last_n > 0)
			profiles_record_n(sampler_profiles, sampler_gettid(), tls_state.pcs,
					  ts->last_n, 0, cpu - ts->recorded_ns);
		ts->recorded_ns = cpu;
		return;
	}
	if (!root || !root->frame)
		return;
	uint64_t now_ns = clock_now_ns(CLOCK_MONOTONIC);
	/* A thread that ended before its first expiry was ever seen. The kernel checks
	 * CPU timers only at its tick, so even a thread with more CPU than the period
	 * may have none. Its CPU is read (a system call) with probability
	 * lived / period and weighed by the inverse: unbiased, and nearly free for the
	 * very short threads of a process that churns them. */
	uint64_t lived = now_ns - ts->armed_ns + SAMPLER_END_SLACK_NS;
	uint64_t scale = sampler_period;
	if (lived < scale && mix64(now_ns ^ ((uint64_t)sampler_gettid() << 32)) % scale >= lived)
		return;
	uint64_t cpu = thread_cpu_ns();
	if (cpu == 0)
		return;
	uint64_t weight = lived < scale ? (uint64_t)((unsigned __int128)cpu * scale / lived) : cpu;
	uint32_t n = root_stack(root, tls_state.pcs);
	profiles_record_n(sampler_profiles, sampler_gettid(), tls_state.pcs, n, 1, weight);
	ts->sampled = true;
	ts->recorded_ns = cpu;
}

/* The pc buffer and tid of sampler_caller_begin: not the handler's buffer (a profiling
 * signal may land while a hook unwinds), and a tid cached for the fork generation it
 * was read in. initial-exec: hooks run where the handler runs, lazy TLS is not allowed. */
struct caller_state {
	uint32_t gen;
	pid_t tid;
	bool recording; /* an application's signal handler allocating while we record */
	uintptr_t pcs[UNWIND_MAX_DEPTH];
};
static __thread struct caller_state tls_caller __attribute__((tls_model("initial-exec")));

/* async-signal-safe */
bool sampler_caller_begin(const struct unwind_regs *caller, struct sampler_caller *out)
{
	struct caller_state *cs = &tls_caller;
	if (!atomic_load_explicit(&sampler_enabled, memory_order_relaxed) || cs->recording)
		return false;
	cs->recording = true;
	out->saved_errno = errno;
	if (own_thread_is_self()) {
		/* The profiler's own allocations (libcurl, zlib, libdw on its threads): its
		 * share, one frame, never an application stack. */
		cs->pcs[0] = PC_PROFILER;
		out->pcs = cs->pcs;
		out->n = 1;
		out->tid = 0;
		return true;
	}
	uint32_t g = atomic_load_explicit(&fork_gen, memory_order_relaxed);
	if (cs->gen != g) {
		cs->gen = g;
		cs->tid = 0;
	}
	if (cs->tid == 0 && !sandbox_thread_active())
		cs->tid = (pid_t)raw_syscall(SYS_gettid, 0, 0, 0, 0);
	/* The handler's view of this thread's stack when it is current (read only: its
	 * reset belongs to the handler and tls_current), else a lookup. */
	struct thread_state *ts = &tls_state;
	uintptr_t lo = ts->gen == g ? ts->stack_lo : 0, hi = ts->gen == g ? ts->stack_hi : 0;
	if (hi == 0) {
		struct stack_range r;
		if (stack_ranges_lookup(caller->sp, &r)) {
			lo = r.lo;
			hi = r.hi;
		}
	}
	struct unwind_regs regs = *caller;
	regs.stack_hi = regs.sp >= lo && regs.sp < hi ? hi : 0;
	out->n = sampler_unwinder(&regs, cs->pcs, UNWIND_MAX_DEPTH);
	out->pcs = cs->pcs;
	out->tid = cs->tid;
	return true;
}

/* async-signal-safe */
void sampler_caller_record(const struct sampler_caller *c, enum profile_kind kind,
			   const uint64_t *values)
{
	profiles_add(sampler_profiles, kind, c->tid, c->pcs, c->n, values);
}

/* async-signal-safe */
void sampler_caller_record_tagged(const struct sampler_caller *c, enum profile_kind kind,
				  const uint64_t *values, uintptr_t tag)
{
	/* c's stack is this thread's buffer (sampler_caller_begin), until its end. */
	uintptr_t *pcs = tls_caller.pcs;
	uint32_t n = c->n < UNWIND_MAX_DEPTH ? c->n : UNWIND_MAX_DEPTH - 1;
	pcs[n] = tag;
	profiles_add(sampler_profiles, kind, c->tid, pcs, n + 1, values);
}

/* async-signal-safe */
void sampler_caller_end(const struct sampler_caller *c)
{
	errno = c->saved_errno;
	tls_caller.recording = false;
}

bool sampler_thread_is_internal(void)
{
	return own_thread_is_self();
}

FORK_CHILD_PATH void sampler_after_fork_child(pid_t tid)
{
	fork_child_tid = tid;
	/* An address: the state's page is not touched. */
	atomic_store_explicit(&fork_child_state, &tls_state, memory_order_relaxed);
	/* A new task: its own tid, CPU clock and samples. The forking thread's state is
	 * reset at its next use (tls_current), not here. */
	atomic_store_explicit(&fork_gen, atomic_load_explicit(&fork_gen, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_store_explicit(&exact_armed, false, memory_order_relaxed);
}

uint64_t sampler_foreign_signals(void)
{
	return atomic_load_explicit(&foreign_signals, memory_order_relaxed);
}
