/*
 * fork_local.h - one page of process-private state that a fork child does not inherit.
 *
 * Owns: a single MADV_WIPEONFORK page handed out at start-up to the
 * state that the fork handlers write in the parent right after fork: the locks taken by
 * the prepare handler. Why: after fork every private page of the parent is shared
 * copy-on-write with the child, and the first write to one of them (unlocking a mutex)
 * copies it and, with another thread of the process running on another CPU, sends a
 * TLB shoot-down IPI: per page, many times what the store itself costs, more still on a
 * virtual machine.
 * The kernel neither copies nor write-protects a wipe-on-fork page at fork, so the
 * parent's unlocks stay plain stores; the child finds the page at the same address,
 * zero-filled: all-zero is PTHREAD_MUTEX_INITIALIZER in glibc, and the child handlers
 * initialize their locks again anyway. (MADV_DONTFORK would need a remap in the child,
 * which can fail; a wiped page cannot.)
 * Context: fork_local_alloc during start-up (constructor, one thread).
 */
#ifndef DDPROF_AGENT_FORK_LOCAL_H
#define DDPROF_AGENT_FORK_LOCAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/fork_child.h"

/* Whether p points into the fork-local page: memory a fork child finds zero-filled. */
bool fork_local_owns(const void *p);

/* Fork child: makes the mutex m usable again (the parent's copy may be held). On the
 * fork-local page it is found zero-filled, that is unlocked, and left untouched (each
 * page a child touches costs it a fault); elsewhere it is re-initialized. */
void fork_local_mutex_after_fork(pthread_mutex_t *m);

/* size zeroed bytes on the fork-local page, or fallback (ordinary memory, the caller's)
 * when it has no room. Start-up only. */
void *fork_local_or(void *fallback, size_t size);

/* Zeroed memory on the fork-local page, or NULL (the page is full or could not be
 * mapped): callers then keep their state in ordinary memory. Start-up only. */
void *fork_local_alloc(size_t size);

#endif
