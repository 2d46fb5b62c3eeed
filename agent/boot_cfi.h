/*
 * boot_cfi.h - unwind rules of the modules loaded at start-up, read straight from their
 * .eh_frame_hdr, for the walks made before their tables are built.
 *
 * Why: tables are built by the uploader thread, and a process starts that thread only
 * at its first need (uploader.h): its first sample at a safe point, which only a walk
 * complete by CFI can show (agent/hijack.h). Until the tables come, the unwinder asks
 * this module (agent/cfi_lookup.h: a binary search and one FDE decoded per frame, a few
 * microseconds a walk instead of ~0.1), so the first samples walk like later ones.
 *
 * Owns: the list of the modules dl_iterate_phdr reports at start-up (their executable
 * ranges and in-memory CFI), and whether it may still be read. A module of the list
 * can go away only by dlclose: our dlclose wrapper calls boot_cfi_disable before the
 * real one, which waits until no handler reads the list (a grace period, agent/
 * grace.h). Modules loaded later are not in it: a dlopen starts the uploader thread.
 * Context: boot_cfi_init in the constructor; boot_cfi_find in the signal handler
 * (async-signal-safe); boot_cfi_disable from application threads (normal context);
 * boot_cfi_atfork_child in the fork child handler.
 */
#ifndef DDPROF_AGENT_BOOT_CFI_H
#define DDPROF_AGENT_BOOT_CFI_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/cfi_table.h"

/* Normal context, start-up, before any handler runs: records the loaded modules.
 * Returns how many have CFI. */
int boot_cfi_init(void);

/* Whether walks can be complete by the list alone: the executable and the module of
 * libc (where every stack is rooted) have CFI in it, and it was not disabled. */
bool boot_cfi_covers_roots(void);

/* async-signal-safe. The row in effect at runtime pc (exact: the caller subtracts 1
 * from return addresses), false when no module of the list has a usable rule there or
 * the list is disabled. */
bool boot_cfi_find(uintptr_t pc, struct cfi_row *out);

/* Normal context: no handler reads the list after this returns (waits, bounded, for
 * those inside). Idempotent, one relaxed load once disabled. */
void boot_cfi_disable(void);

/* Fork child: handlers that were reading in the parent's other threads do not exist. */
void boot_cfi_atfork_child(void);

struct boot_cfi_stats {
	uint32_t modules;  /* modules in the list */
	uint64_t lookups;  /* boot_cfi_find calls that found a module */
	uint64_t rows;	   /* ... and a usable row */
	bool disabled;
};
void boot_cfi_get_stats(struct boot_cfi_stats *out);

#endif
