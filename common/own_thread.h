/*
 * own_thread.h - the profiler's own threads: their creation, their stacks (mapped by
 * us), and how a thread knows it is one of them.
 *
 * Why not glibc's stack cache: a thread created with a cached stack gets the very
 * descriptor (the pthread_t value) of a thread that ended before. In a fork child,
 * glibc moves the parent's other threads, ended or not, into that cache; an
 * application that joins such a handle in the child (a library destructor joining its
 * own thread, undefined but harmless when the process is alone) would then wait for our
 * thread forever. A stack we map ourselves carries a descriptor no application handle
 * can name.
 *
 * own_thread_create is the one way the profiler starts a thread: on its own stack, with
 * every signal blocked (the application's signals go to its own threads, and no
 * profiling signal lands in ours), known as ours from its first instruction
 * (own_thread_is_self: the entry points and the sampler leave our threads alone).
 *
 * Context: normal context only (the thread that creates or joins). A fork child may
 * reuse the stack of a thread of ours that is not in it (own_thread_stack_after_fork).
 */
#ifndef DDPROF_COMMON_OWN_THREAD_H
#define DDPROF_COMMON_OWN_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct own_stack {
	void *base;	     /* mapping, guard page first; NULL when none */
	size_t bytes;	     /* whole mapping */
	bool in_use;	     /* a thread of this process runs on it (or was not joined) */
	void *(*fn)(void *); /* what the thread on it runs (own_thread_create) */
	void *arg;
};

/* Sets attr to run on s (mapped now, or reused when free). 0 or -errno. */
int own_thread_stack_attr(struct own_stack *s, pthread_attr_t *attr, size_t bytes);

/* The thread on it was joined (or never started): the stack may serve again. */
void own_thread_stack_release(struct own_stack *s);

/* libc's pthread_create, or one that behaves like it (never an application's wrapper,
 * which may take locks of its own). */
typedef int (*own_thread_create_fn)(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
				    void *arg);

/* Starts fn(arg) on a thread of its own, on s (bytes: the stack's size), every signal
 * blocked in it, created by create. 0, or a negative errno (s is then free again). */
int own_thread_create(struct own_stack *s, size_t bytes, own_thread_create_fn create, pthread_t *t,
		      void *(*fn)(void *), void *arg);

/* Set in every thread own_thread_create starts, before its function runs. Initial-exec:
 * read by signal handlers, which must not allocate TLS lazily. */
extern __thread bool own_thread_self __attribute__((tls_model("initial-exec")));

/* async-signal-safe. Whether the calling thread is one own_thread_create started. */
static inline bool own_thread_is_self(void)
{
	return own_thread_self;
}

/* Fork child: the thread that ran on it is not in this process. No system call. */
static inline void own_thread_stack_after_fork(struct own_stack *s)
{
	s->in_use = false;
}

#endif
