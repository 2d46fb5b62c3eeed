/*
 * stack_bounds.h - where a thread's stack is, for threads we did not create.
 *
 * Owns: a snapshot of the process's writable private mappings (from /proc/self/maps),
 * taken in normal context, searched by the signal handler to find the mapping that
 * holds an interrupted sp. Threads created through our pthread_create and the main
 * thread get their bounds directly; this serves threads that existed before the agent
 * started.
 * Context: stack_bounds_snapshot on the constructor / uploader thread;
 * stack_ranges_lookup (agent/unwind/stack_ranges.h) in the signal handler.
 */
#ifndef DDPROF_AGENT_STACK_BOUNDS_H
#define DDPROF_AGENT_STACK_BOUNDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct stack_range {
	uintptr_t lo;
	uintptr_t hi;
};

/* Takes a new snapshot. Returns the number of ranges or a negative errno. Only one
 * thread may call it at a time. */
int stack_bounds_snapshot(void);

/* Bounds of the calling thread's stack (normal context): pthread attributes for
 * threads, __libc_stack_end and RLIMIT_STACK for the main thread. stack_size: the size
 * the thread's creator asked glibc for (0: unknown); with it the bounds of a thread
 * whose stack glibc allocated are found without pthread_getattr_np, which mallocs (and
 * so gives a thread that never allocates a malloc arena of its own, which every later
 * fork locks, unlocks and copies) and makes a system call. */
bool stack_bounds_self(bool is_main, size_t stack_size, struct stack_range *out);

#endif
