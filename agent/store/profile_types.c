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
};
