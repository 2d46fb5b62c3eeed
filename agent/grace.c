/*
 * grace.c - the writer side of struct grace (see grace.h).
 * Context: normal context only (sleeps).
 */
#include "grace.h"

#include <time.h>

#include "common/clock.h"

#define GRACE_POLL_NS 50000 /* handlers last microseconds: poll every 50 us */

bool grace_wait(struct grace *g, uint64_t timeout_ns)
{
	/* seq_cst: pairs with grace_enter's increment and re-check (Dekker). */
	uint64_t old = atomic_fetch_add_explicit(&g->epoch, 1, memory_order_seq_cst);
	unsigned slot = (unsigned)(old & 1);
	uint64_t deadline = clock_now_ns(CLOCK_MONOTONIC) + timeout_ns;
	/* seq_cst load completes the Dekker pair; it also acquires grace_exit's
	 * release so the readers' accesses happen before our caller frees. */
	while (atomic_load_explicit(&g->readers[slot], memory_order_seq_cst) != 0) {
		if (clock_now_ns(CLOCK_MONOTONIC) >= deadline)
			return false;
		struct timespec ts = {0, GRACE_POLL_NS};
		nanosleep(&ts, NULL);
	}
	return true;
}
