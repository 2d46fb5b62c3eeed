/*
 * libwrapcreate.c - a library that wraps pthread_create under a mutex of its own, as
 * thread-pool and instrumentation libraries do; wrap_lock/wrap_unlock let its program
 * hold that mutex. Linked into wrap_create (Makefile).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>

static pthread_mutex_t wrap_mutex = PTHREAD_MUTEX_INITIALIZER;
static int created;

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	create_fn next = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
	pthread_mutex_lock(&wrap_mutex);
	int rc = next(t, attr, fn, arg);
	created += rc == 0;
	pthread_mutex_unlock(&wrap_mutex);
	return rc;
}

void wrap_lock(void)
{
	pthread_mutex_lock(&wrap_mutex);
}

void wrap_unlock(void)
{
	pthread_mutex_unlock(&wrap_mutex);
}

int wrap_created(void)
{
	return created;
}
