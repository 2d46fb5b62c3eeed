/*
 * dl_guard.c - the lock that keeps fork() out of our dlclose calls (see dl_guard.h).
 *
 * Context: normal context only (uploader thread, fork handlers, start-up).
 */
#include "common/dl_guard.h"
#include "common/digits.h"
#include "common/fork_child.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

/* How long fork's prepare handler waits for the guard (see dl_guard_atfork_prepare). */
#define PREPARE_WAIT_NS (50 * 1000000L)

static pthread_mutex_t fallback = PTHREAD_MUTEX_INITIALIZER;
/* Both read by a fork child's handler: on the page it touches anyway (fork_child.h). */
FORK_CHILD_DATA static pthread_mutex_t *lock = &fallback;
/* 0: not checked yet; 1: glibc >= 2.36; 2: older. Relaxed: every thread computes the
 * same value from the same string. */
FORK_CHILD_DATA static _Atomic int glibc_ok;
/* Whether this thread's prepare handler got the guard (written before the fork only). */
static __thread bool held_for_fork __attribute__((tls_model("initial-exec")));

/*
 * Before glibc 2.36 fork runs the prepare handlers holding its atfork lock, which
 * dlclose (__cxa_finalize unregisters the library's fork handlers) also takes: a
 * prepare handler that waited for our dlclose would deadlock with it (glibc bug 24595). There,
 * libraries are never unloaded (dl_guard_unload_allowed) and the guard does nothing.
 */
FORK_CHILD_PATH static bool guard_usable(void)
{
	int ok = atomic_load_explicit(&glibc_ok, memory_order_relaxed);
	if (ok == 0) {
		/* "2.36" (common/digits.h: not strtol, a start-up cost). */
		const char *v = gnu_get_libc_version();
		unsigned major = digits_value(v, &v);
		unsigned minor = *v == '.' ? digits_value(v + 1, NULL) : 0;
		ok = major > 2 || (major == 2 && minor >= 36) ? 1 : 2;
		atomic_store_explicit(&glibc_ok, ok, memory_order_relaxed);
	}
	return ok == 1;
}

void dl_guard_place(pthread_mutex_t *mem)
{
	guard_usable();
	if (!mem)
		return;
	pthread_mutex_init(mem, NULL);
	lock = mem;
}

bool dl_guard_unload_allowed(void)
{
	return guard_usable();
}

/* libc's own dlopen and dlclose, not the library's exported wrappers (preload/): the
 * profiler's loads need none of the application's bookkeeping, and common/ calls no
 * layer above it. dlopen is caller-sensitive: called from here, as the wrapper's stub
 * would have, its caller is this library. */
static void *libc_fn(const char *name, void **slot)
{
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		/* Release pairs with the acquire above: every thread resolves the same. */
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}

static void *libc_dlopen, *libc_dlclose;
/* Relaxed: a hint polled by the host thread's services. */
static _Atomic uint64_t loads;

void *dl_guard_dlopen(const char *file, int mode)
{
	void *(*open_fn)(const char *, int) =
	    (void *(*)(const char *, int))libc_fn("dlopen", &libc_dlopen);
	if (!open_fn)
		return NULL;
	dl_guard_lock();
	void *h = open_fn(file, mode);
	dl_guard_unlock();
	if (h)
		atomic_fetch_add_explicit(&loads, 1, memory_order_relaxed);
	return h;
}

uint64_t dl_guard_loads(void)
{
	return atomic_load_explicit(&loads, memory_order_relaxed);
}

void dl_guard_wait_loader(void)
{
	void *(*open_fn)(const char *, int) =
	    (void *(*)(const char *, int))libc_fn("dlopen", &libc_dlopen);
	int (*close_fn)(void *) = (int (*)(void *))libc_fn("dlclose", &libc_dlclose);
	void *h = open_fn && close_fn ? open_fn(NULL, RTLD_LAZY | RTLD_NOLOAD) : NULL;
	if (h)
		close_fn(h);
}

int dl_guard_dlclose_locked(void *handle)
{
	int (*close_fn)(void *) = (int (*)(void *))libc_fn("dlclose", &libc_dlclose);
	return close_fn ? close_fn(handle) : -1;
}

int dl_guard_dlclose(void *handle)
{
	dl_guard_lock();
	int rc = dl_guard_dlclose_locked(handle);
	dl_guard_unlock();
	return rc;
}

void dl_guard_lock(void)
{
	if (guard_usable())
		pthread_mutex_lock(lock);
}

void dl_guard_unlock(void)
{
	if (guard_usable())
		pthread_mutex_unlock(lock);
}

static bool lock_for_fork(void);

void dl_guard_atfork_prepare(void)
{
	/* Bounded: an application thread that forks from a library constructor or
	 * destructor holds ld.so's lock, which our dlclose may be waiting for; past the
	 * wait the fork goes ahead (our dlclose is then blocked, not half done). */
	bool held = false;
	if (guard_usable())
		held = lock_for_fork();
	/* Written only when it changes: the previous fork left this thread's TLS page
	 * copy-on-write, and a store would fault (and shoot down the TLBs of the other
	 * CPUs running this process's threads). */
	if (held_for_fork != held)
		held_for_fork = held;
}

static bool lock_for_fork(void)
{
	if (pthread_mutex_trylock(lock) == 0)
		return true;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += PREPARE_WAIT_NS;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return pthread_mutex_timedlock(lock, &ts) == 0;
}

void dl_guard_atfork_parent(void)
{
	if (held_for_fork)
		pthread_mutex_unlock(lock);
}

FORK_CHILD_PATH void dl_guard_atfork_child(void)
{
	/* Held by this thread (prepare) or by the parent's uploader thread, which does
	 * not exist here. A placed lock is found zero-filled, that is unlocked, and left
	 * untouched: each page a fork child touches costs it a fault. */
	if (guard_usable() && lock == &fallback)
		pthread_mutex_init(lock, NULL);
}
