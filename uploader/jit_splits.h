/*
 * jit_splits.h - the part of a stack's counts taken before a JIT gave its code's address
 * to other code.
 *
 * Why: a stack is counted under its pcs; a JIT that frees code and writes other code at
 * the same address (a new perf map line for it) makes the same pcs mean another function
 * from then on. Each perf map pass that renames addresses starts an epoch
 * (agent/symbolize/perf_map.h); right after it, every stack of the active profile with a
 * renamed pc gets a record of its values so far, counted in the epoch before. The
 * profile's encoding (uploader/pprof.c) then writes such a stack once per epoch it was
 * counted in, each part named as the map was then: within the JIT service's interval
 * (a tenth of a period) of the sample's time.
 * Context: uploader thread only (the JIT service and the upload cycle run there one at a
 * time); the trie is read while handlers add to it (trie_foreach's contract).
 */
#ifndef DDPROF_UPLOADER_JIT_SPLITS_H
#define DDPROF_UPLOADER_JIT_SPLITS_H

#include <stddef.h>
#include <stdint.h>

#include "agent/store/profiles.h"
#include "agent/store/trie.h"
#include "agent/symbolize/symbolizer.h"

/* Records kept at most per profile: past it, later renames are counted under the names
 * of the epoch they are encoded in (jit_splits.dropped). */
#define JIT_SPLITS_MAX ((size_t)1 << 16)

struct jit_split {
	const struct trie_node *node;
	uint32_t epoch;			     /* the epoch these values were counted in */
	uint64_t values[PROFILE_VALUES_MAX]; /* the node's values then (cumulative) */
};

struct jit_splits {
	const struct profile *profile; /* the profile the records are of */
	struct jit_split *v;	       /* big_alloc */
	size_t n, cap;
	size_t sorted; /* v[0..sorted) is in (node, epoch) order */
	uint64_t dropped;
};

void jit_splits_init(struct jit_splits *s);
void jit_splits_free(struct jit_splits *s);

/* After a perf map pass that moved sym's epoch past before: records, for every stack of
 * active with a pc renamed by that pass, its values counted in before. Records of
 * another profile are dropped first. */
void jit_splits_record(struct jit_splits *s, const struct profile *active,
		       const struct symbolizer *sym, uint32_t before);

/* The records of node in profile p, in epoch order (the first call sorts them): their
 * number and *out; 0 when p is not the records' profile or node has none. */
size_t jit_splits_of(struct jit_splits *s, const struct profile *p, const struct trie_node *node,
		     const struct jit_split **out);

#endif
