/*
 * wall_threads.h - the waits in progress at a snapshot: the registry of the threads'
 * wall accounts and the host thread's charge of their open waits.
 *
 * Owns: a fixed table of pointers to registered accounts (agent/wall/wall_clock.h) and
 * the pointer the host is reading. A thread blocked across a whole upload period (an
 * idle worker in accept, a thread that waits for a signal) would otherwise show its
 * wait only when it returns, all in one later profile; at each snapshot the host thread
 * charges every open wait up to the snapshot, on the stack unwound from the registers
 * the hook published (the waiting thread's frames do not change while it waits), and
 * the thread charges only the rest when it returns (wall_clock_wait_close): each
 * nanosecond once. A wait that ends while the host unwinds it is left to the thread
 * (the host's CAS fails and its unwind, perhaps of a changed stack, is dropped).
 * Registered: the threads our pthread_create trampoline runs (their end is seen, even
 * through pthread_exit or cancellation) and the main thread. Others (threads that
 * predate the profiler, a fork child's first thread) are charged at their returns only.
 * Memory safety: the host reads a waiting thread's stack only below its top, and a
 * registered thread that ends first leaves the registry and waits until the host is
 * not reading its account (one unwind: microseconds, a spin without system calls), so
 * its stack and TLS stay mapped while the host reads them.
 * Context: begin and end in the thread itself (normal context); charge on the host
 * thread.
 */
#ifndef DDPROF_AGENT_WALL_WALL_THREADS_H
#define DDPROF_AGENT_WALL_WALL_THREADS_H

#include <stdint.h>

#include "agent/store/profiles.h"
#include "agent/unwind/unwind.h"

/* Accounts registered at once, at most; threads past it are charged at their returns
 * only (counted in wall_threads_unregistered). */
#define WALL_THREADS_MAX 8192

/* Normal context, in a thread that starts (or the main thread at start-up), wall
 * profile on: its wall is counted from now and its account registered. */
void wall_threads_begin(void);
/* Normal context, in a thread that ends (the trampoline's cleanup): leaves the registry
 * and waits for the host to be done with its account. */
void wall_threads_end(void);

/* The snapshot's min_open_ns: a thread whose open wait and pending time (its earlier
 * waits the budget refused) add up to less than this is left to charge them itself, to
 * the next profile. Every other waiting thread is charged, however young its wait:
 * threads woken together (a pool on one timeout) are in the same phase of their waits
 * at every snapshot, so a threshold on the wait alone would leave most of a period's
 * wall time out of some profiles and in others. The cost is at most one unwind per
 * waiting thread per upload period. */
#define WALL_THREADS_OPEN_MIN_NS (1000ULL * 1000)

/* The host thread, at a snapshot: charges every registered thread's open wait whose
 * time plus its pending time reach min_open_ns, up to now_ns (CLOCK_MONOTONIC, read
 * before the call) into p
 * (swapped out: no handler writes it), on the stacks unwind returns (unwind_dwarf; a
 * test's own). Returns the waits charged. */
uint32_t wall_threads_charge_open(struct profile *p, uint64_t now_ns, uint64_t min_open_ns,
				  unwinder_fn unwind);

/* The fork child's handler, wall hooks installed, its only thread running: empties
 * the registry of the parent's threads (none of them is in the child) and registers
 * the forking thread again when the parent had it registered: its waits in the child
 * are charged at the child's snapshots, as its parent's were. */
void wall_threads_after_fork_child(void);

/* Counters for diagnostics (relaxed). */
uint64_t wall_threads_unregistered(void);
uint64_t wall_threads_open_charged(void);

#endif
