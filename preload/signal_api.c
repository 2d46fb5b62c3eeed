/*
 * signal_api.c - libc's signal-disposition functions, interposed.
 *
 * Owns: sigaction, signal, bsd_signal, sysv_signal (and __sysv_signal, which signal()
 * names under strict standards), sigset, sigignore and siginterrupt, each with the
 * semantics glibc gives it, on top of agent_sigaction (agent/agent.h: the sigaction of
 * agent/sample/app_signals.h), so that the application reads and sets its own
 * dispositions as if the profiler were not there (its handlers run with its flags and
 * masks; the sampling signal's action is virtual). glibc implements each of these on
 * its internal sigaction, which the public one would not see: hence one wrapper per
 * name.
 * Context: any application thread, signal handlers included (sigaction, signal and
 * sigset are async-signal-safe in POSIX): everything here is async-signal-safe, as is
 * what it calls.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "agent/agent.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

/* Signals siginterrupt made interrupting: signal() then sets them without SA_RESTART
 * (glibc's _sigintr). Signals 1..64 as bits 0..63. */
static _Atomic uint64_t interrupting;

/* async-signal-safe */
static uint64_t bit_of(int sig)
{
	return sig > 0 && sig <= 64 ? 1ULL << (sig - 1) : 0;
}

/* async-signal-safe */
DDPROF_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return agent_sigaction(sig, act, old);
}

/* async-signal-safe. glibc's __bsd_signal: the handler with SA_RESTART (unless
 * siginterrupt said otherwise), the signal itself blocked while it runs. */
static __sighandler_t bsd_semantics(int sig, __sighandler_t handler)
{
	if (handler == SIG_ERR || sig <= 0 || sig >= NSIG) {
		errno = EINVAL;
		return SIG_ERR;
	}
	struct sigaction act, old;
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	int saved = errno;
	sigaddset(&act.sa_mask, sig); /* refuses glibc's internal signals: sigaction will */
	errno = saved;
	act.sa_flags = atomic_load_explicit(&interrupting, memory_order_relaxed) & bit_of(sig)
			   ? 0
			   : SA_RESTART;
	if (agent_sigaction(sig, &act, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

DDPROF_EXPORT __sighandler_t signal(int sig, __sighandler_t handler)
{
	return bsd_semantics(sig, handler);
}

/* glibc declares it only for older standards. */
__sighandler_t bsd_signal(int sig, __sighandler_t handler);
DDPROF_EXPORT __sighandler_t bsd_signal(int sig, __sighandler_t handler)
{
	return bsd_semantics(sig, handler);
}

/* async-signal-safe. System V semantics: one-shot, not blocked while it runs, and
 * interrupting system calls. */
static __sighandler_t sysv_semantics(int sig, __sighandler_t handler)
{
	if (handler == SIG_ERR || sig <= 0 || sig >= NSIG) {
		errno = EINVAL;
		return SIG_ERR;
	}
	struct sigaction act, old;
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	act.sa_flags = SA_RESETHAND | SA_NODEFER;
	if (agent_sigaction(sig, &act, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

DDPROF_EXPORT __sighandler_t sysv_signal(int sig, __sighandler_t handler)
{
	return sysv_semantics(sig, handler);
}

DDPROF_EXPORT __sighandler_t __sysv_signal(int sig, __sighandler_t handler)
{
	return sysv_semantics(sig, handler);
}

/* async-signal-safe. glibc's sigset: SIG_HOLD blocks the signal; anything else sets
 * it as the handler (no flags, empty mask) and unblocks the signal. Returns SIG_HOLD
 * when the signal was blocked, else the previous disposition. */
DDPROF_EXPORT __sighandler_t sigset(int sig, __sighandler_t disp)
{
	sigset_t one, old;
	sigemptyset(&one);
	if (sigaddset(&one, sig) < 0)
		return SIG_ERR;
	if (disp == SIG_HOLD) {
		if (sigprocmask(SIG_BLOCK, &one, &old) < 0)
			return SIG_ERR;
		if (sigismember(&old, sig))
			return SIG_HOLD;
		struct sigaction cur;
		if (agent_sigaction(sig, NULL, &cur) < 0)
			return SIG_ERR;
		return cur.sa_handler;
	}
	struct sigaction act, prev;
	memset(&act, 0, sizeof(act));
	act.sa_handler = disp;
	sigemptyset(&act.sa_mask);
	if (agent_sigaction(sig, &act, &prev) < 0)
		return SIG_ERR;
	if (sigprocmask(SIG_UNBLOCK, &one, &old) < 0)
		return SIG_ERR;
	return sigismember(&old, sig) ? SIG_HOLD : prev.sa_handler;
}

DDPROF_EXPORT int sigignore(int sig)
{
	struct sigaction act;
	memset(&act, 0, sizeof(act));
	act.sa_handler = SIG_IGN;
	sigemptyset(&act.sa_mask);
	return agent_sigaction(sig, &act, NULL);
}

DDPROF_EXPORT int siginterrupt(int sig, int flag)
{
	struct sigaction act;
	if (agent_sigaction(sig, NULL, &act) < 0)
		return -1;
	uint64_t b = bit_of(sig);
	if (flag) {
		atomic_fetch_or_explicit(&interrupting, b, memory_order_relaxed);
		act.sa_flags &= ~SA_RESTART;
	} else {
		atomic_fetch_and_explicit(&interrupting, ~b, memory_order_relaxed);
		act.sa_flags |= SA_RESTART;
	}
	return agent_sigaction(sig, &act, NULL);
}
