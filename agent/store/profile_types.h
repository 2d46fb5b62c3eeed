/*
 * profile_types.h - the kinds of samples the store keeps, as data.
 *
 * Owns: the table of profile types. Each has a kind (its index: part of every stack's
 * key in the trie, so a stack is kept per type) and the values each of its samples
 * carries, in pprof's terms (sample types: a type and a unit). Value 0 of every type is
 * its count of samples; the others are weights. A new profile type is a new row here
 * plus a source that records with its kind (profiles_add, agent/store/profiles.h): the
 * store, the red/black swap and the encoder need nothing else.
 * Context: any; the table is constant (read by signal handlers).
 */
#ifndef DDPROF_AGENT_STORE_PROFILE_TYPES_H
#define DDPROF_AGENT_STORE_PROFILE_TYPES_H

#include <stdint.h>

/* The most values a type's samples carry. */
#define PROFILE_VALUES_MAX 2

enum profile_kind {
	PROFILE_CPU,   /* sampled on each thread's CPU clock (agent/sample/sampler.h) */
	PROFILE_ALLOC, /* allocations, sampled by bytes (agent/alloc/alloc_sample.h) */
	PROFILE_HEAP,  /* sampled allocations still alive at the swap (agent/alloc/) */
	PROFILE_LOCK,  /* contended lock acquisitions, sampled by wait (agent/lock/) */
	PROFILE_WALL,  /* every thread's wall time, running or waiting (agent/wall/) */
	PROFILE_KINDS
};

/* One bit per kind (a set of kinds: which columns a profile has). */
#define PROFILE_KIND_BIT(k) (1u << (k))

struct sample_type {
	const char *type; /* pprof's sample type, e.g. "cpu-time" */
	const char *unit; /* "count", "nanoseconds", "bytes" */
};

struct profile_type {
	const char *name; /* "cpu" */
	uint32_t nvalues; /* values[0] is the sample count */
	struct sample_type values[PROFILE_VALUES_MAX];
	struct sample_type period; /* pprof's period type */
};

extern const struct profile_type profile_types[PROFILE_KINDS];

#endif
