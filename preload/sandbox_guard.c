/*
 * sandbox_guard.c - seccomp filters installed through libc, seen before they apply.
 *
 * Owns: the interposed prctl and syscall. Before the application's
 * prctl(PR_SET_SECCOMP, ...), or syscall(SYS_seccomp, SET_MODE_STRICT or FILTER, ...)
 * (libseccomp's way), or syscall(SYS_prctl, PR_SET_SECCOMP, ...), the profiler is told
 * (agent/sandbox.h): from then on it makes no new kind of system call in the threads
 * the filter covers. A filter for every thread (SECCOMP_FILTER_FLAG_TSYNC) covers the
 * profiler's own thread too: it is stopped first, without a final profile; so is it
 * before strict mode (see before_filter). A raw
 * syscall instruction (not through libc) is not seen: see README, Current limits.
 * Context: application threads, normal context (neither prctl nor syscall is
 * async-signal-safe).
 */
#include <dlfcn.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "agent/sandbox.h"
#include "common/config.h"
#include "common/log.h"
#include "uploader/uploader.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

/* How long a filter for every thread waits for the profiler's thread to stop: an
 * upload in flight gives up at its next poll, well within this. */
#define QUIESCE_TIMEOUT_NS (2ULL * 1000000000ULL)

typedef int (*prctl_fn)(int, unsigned long, unsigned long, unsigned long, unsigned long);
typedef long (*syscall_fn)(long, long, long, long, long, long, long);
static prctl_fn next_prctl;
static syscall_fn next_syscall;

static void *next_fn(const char *name, void **slot)
{
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		/* Release pairs with the acquire above: every thread resolves the same. */
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}

void sandbox_guard_init(void)
{
	next_fn("prctl", (void **)&next_prctl);
	next_fn("syscall", (void **)&next_syscall);
}

/* Before a filter is installed. all_threads: SECCOMP_FILTER_FLAG_TSYNC. strict:
 * strict mode, where a forbidden call kills the calling thread only and a program ends
 * with the exit system call of its last thread: a thread of ours left behind would
 * keep the process alive forever. */
static void before_filter(bool all_threads, bool strict)
{
	int saved = errno;
	if (strict && !uploader_quiesce(QUIESCE_TIMEOUT_NS))
		log_warn("the profiler's thread did not stop within %llu ms before seccomp "
			 "strict mode; the process may outlive its last thread",
			 QUIESCE_TIMEOUT_NS / 1000000ULL);
	if (all_threads) {
		if (!uploader_quiesce(QUIESCE_TIMEOUT_NS))
			log_warn("the profiler's thread did not stop within %llu ms before a "
				 "seccomp filter for every thread; it may be killed by it",
				 QUIESCE_TIMEOUT_NS / 1000000ULL);
		sandbox_enter_process();
	} else {
		sandbox_enter_thread();
	}
	errno = saved;
}

DDPROF_EXPORT int prctl(int option, ...)
{
	va_list ap;
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long);
	unsigned long a3 = va_arg(ap, unsigned long);
	unsigned long a4 = va_arg(ap, unsigned long);
	unsigned long a5 = va_arg(ap, unsigned long);
	va_end(ap);
	prctl_fn f = (prctl_fn)next_fn("prctl", (void **)&next_prctl);
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	if (option == PR_SET_SECCOMP) /* no flags: the calling thread only */
		before_filter(false, a2 == SECCOMP_MODE_STRICT);
	return f(option, a2, a3, a4, a5);
}

DDPROF_EXPORT long syscall(long nr, ...)
{
	va_list ap;
	va_start(ap, nr);
	long a1 = va_arg(ap, long);
	long a2 = va_arg(ap, long);
	long a3 = va_arg(ap, long);
	long a4 = va_arg(ap, long);
	long a5 = va_arg(ap, long);
	long a6 = va_arg(ap, long);
	va_end(ap);
	syscall_fn f = (syscall_fn)next_fn("syscall", (void **)&next_syscall);
	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	if (nr == SYS_seccomp &&
	    (a1 == SECCOMP_SET_MODE_STRICT || a1 == SECCOMP_SET_MODE_FILTER))
		before_filter(a1 == SECCOMP_SET_MODE_FILTER &&
				  ((unsigned long)a2 & SECCOMP_FILTER_FLAG_TSYNC),
			      a1 == SECCOMP_SET_MODE_STRICT);
	else if (nr == SYS_prctl && a1 == PR_SET_SECCOMP)
		before_filter(false, a2 == SECCOMP_MODE_STRICT);
	return f(nr, a1, a2, a3, a4, a5, a6);
}
