/*
 * modules_internal.h - what the module registry's two files share, for them only.
 *
 * Owns: nothing; declares the seam between the registry (agent/unwind/modules.c: the
 * scan, the records, the tables, the published map, the retired list, the stats) and
 * the service that drives it (agent/unwind/modules_service.c: when a rescan runs, and
 * on which thread). Other modules and the tests use agent/unwind/modules.h.
 * Context: normal context; the after-fork and init functions also in a fork child
 * (single-threaded, FORK_CHILD_PATH).
 */
#ifndef DDPROF_AGENT_MODULES_INTERNAL_H
#define DDPROF_AGENT_MODULES_INTERNAL_H

#include <stdbool.h>

#include "agent/unwind/modules.h"

/* Which missing tables a rescan builds. */
enum modules_build {
	MODULES_BUILD_NONE, /* none: the scan and the map only */
	MODULES_BUILD_ALL,  /* every module's */
	/* only those of modules boot CFI does not cover (loaded after start-up): a dlopen
	 * caller's own rescan (modules_load_sync), which leaves the rest to the service */
	MODULES_BUILD_LATE,
};

/* modules.c. Rescans the loaded modules, publishes a map when they changed and builds
 * the missing tables build says one at a time (publishing after each). Sets
 * *changed_out to whether modules came or went. Takes the registry's locks (mod_lock
 * across the builds, which read files): the caller holds no lock of the service's.
 * Returns the number of modules or a negative errno. */
int modules_rescan(bool *changed_out, enum modules_build build);

/* modules_service.c. Whether a dlclose returned that the service has not rescanned for
 * yet (the dirty flag: relaxed, a hint). Any thread. */
bool modules_rescan_pending(void);

/* modules_service.c. The service's condition variable, fresh: from modules_init, at
 * start-up and in a fork child. */
void modules_service_init(void);

/* modules_service.c. A fork child's reset of the service's state: its lock and flags
 * fresh, no thread running, the work deferred to the child's first dlopen/dlclose
 * (modules_start_deferred, which starts it with create). From modules_atfork_child. */
void modules_service_after_fork(modules_thread_create_fn create);

#endif
