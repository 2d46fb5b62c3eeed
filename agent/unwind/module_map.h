/*
 * module_map.h - the published module map: the signal handler's side of the registry.
 *
 * Owns: the pointer to the current immutable map (agent/unwind/modules.h builds them) and the
 * grace period that says when a replaced map, and the tables it pointed to, can be
 * freed. Handlers bracket lookups with module_map_enter/module_map_exit; the module thread
 * publishes a new map and waits out the grace period. Context: module_map_enter/exit and
 * module_map_find are async-signal-safe; publish and grace_wait run on the module thread;
 * after_fork in a fork child (single-threaded).
 */
#ifndef DDPROF_AGENT_MODULE_MAP_H
#define DDPROF_AGENT_MODULE_MAP_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/unwind/modules.h"

/* async-signal-safe. The current map (never NULL once modules_init ran; may be
 * empty); valid until module_map_exit(slot). */
const struct module_map *module_map_enter(unsigned *slot);
void module_map_exit(unsigned slot);

/* async-signal-safe. The segment holding pc, or NULL. */
const struct module_entry *module_map_find(const struct module_map *m, uintptr_t pc);

/* Replaces the current map with m (release: m is fully written). Returns the old map,
 * or NULL when it was the built-in empty one. Free it only after module_map_grace_wait
 * returned true. */
struct module_map *module_map_publish(struct module_map *m);

/* Start-up, before any handler runs: moves the grace counters to the fork-local page
 * (agent/sample/fork_local.h) when it has room. */
void module_map_place_grace(void);

/* Waits until no handler can still hold a map replaced before the call (at most
 * timeout_ns). False on timeout: the caller leaks instead of freeing. */
bool module_map_grace_wait(uint64_t timeout_ns);

/* The current map, for the writer side (never NULL). */
const struct module_map *module_map_current(void);

/* Fork child: handlers of other parent threads are gone. */
void module_map_after_fork(void);

#endif
