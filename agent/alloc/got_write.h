/*
 * got_write.h - reading and writing a loaded module's GOT slots, RELRO pages included.
 *
 * Owns nothing: the slots are found by got_image.h; the callers (got_patch.c for the
 * hooks, agent/symbolize/dw_memory.c for the libraries the profiler loads itself) decide
 * what goes in them and keep the module mapped while they write.
 * Context: normal context, any thread; no allocation, no lock (the callers serialize).
 */
#ifndef DDPROF_AGENT_GOT_WRITE_H
#define DDPROF_AGENT_GOT_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/alloc/got_image.h"

/* One store to make: value at addr (a slot got_image_find_slots gave). */
struct got_write {
	uintptr_t addr, value;
	bool done; /* set by got_write_slots */
};

/* A slot's value, read with one 8-byte access as the loader wrote it. */
uintptr_t got_write_load(uintptr_t addr);

/*
 * Stores w[i].value at w[i].addr, each with one 8-byte release store (a thread calling
 * through the slot sees the old target or the new one, and what was written before the
 * store), setting w[i].done. Slots on d's RELRO pages get their pages made writable
 * around the stores and read-only again (the protection glibc gives them); where that
 * fails they are left as they are. Returns the number stored; *mprotect_failures counts
 * the failed protection changes.
 */
size_t got_write_slots(const struct got_image *d, struct got_write *w, size_t n,
		       uint64_t *mprotect_failures);

#endif
