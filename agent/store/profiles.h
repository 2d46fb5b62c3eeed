/*
 * profiles.h - the red/black pair of profiles the signal handler writes into.
 *
 * Owns: two profiles (region + stack trie + totals) and which one is active.
 *  - profiles_add (signal handler) enters the active profile by incrementing its
 *    writer count, re-checks that it is still active, inserts, and leaves.
 *  - profiles_swap (uploader) flips the active index, then waits until the old
 *    profile's writer count is zero. From then on no handler can be inside it, so it
 *    can be serialized and reset without locks (invariant 3: nothing lost, nothing
 *    counted twice).
 *  - The enter/re-check on one side and flip/wait on the other form a Dekker pair;
 *    all four accesses are seq_cst so at least one side sees the other.
 *  - Each profile's memory is a region of chunks mapped on demand (agent/store/region.h): the
 *    handler never maps; profiles_grow_if_needed maps more for the active profile when
 *    the handler asked for it, from normal context (the uploader thread at each of its
 *    wake-ups, at least every 2 s while it runs). Until then, or in a process whose
 *    uploader thread has not started, new stacks past the mapped room are dropped and
 *    counted like those past the ceiling.
 * Context: record from signal handlers; swap/reset from the uploader thread;
 * profiles_grow_if_needed from any thread in normal context; init and
 * profiles_reinit_after_fork from the constructor / the fork child (single-threaded).
 */
#ifndef DDPROF_AGENT_STORE_PROFILES_H
#define DDPROF_AGENT_STORE_PROFILES_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/store/profile_types.h"
#include "agent/store/region.h"
#include "agent/store/trie.h"

/* A cache line (x86-64 and most AArch64 cores). */
#define PROFILE_LINE 64

struct profile {
	/* Written by every put into the profile (its enter and leave, its kind's totals),
	 * from every CPU that records at once: one cache line of their own, so that a
	 * put moves one contended line between CPUs, not two, and so that what every put
	 * only reads (the trie's root and region pointer) stays shared in each CPU's cache. */
	alignas(PROFILE_LINE) _Atomic uint32_t writers; /* handlers inside it right now */
	/* Per profile kind (agent/store/profile_types.h), each of its values: what was
	 * recorded, dropped included. */
	_Atomic uint64_t totals[PROFILE_KINDS][PROFILE_VALUES_MAX];
	/* From here on, lines that every put reads (the trie's root and region pointer) and
	 * that are written only for a new stack (inserted or dropped), by growth
	 * (profiles_grow_if_needed) and by the uploader between periods. */
	alignas(PROFILE_LINE) struct stack_trie trie;
	struct region region;
	/* What was dropped: new stacks refused past the ceiling, or while no memory was
	 * mapped for them. */
	_Atomic uint64_t dropped[PROFILE_KINDS][PROFILE_VALUES_MAX];
	uint64_t start_ns; /* CLOCK_REALTIME when it became active; set before the flip */
};
/* The kinds recorded at every sample (CPU, allocations) keep their totals on writers'
 * line; the lock profile's, recorded at most every few milliseconds of waiting (and
 * the heap's, added at the swap), may spill into the next. A new kind or value that
 * no longer fits in two lines needs another layout. */
_Static_assert(offsetof(struct profile, totals) +
		       sizeof(((struct profile *)0)->totals[0]) * (PROFILE_ALLOC + 1) <=
		   PROFILE_LINE,
	       "struct profile: writers and the hot kinds' totals share one cache line");
_Static_assert(offsetof(struct profile, totals) + sizeof(((struct profile *)0)->totals) <=
		   2 * PROFILE_LINE,
	       "struct profile: writers and totals fit in two cache lines");

struct profile_pair {
	struct profile p[2];
	_Atomic unsigned active; /* index into p */
	/* profiles_note_startup: written by the constructor before the uploader thread
	 * exists (its creation orders the write before that thread's reads), then by
	 * that thread only; zero in a fork child. */
	uint64_t startup_cpu_ns;
	int32_t startup_tid;
};

/*
 * Bytes each profile has mapped from the start, before any growth: what a process
 * whose uploader thread never runs until its exit records into (a single-threaded
 * program that computes and calls nothing), ~3000 distinct stacks of 30 frames (a
 * node is 72 bytes plus 8 per frame). Small against RLIMIT_MEMLOCK's default of 8 MiB,
 * which an ordinary user's mlockall(MCL_CURRENT) compares with the whole address space
 * (a small C program maps ~2.5 MiB), and against what mlockall locks.
 */
#define PROFILE_FIRST_CHUNK ((size_t)1 << 20)

/* Maps the first chunk of both profiles; ceiling bounds each. 0 or negative errno
 * (-EBUSY: another pair is live; there is one per process, see profiles_destroy). */
int profiles_init(struct profile_pair *pp, size_t ceiling, uint64_t now_ns);
/* Unmaps both profiles; profiles_init may be called again. */
void profiles_destroy(struct profile_pair *pp);

/* async-signal-safe, lock-free. Adds values (PROFILE_VALUES_MAX of them, the kind's
 * nvalues first: a sample count, then weights; the rest 0) to the stack (kind, tid,
 * pcs) of the active profile. */
void profiles_add(struct profile_pair *pp, enum profile_kind kind, int32_t tid,
		  const uintptr_t *pcs, uint32_t n, const uint64_t *values);

/* async-signal-safe, lock-free. The CPU profile's: samples (0 for CPU a thread used
 * after its last sample, added at its end: agent/sample/sampler.h) of cpu_ns. */
/* Normal context, on a profile no handler writes (swapped out, before it is encoded):
 * adds a sample of kind, mapping memory for it if needed (the live heap's samples, added
 * at each snapshot). */
void profiles_add_to(struct profile *p, enum profile_kind kind, int32_t tid, const uintptr_t *pcs,
		     uint32_t n, const uint64_t *values);

static inline void profiles_record_n(struct profile_pair *pp, int32_t tid, const uintptr_t *pcs,
				     uint32_t n, uint32_t samples, uint64_t cpu_ns)
{
	const uint64_t v[PROFILE_VALUES_MAX] = {samples, cpu_ns};
	profiles_add(pp, PROFILE_CPU, tid, pcs, n, v);
}

/* async-signal-safe, lock-free. One CPU sample of weight cpu_ns. */
static inline void profiles_record(struct profile_pair *pp, int32_t tid, const uintptr_t *pcs,
				   uint32_t n, uint64_t cpu_ns)
{
	profiles_record_n(pp, tid, pcs, n, 1, cpu_ns);
}

/* Value i of kind recorded in p, dropped included (relaxed: exact once p is swapped
 * out). */
static inline uint64_t profiles_total(const struct profile *p, enum profile_kind kind, uint32_t i)
{
	return atomic_load_explicit(&p->totals[kind][i], memory_order_relaxed);
}

/* Value i of kind that p dropped. */
static inline uint64_t profiles_dropped(const struct profile *p, enum profile_kind kind, uint32_t i)
{
	return atomic_load_explicit(&p->dropped[kind][i], memory_order_relaxed);
}

/* Samples recorded in p, of every kind, dropped included (value 0 of each kind). */
static inline uint64_t profiles_samples(const struct profile *p)
{
	uint64_t n = 0;
	for (int k = 0; k < PROFILE_KINDS; k++)
		n += profiles_total(p, (enum profile_kind)k, 0);
	return n;
}

/* Samples p dropped, of every kind. */
static inline uint64_t profiles_dropped_samples(const struct profile *p)
{
	uint64_t n = 0;
	for (int k = 0; k < PROFILE_KINDS; k++)
		n += profiles_dropped(p, (enum profile_kind)k, 0);
	return n;
}

/*
 * Normal context, any thread: maps more memory for the active profile when its handler
 * asked for room (region_wants_room), keeping a third of what it has mapped ahead of
 * what it uses. Cheap when nothing is needed (a few loads, no system call), so it can be
 * called from any normal-context hook; a fork child's pair not used yet is left
 * untouched. 0 or mmap's negative errno.
 */
int profiles_grow_if_needed(struct profile_pair *pp);
/* Whether profiles_grow_if_needed has something to do (a hint: relaxed loads). */
bool profiles_room_wanted(struct profile_pair *pp);

/*
 * Makes the other profile active (its start_ns = now_ns) and returns the previously
 * active one once no handler is inside it. The caller serializes it, then calls
 * profiles_reset before the next swap. Only one thread may swap. Before the flip, the
 * next profile gets as much memory mapped as the active one used.
 */
struct profile *profiles_swap(struct profile_pair *pp, uint64_t now_ns);

/* Whether p holds any value of any kind (the end of a thread is CPU without a sample).
 * Relaxed reads. */
static inline bool profiles_has_data(const struct profile *p)
{
	for (int k = 0; k < PROFILE_KINDS; k++)
		for (uint32_t i = 0; i < PROFILE_VALUES_MAX; i++) /* unused ones stay 0 */
			if (profiles_total(p, (enum profile_kind)k, i) != 0)
				return true;
	return false;
}

/* True when neither profile holds a sample or CPU time (relaxed reads: a sample racing with the
 * call may or may not be seen). Any thread. */
bool profiles_empty(struct profile_pair *pp);

/* Constructor: the main thread (tid) had used cpu_ns of CPU when its timer was armed
 * (the exec, the dynamic loader, earlier constructors). The first profile with samples
 * carries it as "[start-up]" (profiles_take_startup, uploader thread); a process never
 * sampled writes no profile for it, and a fork child does not carry its parent's. */
void profiles_note_startup(struct profile_pair *pp, int32_t tid, uint64_t cpu_ns);
/* Uploader thread: the noted start-up CPU (0 when none or already taken) and its tid. */
uint64_t profiles_take_startup(struct profile_pair *pp, int32_t *tid);

/* The active profile, for reading its counters (diagnostics). */
struct profile *profiles_active(struct profile_pair *pp);

/* p's start (CLOCK_REALTIME). A fork child's first profile starts at 0 (its fork
 * handler reads no clock): it gets the process's start time, within a clock tick
 * (common/process_start.h). Uploader thread only (it reads /proc; it is the only
 * writer of start_ns besides the fork handler). */
uint64_t profiles_start_ns(struct profile *p);
/* Sets p's start to ns if it has none yet. Uploader thread only. */
void profiles_start_if_unset(struct profile *p, uint64_t ns);

/* Empties p, and unmaps the chunks of its memory that its period did not reach.
 * Precondition: p is not active and no handler is inside it. */
void profiles_reset(struct profile *p);

/* In a fork child: handlers that were inside a profile in other parent threads no
 * longer exist; forget both profiles' contents and writer counts. A pair on the
 * fork-local page (zero-filled in the child) is only marked: the first call of any
 * function above sets it up (the handler's too), so that a child that never uses it
 * never touches its page. */
void profiles_reinit_after_fork(struct profile_pair *pp, uint64_t now_ns);

#endif
