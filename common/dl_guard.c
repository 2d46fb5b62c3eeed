/*
 * dl_guard.c - the lock that keeps fork() out of our dlopen/dlclose (see dl_guard.h).
 *
 * Context: normal context only (uploader thread, fork handlers, start-up).
 */
#include "common/dl_guard.h"

static pthread_mutex_t fallback = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t *lock = &fallback;

void dl_guard_place(pthread_mutex_t *mem)
{
	if (!mem)
		return;
	pthread_mutex_init(mem, NULL);
	lock = mem;
}

void dl_guard_lock(void)
{
	pthread_mutex_lock(lock);
}

void dl_guard_unlock(void)
{
	pthread_mutex_unlock(lock);
}

void dl_guard_atfork_prepare(void)
{
	pthread_mutex_lock(lock);
}

void dl_guard_atfork_parent(void)
{
	pthread_mutex_unlock(lock);
}

void dl_guard_atfork_child(void)
{
	/* Held by this thread (prepare); no other thread exists here to need it. */
	pthread_mutex_init(lock, NULL);
}
