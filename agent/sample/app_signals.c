/*
 * app_signals.c - the application's own signal dispositions (see app_signals.h).
 *
 * This file is async-signal-safe where marked: app_signals_sigaction (sigaction is on
 * POSIX's list), the dispatcher, app_signals_deliver. They use raw system calls, C11
 * atomics and initial-exec TLS only.
 *
 * Each signal has two slots of the application's action and an index of the current
 * one. A writer (serialized by a spin lock taken with every signal blocked, so that no
 * handler of the writing thread can wait for it) fills the other slot and then flips
 * the index: a fork child, whose writer may have vanished mid-write, finds the current
 * slot whole and resets the lock (app_signals_after_fork_child). A reader (a dispatcher
 * in any thread) copies the current slot under the slot's sequence count and retries
 * when a writer reused that slot meanwhile.
 */
#include "agent/sample/app_signals.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/sample/sandbox.h"
#include "common/fork_child.h"
#include "common/raw_syscall.h"

/* libc's own sigaction: the public name is ours (preload/signal_api.c). A ThreadSanitizer
 * build of the unit suites has no such wrapper and goes through TSan's sigaction: TSan
 * must see the sampling handler to hold its signals while its own runtime runs (a
 * handler entered inside it deadlocks on its internal locks). */
#ifdef DDPROF_TSAN
#define __sigaction sigaction
#else
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);
#endif

#define SIG_SLOTS 65 /* signals 1..64 */
/* The kernel's flag for sa_restorer, which glibc sets on every action (not exported by
 * its headers): not part of what the application set. */
#ifndef SA_RESTORER
#define SA_RESTORER 0x04000000
#endif

struct app_slot {
	_Atomic uint32_t seq;	   /* odd while the slot is written */
	_Atomic bool virt;	   /* the kernel holds our handler on the application's behalf */
	_Atomic uintptr_t handler; /* the application's sa_handler / sa_sigaction */
	_Atomic int flags;	   /* its sa_flags */
	_Atomic uint64_t mask;	   /* its sa_mask, signals 1..64 as bits 0..63 */
};

struct app_entry {
	struct app_slot slot[2];
	_Atomic uint32_t cur; /* index of the current slot */
};

static struct app_entry table[SIG_SLOTS];
/* The writer's lock: 0, or the pid of the process whose thread holds it. A fork child
 * (or a child made without our fork handlers) may inherit it held by a thread that is
 * not there: the stamp is another process's, and the child takes the lock over. */
static _Atomic int write_lock;
/* The process the table belongs to: set at start-up and by our fork child handler. A
 * caller of another pid is a vfork child (sharing our memory: it must not write the
 * parent's table) or a child made without our handlers: the kernel's calls are passed
 * through untouched. 0 until the agent runs: everything is passed through. */
FORK_CHILD_DATA static pid_t owner_pid;
static int sampling_signo;
static app_signals_handler_fn sampling_handler;
/* Watched signals (app_signals_watch_deaths), as bits of sig_bit, and their hook: set at
 * start-up, before the kernel holds the dispatcher for any of them. */
static _Atomic uint64_t death_watch;
static app_signals_death_fn death_hook;
/* Watched signals the application has not set since: their action reads back as the
 * kernel's untouched default (no flags, no restorer), not as libc writes one. */
static _Atomic uint64_t death_untouched;
static _Atomic uint64_t forwarded;

/* What a thread knows of the application handlers it runs: how many are nested, and
 * the stack pointer of the outermost one's dispatcher frame. initial-exec: written in
 * handlers, never allocated lazily. */
struct handler_depth {
	uint32_t depth;
	uintptr_t outer_sp;
};
static __thread struct handler_depth tls_depth __attribute__((tls_model("initial-exec")));

struct app_action {
	bool virt;
	uintptr_t handler;
	int flags;
	uint64_t mask;
};

/* async-signal-safe. glibc's sigset_t keeps signals 1..64 in its first word. */
static uint64_t set_to_bits(const sigset_t *s)
{
	return (uint64_t)s->__val[0];
}

/* async-signal-safe */
static void bits_to_set(uint64_t bits, sigset_t *s)
{
	memset(s, 0, sizeof(*s));
	s->__val[0] = bits;
}

/* async-signal-safe */
static uint64_t sig_bit(int sig)
{
	return 1ULL << (sig - 1);
}

/* async-signal-safe. The current action of sig. */
static void read_action(int sig, struct app_action *out)
{
	struct app_entry *e = &table[sig];
	for (;;) {
		/* Acquire pairs with the writer's release of cur: the slot it names is whole. */
		uint32_t i = atomic_load_explicit(&e->cur, memory_order_acquire);
		struct app_slot *s = &e->slot[i & 1];
		/* Acquire pairs with the writer's release of the closing (even) count. */
		uint32_t s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
		if (s1 & 1)
			continue;
		out->virt = atomic_load_explicit(&s->virt, memory_order_relaxed);
		out->handler = atomic_load_explicit(&s->handler, memory_order_relaxed);
		out->flags = atomic_load_explicit(&s->flags, memory_order_relaxed);
		out->mask = atomic_load_explicit(&s->mask, memory_order_relaxed);
		/* Orders the field loads before the second count load (seqlock read side). */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->seq, memory_order_relaxed) == s1)
			return;
	}
}

/* async-signal-safe. Writer side, lock held: makes a the current action of sig. */
static void write_action(int sig, const struct app_action *a)
{
	struct app_entry *e = &table[sig];
	uint32_t next = (atomic_load_explicit(&e->cur, memory_order_relaxed) + 1) & 1;
	struct app_slot *s = &e->slot[next];
	uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
	atomic_store_explicit(&s->seq, seq | 1, memory_order_relaxed);
	/* Orders the odd count before the field stores (seqlock write side): a reader
	 * that sees a new field sees the odd count at its second load. */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&s->virt, a->virt, memory_order_relaxed);
	atomic_store_explicit(&s->handler, a->handler, memory_order_relaxed);
	atomic_store_explicit(&s->flags, a->flags, memory_order_relaxed);
	atomic_store_explicit(&s->mask, a->mask, memory_order_relaxed);
	/* Release pairs with read_action's acquire of seq. */
	atomic_store_explicit(&s->seq, (seq | 1) + 1, memory_order_release);
	/* Release pairs with read_action's acquire of cur. */
	atomic_store_explicit(&e->cur, next, memory_order_release);
}

/* async-signal-safe. Every signal blocked, then the lock, stamped with this process's
 * pid: old receives the mask. */
static void lock(uint64_t *old, int pid)
{
	uint64_t all = ~0ULL;
	raw_syscall(SYS_rt_sigprocmask, SIG_BLOCK, (long)&all, (long)old, sizeof(all));
	for (;;) {
		int v = atomic_load_explicit(&write_lock, memory_order_relaxed);
		/* Free, or held in another process (inherited across a fork): ours to take.
		 * Acquire pairs with unlock's release: the previous writer's table writes. */
		if ((v == 0 || v != pid) &&
		    atomic_compare_exchange_weak_explicit(
			&write_lock, &v, pid, memory_order_acquire, memory_order_relaxed))
			return;
		__builtin_ia32_pause();
	}
}

/* async-signal-safe */
static void unlock(const uint64_t *old)
{
	/* Release pairs with lock's acquire. */
	atomic_store_explicit(&write_lock, 0, memory_order_release);
	raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, (long)old, 0, sizeof(*old));
}

/* async-signal-safe. What the kernel goes by: the handler value alone, whatever the
 * flags (SA_SIGINFO with SIG_DFL or SIG_IGN is still SIG_DFL or SIG_IGN). */
static bool is_dfl(uintptr_t h)
{
	return h == (uintptr_t)SIG_DFL;
}

static bool is_ign(uintptr_t h)
{
	return h == (uintptr_t)SIG_IGN;
}

/* async-signal-safe. The default action of sig, with the siginfo it came with: the
 * kernel's disposition becomes SIG_DFL and the signal is sent again to this thread,
 * where it stays pending until the handler returns (it is blocked while the handler
 * runs) and then takes effect: terminate, dump core, stop, or nothing. */
static void default_action(int sig, siginfo_t *si)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	int saved = errno;
	__sigaction(sig, &dfl, NULL);
	errno = saved;
	long pid = raw_syscall(SYS_getpid, 0, 0, 0, 0);
	long tid = raw_syscall(SYS_gettid, 0, 0, 0, 0);
	if (raw_syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, (long)si) != 0)
		raw_syscall(SYS_tgkill, pid, tid, sig, 0);
}

/* async-signal-safe. Runs the application's handler of a as the kernel would have. */
static void call_app(int sig, siginfo_t *si, void *uc, const struct app_action *a)
{
	struct handler_depth *d = &tls_depth;
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	/* A count left by a handler that jumped out (siglongjmp) is stale once we run
	 * above the frame it recorded. */
	if (d->depth && sp >= d->outer_sp)
		d->depth = 0;
	if (d->depth++ == 0)
		d->outer_sp = sp;
	/* The count is seen by this thread only; the compiler must not move it past the
	 * call. */
	atomic_signal_fence(memory_order_seq_cst);
	if (a->flags & SA_SIGINFO)
		((app_signals_handler_fn)a->handler)(sig, si, uc);
	else
		((void (*)(int))a->handler)(sig);
	atomic_signal_fence(memory_order_seq_cst);
	if (d->depth)
		d->depth--;
}

static bool kernel_holds_ours(int sig, const struct sigaction *k);

/* async-signal-safe. The kernel's handler for every signal the application handles
 * (other than the sampling signal): its flags and mask are the application's. */
static void dispatch(int sig, siginfo_t *si, void *uc)
{
	struct app_action a;
	read_action(sig, &a);
	if (!a.virt || is_dfl(a.handler) || is_ign(a.handler)) {
		/* A watched signal at its virtual SIG_DFL (the process dies of it), or the
		 * application set SIG_DFL or SIG_IGN while this signal was on its way to the
		 * handler it had. */
		struct sigaction cur;
		int saved = errno;
		__sigaction(sig, NULL, &cur);
		errno = saved;
		bool watched =
		    a.virt && is_dfl(a.handler) && sig < 64 &&
		    (atomic_load_explicit(&death_watch, memory_order_relaxed) & sig_bit(sig)) &&
		    kernel_holds_ours(sig, &cur);
		if (watched && death_hook)
			death_hook(sig);
		if (watched || is_dfl((uintptr_t)cur.sa_handler))
			default_action(sig, si);
		return;
	}
	call_app(sig, si, uc, &a);
}

/* async-signal-safe. Whether the kernel's current action for sig is our handler. */
static bool kernel_holds_ours(int sig, const struct sigaction *k)
{
	if (!(k->sa_flags & SA_SIGINFO))
		return false;
	if (sig == sampling_signo)
		return k->sa_sigaction == sampling_handler;
	return k->sa_sigaction == dispatch;
}

/* async-signal-safe */
static void action_to_sigaction(const struct app_action *a, const struct sigaction *k,
				struct sigaction *out)
{
	*out = *k; /* sa_restorer as the kernel has it */
	out->sa_sigaction = (app_signals_handler_fn)a->handler;
	out->sa_flags = a->flags | (k->sa_flags & SA_RESTORER);
	bits_to_set(a->mask, &out->sa_mask);
}

/* async-signal-safe */
static bool is_handler(const struct sigaction *act)
{
	uintptr_t h = (uintptr_t)act->sa_handler;
	return !is_dfl(h) && !is_ign(h);
}

/* async-signal-safe. Writer's lock held; k: the kernel's current action of sig. Keeps
 * the dispatcher in the kernel for sig with a virtual action a (SIG_DFL): every signal
 * blocked while it runs (nothing interrupts the death hook's wait), SA_ONSTACK (a
 * thread's small stack may have an alternate one), SA_RESTART. 0 or -1 with errno. */
static int install_watch(int sig, const struct sigaction *k, const struct app_action *a)
{
	struct sigaction w = *k;
	memset(&w.sa_mask, 0, sizeof(w.sa_mask));
	sigfillset(&w.sa_mask);
	w.sa_sigaction = dispatch;
	w.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	write_action(sig, a); /* before the kernel can deliver to it */
	return __sigaction(sig, &w, NULL);
}

void app_signals_watch_deaths(const int *sigs, int n, app_signals_death_fn hook)
{
	death_hook = hook;
	pid_t pid = (pid_t)raw_syscall(SYS_getpid, 0, 0, 0, 0);
	for (int i = 0; i < n; i++) {
		int sig = sigs[i];
		if (sig <= 0 || sig >= 64 || sig == sampling_signo)
			continue;
		uint64_t mask;
		lock(&mask, pid);
		struct sigaction k;
		int saved = errno;
		if (__sigaction(sig, NULL, &k) == 0 && is_dfl((uintptr_t)k.sa_handler)) {
			struct app_action a = {.virt = true, .handler = (uintptr_t)SIG_DFL};
			atomic_fetch_or_explicit(&death_watch, sig_bit(sig), memory_order_relaxed);
			atomic_fetch_or_explicit(&death_untouched, sig_bit(sig),
						 memory_order_relaxed);
			if (install_watch(sig, &k, &a) != 0) {
				atomic_fetch_and_explicit(&death_watch, ~sig_bit(sig),
							  memory_order_relaxed);
				atomic_fetch_and_explicit(&death_untouched, ~sig_bit(sig),
							  memory_order_relaxed);
			}
		}
		errno = saved;
		unlock(&mask);
	}
}

/* async-signal-safe */
int app_signals_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	/* Not ours to keep: invalid numbers, SIGKILL and SIGSTOP (libc and the kernel
	 * answer), glibc's internal signals (refused by libc). */
	if (sig <= 0 || sig >= SIG_SLOTS || sig == SIGKILL || sig == SIGSTOP)
		return __sigaction(sig, act, old);
	/* Not running (disabled, not started yet, failed), or not the table's process. */
	pid_t owner = owner_pid;
	if (owner == 0 || raw_syscall(SYS_getpid, 0, 0, 0, 0) != owner)
		return __sigaction(sig, act, old);
	uint64_t mask;
	lock(&mask, owner);
	struct sigaction k;
	int rc = __sigaction(sig, NULL, &k);
	int err = errno;
	if (rc != 0)
		goto out;
	bool ours = kernel_holds_ours(sig, &k);
	struct app_action cur;
	read_action(sig, &cur);
	struct sigaction prev;
	if (ours && cur.virt) {
		action_to_sigaction(&cur, &k, &prev);
	} else {
		prev = k;
		/* The kernel reset a one-shot handler of the application's (SA_RESETHAND)
		 * to SIG_DFL and kept the SA_SIGINFO we installed it with: the application
		 * reads its own. */
		if (cur.virt &&
		    (is_dfl((uintptr_t)k.sa_handler) || is_ign((uintptr_t)k.sa_handler)))
			prev.sa_flags = (k.sa_flags & ~SA_SIGINFO) | (cur.flags & SA_SIGINFO);
	}
	if (sig < 64 &&
	    (atomic_load_explicit(&death_untouched, memory_order_relaxed) & sig_bit(sig))) {
		prev.sa_flags &= ~SA_RESTORER;
		prev.sa_restorer = NULL;
		if (act)
			atomic_fetch_and_explicit(&death_untouched, ~sig_bit(sig),
						  memory_order_relaxed);
	}
	if (act) {
		struct app_action a = {
		    .virt = true,
		    .handler = (uintptr_t)act->sa_sigaction,
		    .flags = act->sa_flags & ~SA_RESTORER,
		    .mask = set_to_bits(&act->sa_mask),
		};
		if (sig == sampling_signo && ours) {
			/* The kernel keeps the sampler's handler; this is what the
			 * application's own signals of this number get. */
			write_action(sig, &a);
		} else if (is_handler(act)) {
			struct sigaction w = *act;
			w.sa_sigaction = dispatch;
			w.sa_flags |= SA_SIGINFO;
			write_action(sig, &a); /* before the kernel can deliver to it */
			rc = __sigaction(sig, &w, NULL);
			err = errno;
			if (rc != 0)
				write_action(sig, &cur);
		} else if (is_dfl((uintptr_t)act->sa_handler) && sig < 64 &&
			   (atomic_load_explicit(&death_watch, memory_order_relaxed) &
			    sig_bit(sig))) {
			/* A watched signal set back to SIG_DFL: still watched (see the top). */
			rc = install_watch(sig, &k, &a);
			err = errno;
		} else {
			rc = __sigaction(sig, act, NULL);
			err = errno;
			if (rc == 0) {
				a.virt = false;
				write_action(sig, &a);
			}
		}
	}
	if (rc == 0 && old)
		*old = prev;
out:
	unlock(&mask);
	errno = err;
	return rc;
}

int app_signals_install_sampling(int signo, app_signals_handler_fn handler)
{
	if (signo <= 0 || signo >= SIG_SLOTS)
		return -EINVAL;
	pid_t pid = (pid_t)raw_syscall(SYS_getpid, 0, 0, 0, 0);
	uint64_t mask;
	lock(&mask, pid);
	struct sigaction prev;
	int rc = __sigaction(signo, NULL, &prev);
	if (rc == 0) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = handler;
		/* SA_RESTART: interrupted system calls of the application resume instead
		 * of failing with EINTR. SA_ONSTACK: a thread with an alternate signal stack
		 * runs every handler there (Go's goroutine stacks are too small for ours,
		 * and its runtime aborts on a handler without it). */
		sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
		/* Nothing may interrupt a record: an application handler that siglongjmps
		 * would leave the profile's writer count raised. */
		sigfillset(&sa.sa_mask);
		sampling_handler = handler;
		sampling_signo = signo;
		/* What the application had is now its virtual action (SIG_DFL or SIG_IGN:
		 * the sampler only takes a signal nobody handles). */
		struct app_action a = {
		    .virt = true,
		    .handler = (uintptr_t)prev.sa_sigaction,
		    .flags = prev.sa_flags & ~SA_RESTORER,
		    .mask = set_to_bits(&prev.sa_mask),
		};
		write_action(signo, &a);
		rc = __sigaction(signo, &sa, NULL);
	}
	int err = rc == 0 ? 0 : -errno;
	if (rc == 0)
		owner_pid = pid; /* the table is in use from now on */
	unlock(&mask);
	return err;
}

/* async-signal-safe */
void app_signals_deliver(int sig, siginfo_t *si, void *uc)
{
	struct app_action a;
	read_action(sig, &a);
	if (is_ign(a.handler))
		return;
	if (is_dfl(a.handler)) {
		default_action(sig, si);
		return;
	}
	if (a.flags & SA_RESETHAND) {
		/* A one-shot handler: the next one gets the default action. */
		struct app_action dfl = {.virt = true, .handler = (uintptr_t)SIG_DFL};
		uint64_t m;
		lock(&m, owner_pid);
		write_action(sig, &dfl);
		unlock(&m);
	}
	/* The mask the kernel would have set for the application's handler (ours blocks
	 * every signal): the interrupted mask, its sa_mask, and the signal itself unless
	 * SA_NODEFER. The return from our handler restores the interrupted mask. */
	const ucontext_t *u = uc;
	uint64_t m = set_to_bits(&u->uc_sigmask) | a.mask;
	if (!(a.flags & SA_NODEFER))
		m |= sig_bit(sig);
	/* Not under a seccomp filter we saw (strict mode forbids rt_sigprocmask): the
	 * handler then runs with every signal blocked. */
	if (!sandbox_thread_active())
		raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, (long)&m, 0, sizeof(m));
	atomic_fetch_add_explicit(&forwarded, 1, memory_order_relaxed);
	call_app(sig, si, uc, &a);
}

FORK_CHILD_PATH void app_signals_after_fork_child(pid_t pid)
{
	/* The table is this child's now (a copy: its current slots are whole, as a writer
	 * flips the index last); a lock a vanished thread held is taken over by pid. */
	if (owner_pid != 0)
		owner_pid = pid;
}

bool app_signals_in_handler(void)
{
	const struct handler_depth *d = &tls_depth;
	return d->depth && (uintptr_t)__builtin_frame_address(0) < d->outer_sp;
}

bool app_signals_sampling_intact(void)
{
	if (sampling_signo <= 0)
		return true;
	struct sigaction k;
	int saved = errno;
	int rc = __sigaction(sampling_signo, NULL, &k);
	errno = saved;
	return rc == 0 && kernel_holds_ours(sampling_signo, &k);
}

uint64_t app_signals_forwarded(void)
{
	return atomic_load_explicit(&forwarded, memory_order_relaxed);
}
