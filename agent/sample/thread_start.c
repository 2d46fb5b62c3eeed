/*
 * thread_start.c - the pool of thread start records (see thread_start.h).
 *
 * Context: normal context, any thread; lock-free (one CAS per slot tried).
 */
#include "agent/sample/thread_start.h"

#include <stdint.h>
#include <stdlib.h>

#include "agent/sample/fork_local.h"

static struct thread_start slots[THREAD_START_SLOTS];
/* Bit i: slots[i] is handed out and not given back yet. One word, on the page a fork
 * child touches anyway (common/fork_child.h), so that the child finds every slot free
 * without reading the slots' own page. */
FORK_CHILD_DATA static _Atomic uint64_t busy_mask;

_Static_assert(THREAD_START_SLOTS == 64, "one bit per slot in busy_mask");

struct thread_start *thread_start_alloc(void)
{
	uint64_t m = atomic_load_explicit(&busy_mask, memory_order_relaxed);
	while (m != UINT64_MAX) {
		unsigned i = (unsigned)__builtin_ctzll(~m);
		/* Acquire pairs with the release in thread_start_release: the thread that had
		 * the slot has copied it before we overwrite it. */
		if (atomic_compare_exchange_weak_explicit(&busy_mask, &m, m | (1ULL << i),
							  memory_order_acquire,
							  memory_order_relaxed))
			return &slots[i];
	}
	return malloc(sizeof(struct thread_start));
}

FORK_CHILD_PATH void thread_start_after_fork(void)
{
	/* Records taken for threads of the parent that had not started: those threads
	 * are not here. */
	atomic_store_explicit(&busy_mask, 0, memory_order_relaxed);
}

bool thread_start_is_slot(const struct thread_start *s)
{
	return s >= slots && s < slots + THREAD_START_SLOTS;
}

void thread_start_release(struct thread_start *s)
{
	if (thread_start_is_slot(s))
		/* Release pairs with the acquire in thread_start_alloc: our copy is done. */
		atomic_fetch_and_explicit(&busy_mask, ~(1ULL << (s - slots)), memory_order_release);
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
