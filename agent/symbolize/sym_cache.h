/*
 * sym_cache.h - one module's resolved pcs: address -> frame list, kept across uploads.
 *
 * Owns: an open-addressing map from a module-relative lookup address to a run of
 * frames in one growing array, and the strings of those frames (interned: a function
 * or file name is stored once per module however many pcs use it). A hit costs one
 * hash probe and no DWARF work; that is what makes steady-state serialization cheap.
 *  - Values pack (first frame index << SYM_CACHE_COUNT_BITS | frame count); a pc that
 *    could not be named is cached too, with count 0, so it is not looked up again.
 *  - Nothing is removed one by one: the owner bounds memory by clearing a whole cache
 *    (sym_cache_clear) between uploads, when the symbolizer's budget is exceeded.
 * Context: uploader thread only (and unit tests); malloc.
 */
#ifndef DDPROF_AGENT_SYM_CACHE_H
#define DDPROF_AGENT_SYM_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/symbolize/symbolizer.h"
#include "common/strtab.h"
#include "common/u64map.h"

struct sym_cache {
	struct u64map index; /* lookup address + 1 -> packed (first, count) */
	struct sym_frame *frames;
	size_t nframes, cap;
	struct strtab strings;
};

void sym_cache_init(struct sym_cache *c);
void sym_cache_free(struct sym_cache *c);
/* Forgets every entry and frees the memory (strings handed out become invalid). */
void sym_cache_clear(struct sym_cache *c);

/* True when addr is cached; *frames (owned by the cache) and *n are set. */
bool sym_cache_get(const struct sym_cache *c, uint64_t addr, const struct sym_frame **frames,
		   size_t *n);

/*
 * Caches frames[0..n) for addr, copying their strings (NULL stays NULL). *stored (may be
 * NULL) receives the cached copy. 0 or -ENOMEM (nothing cached then).
 */
int sym_cache_put(struct sym_cache *c, uint64_t addr, const struct sym_frame *frames, size_t n,
		  const struct sym_frame **stored);

/* Entries (addresses) cached. */
size_t sym_cache_entries(const struct sym_cache *c);
/* Heap bytes held. */
size_t sym_cache_bytes(const struct sym_cache *c);

#endif
