/*
 * sandbox_guard.c - seccomp filters and namespace changes made through libc, seen
 * before they apply.
 *
 * Owns: the interposed prctl, syscall, unshare and setns.
 *  - Before a call that installs a seccomp filter (prctl(PR_SET_SECCOMP, ...), or
 *    syscall(SYS_seccomp, ...), libseccomp's way, or syscall(SYS_prctl, ...)), the
 *    profiler is told (agent/agent.h, agent/sample/sandbox.h): from then on it makes
 *    no new kind of system call in the threads the filter covers. A filter for every
 *    thread (SECCOMP_FILTER_FLAG_TSYNC) covers the profiler's own thread too: it is
 *    stopped first, without a final profile; so is it before strict mode, where a
 *    forbidden call kills the calling thread only and a program ends with its last
 *    thread's exit (a thread of ours left behind would keep it alive). Calls that
 *    cannot install one (libseccomp's probes: strict mode with flags or arguments, a
 *    filter without a program) change nothing; a call that fails gives everything back.
 *  - unshare and setns into a user or mount namespace (and the flags that need a
 *    single-threaded process) fail with EINVAL in a process with a second thread: when
 *    the profiler's thread is the only other one, it is stopped for the call and starts
 *    again at the next need.
 * With the agent off every call passes straight through. prctl and syscall make the
 * system call inline: no dlsym, so a call before our
 * constructor (jemalloc's bootstrap uses syscall()) or from a signal handler is safe. A
 * raw syscall instruction (not through libc) is not seen: see README, Current limits.
 * Context: application threads, normal context.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/log.h"
#include "common/raw_syscall.h"
#include "preload/ddprof.h"
#include "uploader/uploader.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

/* How long a call waits for the profiler's thread to stop: an upload in flight gives
 * up at its next poll, well within this. */
#define QUIESCE_TIMEOUT_NS (2ULL * 1000000000ULL)
/* unshare flags (and setns namespace types) the kernel refuses to a multi-threaded
 * process (a user namespace; a mount namespace or CLONE_FS need an unshared fs). */
#define NEEDS_ONE_THREAD (CLONE_NEWUSER | CLONE_NEWNS | CLONE_FS | CLONE_SIGHAND | CLONE_VM)

/* libc's syscall() convention on a raw result. */
static long libc_result(long r)
{
	if (r < 0 && r > -4096) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

struct filter_call {
	bool installs;	  /* the call can install a filter */
	bool all_threads; /* SECCOMP_FILTER_FLAG_TSYNC */
	bool strict;
};

static struct filter_call classify_seccomp(long op, unsigned long flags, long args)
{
	struct filter_call c = {false, false, false};
	if (op == SECCOMP_SET_MODE_STRICT && flags == 0 && args == 0)
		c.installs = c.strict = true;
	else if (op == SECCOMP_SET_MODE_FILTER && args != 0)
		c.installs = true, c.all_threads = flags & SECCOMP_FILTER_FLAG_TSYNC;
	return c;
}

static struct filter_call classify_prctl(unsigned long mode, unsigned long prog)
{
	struct filter_call c = {false, false, false};
	if (mode == SECCOMP_MODE_STRICT)
		c.installs = c.strict = true;
	else if (mode == SECCOMP_MODE_FILTER && prog != 0)
		c.installs = true;
	return c;
}

struct before {
	struct sandbox_state state;
	bool quiesced;
};

/* Before a filter may be installed: what to give back if it is not. */
static struct before before_filter(struct filter_call c)
{
	int saved = errno;
	struct before b = {agent_sandbox_save(), false};
	if (c.strict || c.all_threads) {
		b.quiesced = true;
		if (!uploader_quiesce(QUIESCE_TIMEOUT_NS))
			log_warn("the profiler's thread did not stop within %llu ms before a "
				 "seccomp filter for every thread or strict mode",
				 QUIESCE_TIMEOUT_NS / 1000000ULL);
	}
	agent_sandbox_enter(c.all_threads);
	errno = saved;
	return b;
}

static long after_filter(const struct before *b, long rc)
{
	if (rc < 0) {
		agent_sandbox_restore(b->state);
		if (b->quiesced)
			uploader_resume();
	}
	return rc;
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
	struct filter_call c = {false, false, false};
	if (option == PR_SET_SECCOMP && ddprof_status() == 0)
		c = classify_prctl(a2, a3);
	struct before b;
	if (c.installs)
		b = before_filter(c);
	long rc = raw_syscall6(SYS_prctl, option, (long)a2, (long)a3, (long)a4, (long)a5, 0);
	if (c.installs)
		after_filter(&b, rc);
	return (int)libc_result(rc);
}

/* The process's threads (field 20 of /proc/self/stat, counted after the command's
 * closing parenthesis), or -1 if it cannot be read. */
static long num_threads(void)
{
	char buf[512];
	int fd = (int)raw_syscall(SYS_open, (long)"/proc/self/stat", O_RDONLY | O_CLOEXEC, 0, 0);
	if (fd < 0)
		return -1;
	long n = raw_syscall(SYS_read, fd, (long)buf, sizeof(buf) - 1, 0);
	raw_syscall(SYS_close, fd, 0, 0, 0);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	const char *p = buf + n;
	while (p > buf && *p != ')')
		p--;
	int field = 2;
	for (; *p && field < 20; p++)
		field += *p == ' ';
	if (field != 20)
		return -1;
	long threads = 0;
	for (; *p >= '0' && *p <= '9'; p++)
		threads = threads * 10 + (*p - '0');
	return threads;
}

/* Whether the profiler's thread is the only thread besides the caller. */
static bool ours_is_the_other_thread(void)
{
	return uploader_thread_started() && num_threads() == 2;
}

/* A joined thread has cleared its id but may still be in the thread group for a moment
 * (the kernel counts it until the end of its exit), and the call would then see two
 * threads: wait until it is gone, 1 ms at a time, at most LAST_THREAD_WAIT_MS. */
#define LAST_THREAD_WAIT_MS 500
static void wait_single_threaded(void)
{
	for (int ms = 0; ms < LAST_THREAD_WAIT_MS && num_threads() > 1; ms++) {
		struct timespec ts = {0, 1000000};
		raw_syscall(SYS_nanosleep, (long)&ts, 0, 0, 0);
	}
}

/* Around a call that needs a single-threaded process: the profiler's thread stops for
 * it when it is the only other one. Returns whether it was stopped. */
static bool before_one_thread_call(unsigned long flags)
{
	if (!(flags & NEEDS_ONE_THREAD) || ddprof_status() != 0 || !ours_is_the_other_thread())
		return false;
	int saved = errno;
	bool gone = uploader_quiesce(QUIESCE_TIMEOUT_NS);
	if (gone)
		wait_single_threaded();
	errno = saved;
	if (!gone)
		uploader_resume();
	return gone;
}

static long one_thread_call(long nr, long a1, long a2, unsigned long flags)
{
	bool stopped = before_one_thread_call(flags);
	long rc = raw_syscall(nr, a1, a2, 0, 0);
	if (stopped)
		uploader_resume();
	return rc;
}

DDPROF_EXPORT int unshare(int flags)
{
	return (int)libc_result(one_thread_call(SYS_unshare, flags, 0, (unsigned)flags));
}

DDPROF_EXPORT int setns(int fd, int nstype)
{
	/* 0: any type (it may be a user namespace). */
	unsigned long need = nstype == 0 ? NEEDS_ONE_THREAD : (unsigned)nstype;
	return (int)libc_result(one_thread_call(SYS_setns, fd, nstype, need));
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
	struct filter_call c = {false, false, false};
	if (ddprof_status() != 0)
		return libc_result(raw_syscall6(nr, a1, a2, a3, a4, a5, a6));
	if (nr == SYS_seccomp)
		c = classify_seccomp(a1, (unsigned long)a2, a3);
	else if (nr == SYS_prctl && a1 == PR_SET_SECCOMP)
		c = classify_prctl((unsigned long)a2, (unsigned long)a3);
	else if (nr == SYS_unshare)
		return libc_result(one_thread_call(nr, a1, 0, (unsigned long)a1));
	else if (nr == SYS_setns)
		return libc_result(
		    one_thread_call(nr, a1, a2, a2 == 0 ? NEEDS_ONE_THREAD : (unsigned long)a2));
	struct before b;
	if (c.installs)
		b = before_filter(c);
	long rc = raw_syscall6(nr, a1, a2, a3, a4, a5, a6);
	if (c.installs)
		after_filter(&b, rc);
	return libc_result(rc);
}
