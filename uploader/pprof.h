/*
 * pprof.h - turns a quiescent profile into a gzip-compressed pprof (profile.proto).
 *
 * Owns: the pprof encoding of CPU profiles: sample types cpu-samples/count and
 * cpu-time/nanoseconds, period type cpu/nanoseconds, labels "thread id", "thread name",
 * "process_id", one Mapping per executable mapping with its build id and has_* flags,
 * one Location per distinct pc with one Line per frame the symbolizer gives it (inlined
 * functions first, line numbers set), Functions per (name, file), synthetic frames
 * "[truncated]", "[unknown]", "[dropped]" (stacks refused past the memory ceiling) and
 * "[incomplete]" (walks that stopped before a root frame).
 * Context: uploader thread only, on a profile no handler can enter (after the swap).
 */
#ifndef DDPROF_UPLOADER_PPROF_H
#define DDPROF_UPLOADER_PPROF_H

#include <stddef.h>
#include <stdint.h>

#include "agent/store/profiles.h"
#include "agent/symbolize/symbolizer.h"
#include "uploader/jit_splits.h"
#include "common/pb.h"

#define PPROF_COMMENTS_MAX 8

struct thread_names; /* agent/sample/threads.h */

/* The largest encoded profile meta->store_small keeps uncompressed. */
#define PPROF_STORE_MAX (64 * 1024)

struct pprof_meta {
	uint64_t start_ns;  /* CLOCK_REALTIME, first possible sample */
	uint64_t end_ns;    /* CLOCK_REALTIME, the swap */
	uint64_t period_ns; /* sampling period */
	int pid;
	/* Free-form comments stored in the profile (e.g. "service:web"); not owned. */
	const char *comments[PPROF_COMMENTS_MAX];
	size_t ncomments;
	/* When set: called once the stacks are symbolized (the costly part), returns the
	 * profiler's CPU time not yet in a profile, added as one "[profiler]" sample. */
	uint64_t (*take_profiler_cpu_ns)(void);
	/* When set: CPU of the thread startup_tid before the profiler started, added as one
	 * "[start-up]" sample (CPU without a sample count). */
	uint64_t startup_cpu_ns;
	int32_t startup_tid;
	/* The threads' names, taken when the profile was swapped out (the encoder reads
	 * no live agent state); NULL: no names. Not owned. */
	const struct thread_names *thread_names;
	/* The kinds whose columns the profile has (PROFILE_KIND_BIT; the CPU's always:
	 * its period is the profile's); samples of other kinds are left out. */
	uint32_t kinds;
	/* JIT epochs (uploader/jit_splits.h): the records of the profile's stacks counted
	 * before a rename (NULL: none), and the epoch the profile was swapped out in, which
	 * names what the records do not hold. Not owned. */
	struct jit_splits *jit_splits;
	uint32_t jit_epoch;
	/* A short process's only profile: up to PPROF_STORE_MAX bytes, its gzip stream is
	 * stored, not compressed, while zlib is not loaded (common/gzip_store.h). */
	bool store_small;
};

struct pprof_stats {
	size_t samples, locations, functions, mappings, raw_bytes, gz_bytes;
	/* Symbolization of this profile's locations: time spent in the symbolizer, pcs it
	 * resolved (ELF/DWARF work) and pcs its cache answered; then its total size. */
	uint64_t symbolize_ns, sym_resolved, sym_cached;
	uint64_t sym_resolve_cpu_ns; /* uploader CPU time of the resolved pcs */
	uint64_t sym_tables_read;    /* module symbol tables read for this profile */
	size_t sym_bytes, sym_cache_bytes;
};

/*
 * Encodes p into out (cleared first), gzip-compressed. sym is refreshed by the caller.
 * Returns 0 or a negative errno; stats (may be NULL) describe the result, and a debug
 * log line gives the symbolization figures.
 */
int pprof_build(const struct profile *p, const struct pprof_meta *meta, struct symbolizer *sym,
		struct pb_buf *out, struct pprof_stats *stats);

/* gzip-compresses in[0..len) into out (appended). 0 or negative errno. */
int pprof_gzip(const uint8_t *in, size_t len, struct pb_buf *out);

#endif
