/*
 * agent_snapshot.c - one swap's snapshot for the exporters (see agent_snapshot.h).
 * Context: the uploader thread (normal context).
 */
#include "agent/agent_snapshot.h"

#include <stdatomic.h>
#include <string.h>

#include "agent/alloc/live_heap.h"
#include "agent/sample/sampler.h"
#include "agent/sample/threads.h"
#include "agent/unwind/unwind.h"
#include "agent/wall/wall_clock.h"
#include "agent/wall/wall_threads.h"
#include "common/clock.h"

/* Relaxed: set at start-up, read by the uploader thread afterwards. */
static _Atomic uint32_t recorded_kinds = PROFILE_KIND_BIT(PROFILE_CPU);

void agent_snapshot_set_kinds(uint32_t kinds)
{
	atomic_store_explicit(&recorded_kinds, kinds | PROFILE_KIND_BIT(PROFILE_CPU),
			      memory_order_relaxed);
}

bool agent_snapshot_take(struct profile_pair *pp, uint64_t now_ns, struct agent_snapshot *s)
{
	memset(s, 0, sizeof(*s));
	/* Returns once no handler is inside the profile swapped out (profiles.h). */
	struct profile *p = profiles_swap(pp, now_ns);
	s->pp_ = pp;
	s->p_ = p;
	s->profile = p;
	/* The live heap: what is alive now, however old (agent/alloc/live_heap.h). */
	live_heap_add_to(p);
	/* The waits in progress, up to now (agent/wall/wall_threads.h). */
	if (wall_clock_on())
		wall_threads_charge_open(p, clock_now_ns(CLOCK_MONOTONIC), WALL_THREADS_OPEN_MIN_NS,
					 unwind_dwarf);
	s->start_ns = profiles_start_ns(p);
	s->end_ns = now_ns;
	s->period_ns = sampler_period_ns();
	s->samples = profiles_samples(p);
	s->dropped = profiles_dropped_samples(p);
	s->kinds = atomic_load_explicit(&recorded_kinds, memory_order_relaxed);
	if (!profiles_has_data(p))
		return false;
	/* In this profile, or lost with it: never twice. */
	s->startup_cpu_ns = profiles_take_startup(pp, &s->startup_tid);
	/* Threads rename themselves after they start: read again now. */
	threads_refresh_names();
	threads_snapshot_names(&s->names);
	return true;
}

void agent_snapshot_release(struct agent_snapshot *s)
{
	thread_names_free(&s->names);
	if (s->p_)
		profiles_reset(s->p_);
	/* Threads that ended are forgotten once a snapshot has taken their names. */
	threads_reap();
	memset(s, 0, sizeof(*s));
}
