/*
 * grace.h - wait until no signal handler can still hold a pointer we unpublished.
 *
 * Owns: a two-slot reader count indexed by an epoch's parity (the same Dekker scheme as
 * the red/black profile swap). Readers (signal handlers) bracket their use of a
 * published pointer with grace_enter/grace_exit; a writer that replaced the pointer
 * calls grace_wait and may free the old object once it returns true.
 *  - grace_enter: load epoch, count in its slot, re-load epoch; retry if it moved. All
 *    three are seq_cst and pair with grace_wait's epoch increment and slot load: either
 *    the reader sees the new epoch (and then loads the new pointer, published before the
 *    increment), or the writer sees the reader's count and waits for it.
 *  - grace_wait flips twice and drains both slots, so a true return covers every reader
 *    that entered before the call, even after an earlier wait timed out.
 *  - grace_wait is bounded: a reader that never leaves (a thread stopped in its
 *    handler) makes it return false, and the caller leaks the old object instead of
 *    freeing it.
 * Context: enter/exit async-signal-safe (atomics only); wait in normal context, one
 * writer at a time; grace_reset in a fork child (single-threaded).
 */
#ifndef DDPROF_AGENT_GRACE_H
#define DDPROF_AGENT_GRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct grace {
	_Atomic uint64_t epoch;
	_Atomic uint32_t readers[2];
};

/* async-signal-safe. Returns the slot to pass to grace_exit. */
static inline unsigned grace_enter(struct grace *g)
{
	for (;;) {
		uint64_t e = atomic_load_explicit(&g->epoch, memory_order_seq_cst);
		unsigned slot = (unsigned)(e & 1);
		/* seq_cst: pairs with grace_wait's epoch increment (Dekker, see top). */
		atomic_fetch_add_explicit(&g->readers[slot], 1, memory_order_seq_cst);
		if (atomic_load_explicit(&g->epoch, memory_order_seq_cst) == e)
			return slot;
		/* Release: our reads (none yet) happen before the writer's acquire. */
		atomic_fetch_sub_explicit(&g->readers[slot], 1, memory_order_release);
	}
}

/* async-signal-safe. */
static inline void grace_exit(struct grace *g, unsigned slot)
{
	/* Release pairs with grace_wait's acquire load: our reads of the old object
	 * happen before the writer frees it. */
	atomic_fetch_sub_explicit(&g->readers[slot], 1, memory_order_release);
}

/* Normal context, after the replacement pointer was published. Waits at most
 * timeout_ns; false when a reader is still inside (then do not free). */
bool grace_wait(struct grace *g, uint64_t timeout_ns);

/* Fork child: threads that were inside in the parent do not exist here. */
static inline void grace_reset(struct grace *g)
{
	atomic_store_explicit(&g->readers[0], 0, memory_order_relaxed);
	atomic_store_explicit(&g->readers[1], 0, memory_order_relaxed);
}

#endif
