/*
 * upload_stats.h - the uploader's counters (struct uploader_stats) and the outcomes of
 * one profile's deliveries.
 *
 * Owns: the counters behind uploader_get_stats, their debug log line, and their reset in
 * a fork child (a new process counts its own uploads).
 * Context: the uploader thread counts, uploader_stop counts a final profile it gave up
 * on, any thread reads (relaxed: independent counters, read only for diagnostics); the
 * fork child handler resets.
 */
#ifndef DDPROF_UPLOADER_UPLOAD_STATS_H
#define DDPROF_UPLOADER_UPLOAD_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uploader/uploader.h"

#define MAX_EXPORTERS 4 /* file, Datadog agent, agentless, Pyroscope */

struct upload_counters {
	_Atomic uint64_t exported, export_failures, serialize_failures, samples, dropped, bytes,
	    serialize_ns, uploads_ok, uploads_failed, uploads_dropped, bytes_sent,
	    short_skipped; /* short processes' only profiles not worth sending */
};
extern struct upload_counters upload_counters;

void upload_stats_count(_Atomic uint64_t *c, uint64_t n);

/* Outcomes of one profile's deliveries, counted once they are all known. */
struct outcomes {
	size_t n, delivered;
	bool ok[MAX_EXPORTERS];
	unsigned failed_attempts[MAX_EXPORTERS];
	uint64_t bytes_sent[MAX_EXPORTERS];
};
void upload_stats_outcome_add(struct outcomes *o, bool ok, unsigned failed_attempts,
			      uint64_t bytes_sent);
/* Adds o's deliveries to the counters. */
void upload_stats_tally(const struct outcomes *o);

void upload_stats_get(struct uploader_stats *out);
/* Fork child. */
void upload_stats_reset(void);
/* One debug line with the counters (nothing below the debug level). */
void upload_stats_log(void);

#endif
