/*
 * process_end.c - _exit and _Exit, interposed: the final profile of a process that ends
 * without exit's handlers.
 *
 * Why: exit() reaches our destructor (preload.c), which sends the final profile. A
 * process that ends with _exit does not: Python's os._exit is how every worker of a
 * multiprocessing pool forked or forked from a fork server ends, and a fork child that
 * must not run its parent's atexit handlers calls it too. Without this, such a process
 * is absent from the profiles: everything it sampled since its last upload, all of it
 * for a worker that lives less than a period.
 * What it does: what the destructor does first (uploader_stop: the final profile, made
 * by the profiler's thread, waited for at most DD_PROFILING_EXIT_FLUSH_TIMEOUT; at once
 * when nothing was sampled), then the next definition's _exit. Skipped where the
 * profiler does no work on the application's behalf (agent_may_work_here): inside one of
 * the application's signal handlers (_exit is async-signal-safe, the final profile is
 * not), a thread of ours, a thread under a seccomp filter it installed. A vfork child (it
 * shares its parent's memory) and a child made without our fork handlers are recognised
 * by uploader_stop, which then writes nothing. exit's own path calls libc's _exit
 * internally, not through this one.
 * This file is async-signal-safe in _exit and _Exit as far as a call from one of the
 * application's handlers goes (atomic and TLS reads, then the next _exit): the final
 * profile is made only outside them. Its constructor runs in normal context (dlsym).
 * Context: any application thread, normal context or its signal handlers.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/agent.h"
#include "common/raw_syscall.h"
#include "uploader/uploader.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

typedef void (*end_fn)(int status);
/* The next definitions (another interposer's, or libc's), resolved by the constructor
 * below: _exit may be called where dlsym may not (a signal handler, a vfork child). */
static end_fn next__exit, next__Exit;

__attribute__((constructor)) static void process_end_resolve(void)
{
	int saved_errno = errno;
	next__exit = (end_fn)dlsym(RTLD_NEXT, "_exit");
	next__Exit = (end_fn)dlsym(RTLD_NEXT, "_Exit");
	errno = saved_errno;
}

/* async-signal-safe (inside an application's handler: see the top) */
__attribute__((noreturn)) static void end_now(end_fn next, int status)
{
	if (agent_running() && agent_may_work_here())
		uploader_stop(); /* keeps errno */
	if (next)
		next(status);
	/* Not resolved (a constructor of another library ended its process before ours
	 * ran): what libc's _exit does. */
	for (;;)
		raw_syscall(SYS_exit_group, status, 0, 0, 0);
}

DDPROF_EXPORT void _exit(int status)
{
	end_now(next__exit, status);
}

DDPROF_EXPORT void _Exit(int status)
{
	end_now(next__Exit, status);
}
