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
};
