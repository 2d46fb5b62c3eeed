/*
 * exec.c - the exec family, interposed: what a process sampled before it replaces its
 * program is uploaded first.
 *
 * Why: exec ends the process's image without exit's handlers; a process that computes,
 * then execs (a shell's `exec`, a wrapper that sets up and hands over, Python's os.execv)
 * would lose everything it sampled since its last upload, all of it for a short one.
 * What: before the next definition runs, uploader_before_exec uploads the current
 * profile and waits for it, at most DD_PROFILING_EXIT_FLUSH_TIMEOUT; at once when nothing
 * was sampled (most fork children that exec: a shell's, make's). If the exec fails, the
 * process goes on, profiled as before (its period was cut in two, nothing is lost).
 * Skipped where the profiler does no work on the application's behalf
 * (agent_may_work_here: an application's signal handler, execve being
 * async-signal-safe; a thread of ours; a thread under a seccomp filter it installed),
 * and by uploader_before_exec in a vfork child, which shares its parent's memory.
 * glibc's execl, execlp, execle, execv and execvp reach execve inside libc, not through
 * an interposable call: each is interposed. posix_spawn, system and popen exec in their
 * child: the parent's profile is not concerned (their child's mask: signal_mask.c).
 * The new program inherits the mask: where the sampling signal is blocked only in the
 * application's view (agent/sample/mask_view.h), it is blocked for real for the exec.
 * Context: application threads, normal context or their signal handlers (then only the
 * next definition runs).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include "agent/agent.h"
#include "preload/next_def.h"
#include "uploader/uploader.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execveat_fn)(int, const char *, char *const[], char *const[], int);

static execve_fn next_execve, next_execvpe;
static execv_fn next_execv, next_execvp;
static fexecve_fn next_fexecve;
static execveat_fn next_execveat;

/* The slots of the next definitions, resolved as the library loads (preload/next_def.h). */
__attribute__((constructor)) static void exec_resolve(void)
{
	next_def((void **)&next_execve, "execve");
	next_def((void **)&next_execvpe, "execvpe");
	next_def((void **)&next_execv, "execv");
	next_def((void **)&next_execvp, "execvp");
	next_def((void **)&next_fexecve, "fexecve");
	next_def((void **)&next_execveat, "execveat");
}

static bool before_exec(void)
{
	if (agent_running() && agent_may_work_here()) {
		int saved = errno;
		uploader_before_exec();
		errno = saved;
	}
	/* Everywhere (a vfork child, a handler too): the new program inherits the mask. */
	return agent_mask_hold(true);
}

/* The exec failed: the process goes on with the mask as it was. */
static int after_failed_exec(bool held, int rc)
{
	int saved = errno;
	agent_mask_let_go(held);
	errno = saved;
	return rc;
}

static int missing(void)
{
	errno = ENOSYS;
	return -1;
}

DDPROF_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	bool held = before_exec();
	execve_fn f = (execve_fn)next_def((void **)&next_execve, "execve");
	return after_failed_exec(held, f ? f(path, argv, envp) : missing());
}

DDPROF_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	bool held = before_exec();
	execve_fn f = (execve_fn)next_def((void **)&next_execvpe, "execvpe");
	return after_failed_exec(held, f ? f(file, argv, envp) : missing());
}

DDPROF_EXPORT int execv(const char *path, char *const argv[])
{
	bool held = before_exec();
	execv_fn f = (execv_fn)next_def((void **)&next_execv, "execv");
	return after_failed_exec(held, f ? f(path, argv) : missing());
}

DDPROF_EXPORT int execvp(const char *file, char *const argv[])
{
	bool held = before_exec();
	execv_fn f = (execv_fn)next_def((void **)&next_execvp, "execvp");
	return after_failed_exec(held, f ? f(file, argv) : missing());
}

DDPROF_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	bool held = before_exec();
	fexecve_fn f = (fexecve_fn)next_def((void **)&next_fexecve, "fexecve");
	return after_failed_exec(held, f ? f(fd, argv, envp) : missing());
}

DDPROF_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			   int flags)
{
	bool held = before_exec();
	execveat_fn f = (execveat_fn)next_def((void **)&next_execveat, "execveat");
	return after_failed_exec(held, f ? f(dirfd, path, argv, envp, flags) : missing());
}

/* The variadic forms gather their arguments, as glibc's do, and go to the vector
 * forms above (whose next definitions are libc's: the flush runs once). */
#define GATHER(arg0, ap, argv, extra)                                                              \
	size_t n = 1;                                                                              \
	va_start(ap, arg0);                                                                        \
	while (va_arg(ap, const char *))                                                           \
		n++;                                                                               \
	va_end(ap);                                                                                \
	const char *argv[n + 1];                                                                   \
	argv[0] = arg0;                                                                            \
	va_start(ap, arg0);                                                                        \
	for (size_t i = 1; i <= n; i++)                                                            \
		argv[i] = va_arg(ap, const char *);                                                \
	extra;                                                                                     \
	va_end(ap)

DDPROF_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	GATHER(arg, ap, argv, (void)0);
	return execv(path, (char *const *)argv);
}

DDPROF_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	GATHER(arg, ap, argv, (void)0);
	return execvp(file, (char *const *)argv);
}

DDPROF_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	char *const *envp;
	GATHER(arg, ap, argv, envp = va_arg(ap, char *const *));
	return execve(path, (char *const *)argv, envp);
}
