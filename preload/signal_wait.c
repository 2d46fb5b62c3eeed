/*
 * signal_wait.c - the calls that show a thread its pending signals, interposed: the
 * sampling signal is never one of them.
 *
 * Why: each thread's CPU timer queues the sampling signal to it; a thread that blocks
 * it (a thread that blocks every signal: the classic design where one thread sigwaits
 * for the process) keeps it pending, and sigpending would list it, and sigwait,
 * sigwaitinfo, sigtimedwait or a signalfd on a full set would take it: the program
 * would see a signal nobody sent it, instead of the one it waits for.
 * What: the sampling signal is taken out of the set these calls are given (a signalfd's
 * mask included) and out of what sigpending reports, while the agent runs; a wait that
 * unblocks signals for its duration (sigsuspend here; ppoll, pselect and epoll_pwait in
 * entry_points.c) keeps it blocked when the thread blocks it (in its view, or for real),
 * so that a pending one does not end the wait (EINTR) where alone nothing would. Where
 * the kernel allows it the signal is never blocked for real (signal_mask.c); elsewhere
 * it stays pending in such a thread (its timer's overruns are counted, nothing piles
 * up) and is handled when the thread unblocks it. A program that waits for that signal
 * itself, sent by another (kill, sigqueue), no longer receives it through these calls:
 * DD_PROFILING_SIGNAL gives the profiler another. A raw system call (rt_sigtimedwait,
 * rt_sigpending, signalfd4) is not seen (README).
 * Context: any application thread, signal handlers included (sigpending, sigwait are
 * async-signal-safe in POSIX): everything here is, and keeps errno but where the next
 * definition sets it.
 */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>

#include "agent/agent.h"
#include "preload/next_def.h"
#include "common/raw_syscall.h"
#include "preload/signal_wait.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

typedef int (*sigpending_fn)(sigset_t *);
typedef int (*sigwait_fn)(const sigset_t *, int *);
typedef int (*sigwaitinfo_fn)(const sigset_t *, siginfo_t *);
typedef int (*sigtimedwait_fn)(const sigset_t *, siginfo_t *, const struct timespec *);
typedef int (*signalfd_fn)(int, const sigset_t *, int);
typedef int (*sigsuspend_fn)(const sigset_t *);

static sigpending_fn next_sigpending;
static sigwait_fn next_sigwait;
static sigwaitinfo_fn next_sigwaitinfo;
static sigtimedwait_fn next_sigtimedwait;
static signalfd_fn next_signalfd;
static sigsuspend_fn next_sigsuspend;

/* The slots of the next definitions, resolved as the library loads (preload/next_def.h). */
__attribute__((constructor)) static void signal_wait_resolve(void)
{
	next_def((void **)&next_sigpending, "sigpending");
	next_def((void **)&next_sigwait, "sigwait");
	next_def((void **)&next_sigwaitinfo, "sigwaitinfo");
	next_def((void **)&next_sigtimedwait, "sigtimedwait");
	next_def((void **)&next_signalfd, "signalfd");
	next_def((void **)&next_sigsuspend, "sigsuspend");
}

/* async-signal-safe */
const sigset_t *signal_wait_keep_blocked(const sigset_t *m, sigset_t *copy)
{
	int sig = agent_sampling_signal();
	if (!m || sig <= 0)
		return m;
	int saved = errno;
	const sigset_t *out = m;
	sigset_t cur;
	sigemptyset(&cur);
	/* Blocked in the application's view (signal_mask.c), or in the kernel's mask,
	 * read without the interposable calls. */
	if (sigismember(m, sig) == 0 &&
	    ((agent_mask_view() == sig && agent_mask_blocked()) ||
	     (raw_sigmask(SIG_BLOCK, 0, &cur) == 0 && sigismember(&cur, sig) == 1))) {
		*copy = *m;
		sigaddset(copy, sig);
		out = copy;
	}
	errno = saved;
	return out;
}

/* async-signal-safe. set without the sampling signal, in *copy; set itself when it
 * does not hold it (or is NULL: the next definition reports EFAULT). */
static const sigset_t *without_sampling(const sigset_t *set, sigset_t *copy)
{
	int sig = agent_sampling_signal();
	if (!set || sig <= 0)
		return set;
	int saved = errno;
	const sigset_t *out = set;
	if (sigismember(set, sig) == 1) {
		*copy = *set;
		sigdelset(copy, sig);
		out = copy;
	}
	errno = saved;
	return out;
}

static int missing(void)
{
	errno = ENOSYS;
	return -1;
}

/* async-signal-safe */
DDPROF_EXPORT int sigpending(sigset_t *set)
{
	sigpending_fn f = (sigpending_fn)next_def((void **)&next_sigpending, "sigpending");
	if (!f)
		return missing();
	int rc = f(set);
	int sig = agent_sampling_signal();
	if (rc == 0 && sig > 0) {
		int saved = errno;
		sigdelset(set, sig);
		errno = saved;
	}
	return rc;
}

/* async-signal-safe */
DDPROF_EXPORT int sigwait(const sigset_t *set, int *sig)
{
	sigset_t copy;
	sigwait_fn f = (sigwait_fn)next_def((void **)&next_sigwait, "sigwait");
	return f ? f(without_sampling(set, &copy), sig) : ENOSYS;
}

DDPROF_EXPORT int sigwaitinfo(const sigset_t *set, siginfo_t *info)
{
	sigset_t copy;
	sigwaitinfo_fn f = (sigwaitinfo_fn)next_def((void **)&next_sigwaitinfo, "sigwaitinfo");
	return f ? f(without_sampling(set, &copy), info) : missing();
}

DDPROF_EXPORT int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *t)
{
	sigset_t copy;
	sigtimedwait_fn f = (sigtimedwait_fn)next_def((void **)&next_sigtimedwait, "sigtimedwait");
	return f ? f(without_sampling(set, &copy), info, t) : missing();
}

/* async-signal-safe */
DDPROF_EXPORT int sigsuspend(const sigset_t *mask)
{
	sigset_t copy;
	sigsuspend_fn f = (sigsuspend_fn)next_def((void **)&next_sigsuspend, "sigsuspend");
	return f ? f(signal_wait_keep_blocked(mask, &copy)) : missing();
}

DDPROF_EXPORT int signalfd(int fd, const sigset_t *mask, int flags)
{
	sigset_t copy;
	signalfd_fn f = (signalfd_fn)next_def((void **)&next_signalfd, "signalfd");
	return f ? f(fd, without_sampling(mask, &copy), flags) : missing();
}
