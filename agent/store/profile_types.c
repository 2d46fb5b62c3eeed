/*
 * profile_types.c - the table of profile types (see profile_types.h).
 * Constant data: read from any context, signal handlers included.
 */
#include "agent/store/profile_types.h"

const struct profile_type profile_types[PROFILE_KINDS] = {
    [PROFILE_CPU] = {.name = "cpu",
		     .nvalues = 2,
		     .values = {{"cpu-samples", "count"}, {"cpu-time", "nanoseconds"}},
		     .period = {"cpu", "nanoseconds"}},
    /* The names Datadog's native profiler and its intake use (Go's heap profile says
     * alloc_objects / alloc_space / inuse_objects / inuse_space). */
    [PROFILE_ALLOC] = {.name = "alloc",
		       .nvalues = 2,
		       .values = {{"alloc-samples", "count"}, {"alloc-space", "bytes"}},
		       .period = {"space", "bytes"}},
    [PROFILE_HEAP] = {.name = "heap",
		      .nvalues = 2,
		      .values = {{"inuse-objects", "count"}, {"inuse-space", "bytes"}},
		      .period = {"space", "bytes"}},
    /* The names Datadog's profilers use for lock contention (the .NET profiler's
     * lock-count and lock-time; Go's mutex profile says contentions / delay). Value 0
     * is an estimate of the contended acquisitions, not a count of samples
     * (agent/lock/lock_sample.h). */
    [PROFILE_LOCK] = {.name = "lock",
		      .nvalues = 2,
		      .values = {{"lock-count", "count"}, {"lock-time", "nanoseconds"}},
		      .period = {"lock-time", "nanoseconds"}},
    /* The names Datadog's profilers use for wall time. A sample's stack ends in its
     * state's synthetic pc (agent/wall/wall_clock.h), the "state" label. */
    [PROFILE_WALL] = {.name = "wall",
		      .nvalues = 2,
		      .values = {{"wall-samples", "count"}, {"wall-time", "nanoseconds"}},
		      .period = {"wall-time", "nanoseconds"}},
};
