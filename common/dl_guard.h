/*
 * dl_guard.h - keeps fork() out of the profiler's own dlopen and dlclose calls.
 *
 * Why: glibc's fork does not take the lock of the exit-handler list, which dlclose
 * holds while it runs the unloaded libraries' __cxa_finalize. A fork in that window
 * gives a child that hangs in exit() (a fork storm while the uploader unloads libdw can
 * hit it). The uploader unloads libdw and zlib under this lock, and the fork prepare
 * handler takes it, so a fork waits for at most one dlclose (short: unmapping, no disk
 * or network I/O), and at most 50 ms whatever happens. dlopen too (dl_guard_dlopen): a
 * fork in the middle of the uploader's dlopen gives children whose link map holds a
 * library half relocated, which crash when the child loads it again (a fork storm
 * child can die in dwfl_begin, jumping to an unrelocated GOT slot). The libraries are
 * in the page cache after the first load, so the wait is the loader's memory work;
 * past 50 ms the fork goes ahead without the guard.
 * The lock lives on the fork-local page when there is one (agent/sample/fork_local.h): the
 * parent's unlock after fork copies no page.
 * Context: normal context only; never a signal handler.
 */
#ifndef DDPROF_COMMON_DL_GUARD_H
#define DDPROF_COMMON_DL_GUARD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Start-up, before the fork handlers are registered: where the lock lives (zeroed
 * memory that a fork child finds zeroed again, the fork-local page; NULL keeps the
 * static one), and whether the guard can be used at all. */
void dl_guard_place(pthread_mutex_t *mem);

/* Whether the profiler may unload its libraries: only where the guard works (glibc
 * 2.36 and later; see dl_guard.c). */
bool dl_guard_unload_allowed(void);

/* dlopen under the guard: for every library the profiler loads. */
void *dl_guard_dlopen(const char *file, int mode);
/* Loads dl_guard_dlopen made that succeeded: a relaxed counter, which whoever tracks
 * the loaded modules polls (the application's loads go through the exported wrapper,
 * which tells them itself). */
uint64_t dl_guard_loads(void);

/* dlclose under the guard: for every library the profiler unloads. Returns dlclose's
 * result (-1 if libc's cannot be found). */
int dl_guard_dlclose(void *handle);
/* The same, for a caller that holds the guard (dl_guard_lock). */
int dl_guard_dlclose_locked(void *handle);

/* Returns once every dlopen and dlclose in flight in the process has finished: libc's
 * dlopen of the program itself with RTLD_NOLOAD (and its dlclose) takes the loader's
 * lock, which each dlopen and dlclose holds to its end, and loads nothing. Without the
 * guard: a caller in a library's constructor holds the loader's lock already, and a
 * holder of the guard may be waiting for it in its own dlopen. */
void dl_guard_wait_loader(void);

/* Held around a dlclose, and by a fork's prepare handler; also by a caller that must
 * reset its own state before a fork can copy it (see z_api_unload). */
void dl_guard_lock(void);
void dl_guard_unlock(void);

/* Fork handlers: prepare locks; the parent unlocks; the child starts it afresh. */
void dl_guard_atfork_prepare(void);
void dl_guard_atfork_parent(void);
void dl_guard_atfork_child(void);

#endif
