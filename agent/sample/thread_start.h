/*
 * thread_start.h - what our pthread_create wrapper hands a new thread, without malloc.
 *
 * Owns: a fixed pool of start records (the application's start routine and argument,
 * and the stack size glibc was asked for) taken by the creating thread and given back
 * by the new thread once it copied its record. Why not malloc: a free() in the new
 * thread attaches a malloc arena to it through the tcache, so a thread that never
 * allocates would get one from us, and every arena costs the process at every fork
 * (glibc locks and unlocks each one around it; the unlock after fork copies the arena's
 * page, with a TLB shoot-down when another thread runs).
 * When every record is taken (that many threads created and not started yet), malloc.
 * Context: normal context (pthread_create in any application thread, the new thread's
 * start); lock-free, never a signal handler.
 */
#ifndef DDPROF_AGENT_THREAD_START_H
#define DDPROF_AGENT_THREAD_START_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define THREAD_START_SLOTS 64 /* one bit each in the pool's busy mask */

struct thread_start {
	void *(*fn)(void *);
	void *arg;
	size_t stack_size;    /* what glibc was asked for; 0 = unknown */
	bool sandboxed;	      /* its creator runs under a seccomp filter (agent/sample/sandbox.h) */
	bool sampling_masked; /* its creator blocks the sampling signal (mask_view.h) */
};

/* A free record (a pool slot, else malloc'd); NULL only when malloc fails too. */
struct thread_start *thread_start_alloc(void);
/* Gives s back: the pool slot for the next thread, or frees it. */
void thread_start_release(struct thread_start *s);
/* Fork child (one thread): gives back every record the parent had handed out. */
void thread_start_after_fork(void);
/* Whether s is a pool slot (tests). */
bool thread_start_is_slot(const struct thread_start *s);

/* The stack size glibc allocates for a thread created with attr (NULL: the default);
 * 0 when it cannot be read. */
size_t thread_start_stack_size(const pthread_attr_t *attr);

#endif
