/*
 * thread_start.c - the pool of thread start records (see thread_start.h).
 *
 * Context: normal context, any thread; lock-free (one CAS per slot tried).
 */
#include "agent/thread_start.h"

#include <stdlib.h>

#include "agent/fork_local.h"

static struct thread_start slots[THREAD_START_SLOTS];

struct thread_start *thread_start_alloc(void)
{
	for (size_t i = 0; i < THREAD_START_SLOTS; i++) {
		bool expected = false;
		/* Acquire pairs with the release in thread_start_release: the thread that had
		 * the slot has copied it before we overwrite it. */
		if (!atomic_load_explicit(&slots[i].busy, memory_order_relaxed) &&
		    atomic_compare_exchange_strong_explicit(&slots[i].busy, &expected, true,
							    memory_order_acquire,
							    memory_order_relaxed))
			return &slots[i];
	}
	struct thread_start *s = malloc(sizeof(*s));
	if (s)
		atomic_init(&s->busy, false);
	return s;
}

FORK_CHILD_PATH void thread_start_after_fork(void)
{
	/* Records taken for threads of the parent that had not started: those threads
	 * are not here. Read first: a slot page written for nothing costs a fault. */
	for (size_t i = 0; i < THREAD_START_SLOTS; i++)
		if (atomic_load_explicit(&slots[i].busy, memory_order_relaxed))
			atomic_store_explicit(&slots[i].busy, false, memory_order_relaxed);
}

bool thread_start_is_slot(const struct thread_start *s)
{
	return s >= slots && s < slots + THREAD_START_SLOTS;
}

void thread_start_release(struct thread_start *s)
{
	if (thread_start_is_slot(s))
		/* Release pairs with the acquire in thread_start_alloc: our copy is done. */
		atomic_store_explicit(&s->busy, false, memory_order_release);
	else
		free(s);
}

size_t thread_start_stack_size(const pthread_attr_t *attr)
{
	size_t size = 0;
	if (attr)
		return pthread_attr_getstacksize(attr, &size) == 0 ? size : 0;
	pthread_attr_t def;
	if (pthread_getattr_default_np(&def) != 0)
		return 0;
	if (pthread_attr_getstacksize(&def, &size) != 0)
		size = 0;
	pthread_attr_destroy(&def);
	return size;
}
