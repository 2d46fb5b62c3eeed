/*
 * agent_diag.h - the workloads' view of the agent's diagnostics: ddprof_get_diagnostics
 * looked up at run time, since a workload runs with and without the agent preloaded.
 */
#ifndef DDPROF_TEST_WORKLOADS_AGENT_DIAG_H
#define DDPROF_TEST_WORKLOADS_AGENT_DIAG_H

#include <dlfcn.h>
#include <stdbool.h>

#include "../../preload/ddprof.h"

/* Fills *d; false when the agent is not there (or not running). */
static inline bool agent_diagnostics(struct ddprof_diagnostics *d)
{
	int (*get)(struct ddprof_diagnostics *, size_t) =
	    (int (*)(struct ddprof_diagnostics *, size_t))dlsym(RTLD_DEFAULT,
								"ddprof_get_diagnostics");
	return get && get(d, sizeof(*d)) == 0;
}

#endif
