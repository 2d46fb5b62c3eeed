/*
 * dl_guard.h - keeps fork() out of the profiler's own dlopen and dlclose calls.
 *
 * Why: glibc's fork does not take the lock of the exit-handler list, which dlclose
 * holds while it runs the unloaded libraries' __cxa_finalize, nor does it wait for a
 * dlopen to finish updating the link maps (the child resets the loader's lock). A fork
 * in that window gave a child that hung in exit() (seen: a fork storm while the uploader
 * unloaded libdw). The uploader loads and unloads libdw, zlib and libcurl under this
 * lock, and the fork prepare handler takes it, so a fork waits for at most one of those
 * calls (~0.1-0.3 ms; never for network I/O: no upload happens under it), and at most
 * 50 ms whatever happens.
 * The lock lives on the fork-local page when there is one (agent/fork_local.h): the
 * parent's unlock after fork copies no page.
 * Context: normal context only; never a signal handler.
 */
#ifndef DDPROF_COMMON_DL_GUARD_H
#define DDPROF_COMMON_DL_GUARD_H

#include <pthread.h>
#include <stdbool.h>

/* Start-up, before the fork handlers are registered: where the lock lives (zeroed
 * memory; NULL keeps the static one), and whether the guard can be used at all. */
void dl_guard_place(pthread_mutex_t *mem);

/* Whether the profiler may unload its libraries: only where the guard works (glibc
 * 2.36 and later; see dl_guard.c). */
bool dl_guard_unload_allowed(void);

/* Around every dlopen/dlclose of the profiler's own libraries. */
void dl_guard_lock(void);
void dl_guard_unlock(void);

/* Fork handlers: prepare locks; the parent unlocks; the child starts it afresh. */
void dl_guard_atfork_prepare(void);
void dl_guard_atfork_parent(void);
void dl_guard_atfork_child(void);

#endif
