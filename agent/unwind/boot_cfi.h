/*
 * boot_cfi.h - unwind rules of the modules loaded at start-up, read straight from their
 * .eh_frame_hdr, for the walks made before their tables are built.
 *
 * Why: tables are built by the uploader thread, which a process starts only at its
 * first need (uploader.h), and then a second late when this module covers the start-up
 * modules (modules_service.c, START_DELAY_BOOT_CFI_NS), so that a short program never pays for
 * tables. Until the tables come, the unwinder asks this module (agent/unwind/cfi_lookup.h:
 * a binary search and one FDE decoded per frame, slower per walk than a table: see
 * BENCHMARKS.md, Handler cost per sample), so the first samples are as complete as
 * later ones.
 *
 * Owns: the list of the modules the program loaded at start-up (their executable ranges
 * and in-memory CFI), immutable once made, so a handler reads it without any grace
 * period. Such modules are never unmapped: glibc keeps the executable's dependencies
 * for the process's life, and libddprof is linked -z nodelete. Which modules those are
 * is the closure of DT_NEEDED from the executable and from us, read from their dynamic
 * sections in memory; a module dlopen'd before our constructor ran (by an earlier
 * constructor, or by libc) may be unloaded at any time: it is left out. Pinning such a
 * module instead (RTLD_NODELETE) would cost every process malloc's set-up at start-up:
 * dlopen allocates even for a module already loaded.
 * Context: boot_cfi_init in the constructor, before any handler runs; boot_cfi_find in
 * the signal handler (async-signal-safe); boot_cfi_covers_roots anywhere, the fork
 * child handler included.
 */
#ifndef DDPROF_AGENT_BOOT_CFI_H
#define DDPROF_AGENT_BOOT_CFI_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/unwind/cfi_table.h"

/* Normal context, start-up, before any handler runs: records the modules loaded at
 * start-up that have CFI. Returns how many it kept. */
int boot_cfi_init(void);

/* Whether walks can be complete by the list alone: the executable and the module of
 * libc (where every stack is rooted) are in it. */
bool boot_cfi_covers_roots(void);

/* async-signal-safe. The row in effect at runtime pc (exact: the caller subtracts 1
 * from return addresses), false when no module of the list has a usable rule there. */
bool boot_cfi_find(uintptr_t pc, struct cfi_row *out);

/* Whether addr lies in an executable segment of the list (a start-up module). Any
 * context. */
bool boot_cfi_holds(uintptr_t addr);

/* Modules in the list, and those left out: not loaded at start-up, or past the list's
 * room. */
void boot_cfi_get_counts(uint32_t *modules, uint32_t *left_out);

#endif
