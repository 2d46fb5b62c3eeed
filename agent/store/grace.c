/*
 * grace.c - the writer side of struct grace (see grace.h).
 * Context: normal context only (sleeps).
 */
#include "agent/store/grace.h"

#include <time.h>

#include "common/clock.h"
#include "common/sys_io.h"

#define GRACE_POLL_NS 50000 /* handlers last microseconds: poll every 50 us */

/* Flips the epoch and waits for the slot readers entered before the flip. */
static bool flip_and_drain(struct grace *g, uint64_t deadline)
{
	/* seq_cst: pairs with grace_enter's increment and re-check (Dekker). */
	uint64_t old = atomic_fetch_add_explicit(&g->epoch, 1, memory_order_seq_cst);
	unsigned slot = (unsigned)(old & 1);
	/* seq_cst load completes the Dekker pair; it also acquires grace_exit's
	 * release so the readers' accesses happen before our caller frees. */
	while (atomic_load_explicit(&g->readers[slot], memory_order_seq_cst) != 0) {
		if (clock_now_ns(CLOCK_MONOTONIC) >= deadline)
			return false;
		struct timespec ts = {0, GRACE_POLL_NS};
		sys_nanosleep(&ts, NULL);
	}
	return true;
}

/*
 * Two flips: both slots drained since the call began. One flip would cover only the
 * readers of the current epoch; after an earlier wait timed out, a reader stuck in the
 * other slot may still hold something replaced before that wait (it was leaked, but
 * what it points into, a module record freed by a later wait, must not be freed
 * either). Draining both slots covers every reader that entered before this call,
 * whatever earlier waits did.
 */
bool grace_wait(struct grace *g, uint64_t timeout_ns)
{
	uint64_t deadline = clock_now_ns(CLOCK_MONOTONIC) + timeout_ns;
	return flip_and_drain(g, deadline) && flip_and_drain(g, deadline);
}
