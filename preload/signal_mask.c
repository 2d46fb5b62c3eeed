/*
 * signal_mask.c - pthread_sigmask and sigprocmask, interposed: a thread that blocks the
 * sampling signal is still sampled, and is told the mask it set; the calls whose child
 * inherits the mask (posix_spawn, posix_spawnp, system, popen) give it the mask the
 * application set.
 *
 * Why: a thread that blocks every signal (one thread sigwaits for the process, the
 * others block everything) would never receive its CPU timer's signal, and all its CPU
 * would go unseen. Where the kernel raises that signal only once a system call has
 * returned (agent/sample/mask_view.h), it interrupts nothing a blocked signal would not,
 * so it stays unblocked in the kernel; the thread's wish is kept in the view's bit and
 * reported by these calls. On other kernels (or before the agent runs) they are the
 * next definitions.
 * What: the sampling signal is taken out of a set that blocks it (SIG_BLOCK,
 * SIG_SETMASK); the old mask returned has it when the view's bit says so; the bit
 * follows each successful call. The same for the older forms (sigblock, sigsetmask,
 * siggetmask, sighold, sigrelse). The exec family is in exec.c.
 * Context: any application thread, signal handlers included (pthread_sigmask and
 * sigprocmask are async-signal-safe in POSIX; everything on their path is). errno is
 * the next definition's.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/agent.h"
#include "preload/next_def.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

typedef int (*mask_fn)(int, const sigset_t *, sigset_t *);
typedef int (*spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			const posix_spawnattr_t *, char *const[], char *const[]);
typedef int (*system_fn)(const char *);
typedef FILE *(*popen_fn)(const char *, const char *);

static mask_fn next_pthread_sigmask, next_sigprocmask;
static spawn_fn next_posix_spawn, next_posix_spawnp;
static system_fn next_system;
static popen_fn next_popen;

/* The slots of the next definitions, resolved as the library loads (preload/next_def.h). */
__attribute__((constructor)) static void signal_mask_resolve(void)
{
	next_def((void **)&next_pthread_sigmask, "pthread_sigmask");
	next_def((void **)&next_sigprocmask, "sigprocmask");
	next_def((void **)&next_posix_spawn, "posix_spawn");
	next_def((void **)&next_posix_spawnp, "posix_spawnp");
	next_def((void **)&next_system, "system");
	next_def((void **)&next_popen, "popen");
}

/* async-signal-safe. f is the next pthread_sigmask or sigprocmask (0 on success, either
 * convention otherwise: nothing changes then). */
static int masked(mask_fn f, int how, const sigset_t *set, sigset_t *old)
{
	int sig = agent_mask_view();
	if (sig <= 0)
		return f(how, set, old);
	bool has = set && sigismember(set, sig) == 1;
	sigset_t copy;
	const sigset_t *pass = set;
	if (has && how != SIG_UNBLOCK) {
		copy = *set;
		sigdelset(&copy, sig);
		pass = &copy;
	}
	bool was = agent_mask_blocked();
	int rc = f(how, pass, old);
	if (rc != 0)
		return rc;
	int saved = errno;
	if (old && was)
		sigaddset(old, sig);
	if (set) {
		if (how == SIG_SETMASK)
			agent_mask_set_blocked(has);
		else if (has)
			agent_mask_set_blocked(how == SIG_BLOCK);
	}
	errno = saved;
	return rc;
}

/* async-signal-safe */
DDPROF_EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
	mask_fn f = (mask_fn)next_def((void **)&next_pthread_sigmask, "pthread_sigmask");
	return f ? masked(f, how, set, old) : ENOSYS;
}

/* async-signal-safe */
DDPROF_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
	mask_fn f = (mask_fn)next_def((void **)&next_sigprocmask, "sigprocmask");
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	return masked(f, how, set, old);
}

/* The BSD and System V forms: glibc's change the mask inside libc, not through an
 * interposable call (dash sets its mask with sigsetmask). Each is the POSIX call it
 * stands for. The BSD masks are the first 32 signals, one bit each. */
static int bsd_mask(int how, int mask)
{
	sigset_t set, old;
	sigemptyset(&set);
	sigemptyset(&old);
	for (int s = 1; s <= 32; s++)
		if ((unsigned)mask & (1u << (s - 1)))
			sigaddset(&set, s);
	if (sigprocmask(how, how == SIG_BLOCK && mask == 0 ? NULL : &set, &old) < 0)
		return -1;
	unsigned out = 0;
	for (int s = 1; s <= 32; s++)
		if (sigismember(&old, s) == 1)
			out |= 1u << (s - 1);
	return (int)out;
}

/* async-signal-safe */
DDPROF_EXPORT int sigblock(int mask)
{
	return bsd_mask(SIG_BLOCK, mask);
}

/* async-signal-safe */
DDPROF_EXPORT int sigsetmask(int mask)
{
	return bsd_mask(SIG_SETMASK, mask);
}

/* async-signal-safe */
DDPROF_EXPORT int siggetmask(void)
{
	return bsd_mask(SIG_BLOCK, 0);
}

static int one_signal(int how, int sig)
{
	sigset_t set;
	sigemptyset(&set);
	if (sigaddset(&set, sig) < 0)
		return -1;
	return sigprocmask(how, &set, NULL);
}

/* async-signal-safe */
DDPROF_EXPORT int sighold(int sig)
{
	return one_signal(SIG_BLOCK, sig);
}

/* async-signal-safe */
DDPROF_EXPORT int sigrelse(int sig)
{
	return one_signal(SIG_UNBLOCK, sig);
}

/* The child starts with the caller's kernel mask (or the attribute's): held for the call
 * where the view blocks the signal. A sample due meanwhile is taken after. */
static int let_go(bool held, int rc)
{
	int saved = errno;
	agent_mask_let_go(held);
	errno = saved;
	return rc;
}

DDPROF_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			      const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	spawn_fn f = (spawn_fn)next_def((void **)&next_posix_spawn, "posix_spawn");
	if (!f)
		return ENOSYS;
	bool held = agent_mask_hold(false);
	return let_go(held, f(pid, path, fa, attr, argv, envp));
}

DDPROF_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			       const posix_spawnattr_t *attr, char *const argv[],
			       char *const envp[])
{
	spawn_fn f = (spawn_fn)next_def((void **)&next_posix_spawnp, "posix_spawnp");
	if (!f)
		return ENOSYS;
	bool held = agent_mask_hold(false);
	return let_go(held, f(pid, file, fa, attr, argv, envp));
}

DDPROF_EXPORT int system(const char *command)
{
	system_fn f = (system_fn)next_def((void **)&next_system, "system");
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	bool held = agent_mask_hold(false);
	return let_go(held, f(command));
}

DDPROF_EXPORT FILE *popen(const char *command, const char *type)
{
	popen_fn f = (popen_fn)next_def((void **)&next_popen, "popen");
	if (!f) {
		errno = ENOSYS;
		return NULL;
	}
	bool held = agent_mask_hold(false);
	FILE *p = f(command, type);
	int saved = errno;
	agent_mask_let_go(held);
	errno = saved;
	return p;
}
