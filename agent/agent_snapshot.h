/*
 * agent_snapshot.h - the seam between the agent and the exporters: what one swap hands
 * the uploader to encode.
 *
 * Owns: taking a snapshot (the red/black swap, the wait until no handler is in the
 * profile swapped out, the start-up credit, the threads' names at that moment) and
 * giving it back (the profile reset for its next turn, the names freed, then the
 * threads that ended forgotten: their names were in this snapshot). The encoder reads
 * the snapshot only, never the agent's live state, and the order of those last steps is
 * the release's, not its callers'.
 * Context: the uploader thread (normal context), one snapshot at a time.
 */
#ifndef DDPROF_AGENT_AGENT_SNAPSHOT_H
#define DDPROF_AGENT_AGENT_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/sample/thread_names.h"
#include "agent/store/profiles.h"

struct agent_snapshot {
	/* The profile swapped out: stacks and values of every kind, read-only until
	 * agent_snapshot_release. */
	const struct profile *profile;
	uint64_t start_ns, end_ns; /* CLOCK_REALTIME: its first possible sample, the swap */
	uint64_t period_ns;	   /* the CPU sampling period */
	uint64_t samples;	   /* samples of every kind in it, dropped ones included */
	uint64_t dropped;	   /* samples whose new stack the memory ceiling refused */
	/* The main thread's CPU before the agent started, in the process's first snapshot
	 * with samples only (0 otherwise), and its tid. */
	uint64_t startup_cpu_ns;
	int32_t startup_tid;
	/* The threads' names at the swap (empty when the profile holds nothing). */
	struct thread_names names;
	uint32_t kinds; /* the profile kinds this process records (PROFILE_KIND_BIT) */
	struct profile_pair *pp_;
	struct profile *p_;
};

/* Which kinds the process records (start-up; CPU is always one). */
void agent_snapshot_set_kinds(uint32_t kinds);

/* Swaps pp at now_ns (CLOCK_REALTIME) and fills s. Returns whether the profile holds
 * anything to encode (samples, or CPU without a sample); either way s is released
 * with agent_snapshot_release. */
bool agent_snapshot_take(struct profile_pair *pp, uint64_t now_ns, struct agent_snapshot *s);

/* After encoding: the profile is reset for its next turn, the names are freed, and the
 * threads that ended since the last snapshot are forgotten. */
void agent_snapshot_release(struct agent_snapshot *s);

#endif
