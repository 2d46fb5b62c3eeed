/*
 * credentials.c - setuid, seteuid, setreuid, setresuid and chroot, interposed: a
 * process that gives up root or changes its root directory after start keeps writing
 * its profiles into the output directory given at start.
 *
 * Why: servers started as root switch their workers to an unprivileged user (nginx,
 * apache's prefork, a root parent's setuid children) or lock them in a chroot; the
 * workers then cannot create a file in a root-owned output directory, or reach it by
 * its path. What the directory needs is prepared while the process still can, in its
 * own call, before the next definition runs (uploader/file_spool.h): the directory kept
 * open, and for a drop a spool owned by the new user, which a process still running as
 * root empties into the directory. The setgid family is not interposed: root keeps its
 * rights over files whatever its group; nor capset (a root process keeps owning its
 * directory).
 * Skipped where the profiler does no work on the application's behalf
 * (agent_may_work_here): inside one of the application's signal handlers (setuid is
 * async-signal-safe; the preparation makes directories), a thread of ours, a thread
 * under a seccomp filter it installed. A program that changes its ids with a raw system
 * call (Go's syscall package) is not seen: its profiles that cannot be written are
 * counted (identity.h), not printed.
 * Context: application threads, normal context or their signal handlers (then only the
 * next definition runs).
 */
#include <errno.h>
#include <sys/types.h>
#include <unistd.h>

#include "agent/agent.h"
#include "preload/next_def.h"
#include "uploader/uploader.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

typedef int (*setuid_fn)(uid_t);
typedef int (*setreuid_fn)(uid_t, uid_t);
typedef int (*setresuid_fn)(uid_t, uid_t, uid_t);
typedef int (*chroot_fn)(const char *);

/* The next definitions (preload/next_def.h). */
static setuid_fn next_setuid, next_seteuid;
static setreuid_fn next_setreuid;
static setresuid_fn next_setresuid;
static chroot_fn next_chroot;

/* The slots, resolved as the library loads (preload/next_def.h). */
__attribute__((constructor)) static void credentials_resolve(void)
{
	next_def((void **)&next_setuid, "setuid");
	next_def((void **)&next_seteuid, "seteuid");
	next_def((void **)&next_setreuid, "setreuid");
	next_def((void **)&next_setresuid, "setresuid");
	next_def((void **)&next_chroot, "chroot");
}

/* Before the effective user becomes euid ((uid_t)-1: unchanged). */
static void before_euid(uid_t euid)
{
	if (euid == (uid_t)-1 || !agent_running() || !agent_may_work_here())
		return;
	int saved = errno;
	uploader_before_euid_change(euid);
	errno = saved;
}

static int missing(void)
{
	errno = ENOSYS;
	return -1;
}

DDPROF_EXPORT int setuid(uid_t uid)
{
	before_euid(uid);
	setuid_fn f = (setuid_fn)next_def((void **)&next_setuid, "setuid");
	return f ? f(uid) : missing();
}

DDPROF_EXPORT int seteuid(uid_t euid)
{
	before_euid(euid);
	setuid_fn f = (setuid_fn)next_def((void **)&next_seteuid, "seteuid");
	return f ? f(euid) : missing();
}

DDPROF_EXPORT int setreuid(uid_t ruid, uid_t euid)
{
	before_euid(euid);
	setreuid_fn f = (setreuid_fn)next_def((void **)&next_setreuid, "setreuid");
	return f ? f(ruid, euid) : missing();
}

DDPROF_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid)
{
	before_euid(euid);
	setresuid_fn f = (setresuid_fn)next_def((void **)&next_setresuid, "setresuid");
	return f ? f(ruid, euid, suid) : missing();
}

DDPROF_EXPORT int chroot(const char *path)
{
	if (agent_running() && agent_may_work_here()) {
		int saved = errno;
		uploader_before_chroot();
		errno = saved;
	}
	chroot_fn f = (chroot_fn)next_def((void **)&next_chroot, "chroot");
	return f ? f(path) : missing();
}
