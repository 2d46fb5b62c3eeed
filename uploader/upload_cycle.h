/*
 * upload_cycle.h - one period's profile: swap the red/black pair, name its stacks,
 * encode it (pprof + gzip), hand it to every exporter, reset it; and the symbol tables
 * a forking process readies for its children.
 * Context: the uploader thread only (uploader.c runs it and owns when); the fork child
 * handler resets what a child's new thread starts from.
 */
#ifndef DDPROF_UPLOADER_UPLOAD_CYCLE_H
#define DDPROF_UPLOADER_UPLOAD_CYCLE_H
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/store/profiles.h"
#include "common/config.h"
#include "common/pb.h"
#include "uploader/export_set.h"
#include "uploader/jit_splits.h"

/* What one uploader thread owns (on its stack): a fork child's new thread builds its own
 * and never sees the parent's libcurl handles. */
struct upload_ctx {
	struct symbolizer *sym; /* made at the first profile with samples (or warm) */
	struct pb_buf gz;
	struct export_client out; /* request bodies, the HTTP client (export_set.h) */
	char runtime_id[EXPORT_RUNTIME_ID_MAX];
	/* Set by the thread that runs the cycles: */
	const struct config *cfg;
	struct profile_pair *profiles;
	_Atomic uint64_t *exit_abort_ns; /* HTTP gives up past it (export_set_send) */
	/* The thread's own work between the steps of a long cycle (new threads' timers):
	 * the services of host in the between_steps mask (common/bg_host.h). */
	struct bg_host *host;
	unsigned between_steps;
	/* At exit: whether the thread still counts the final profile's outcome (false:
	 * uploader_stop gave up waiting and counted it). */
	bool (*claim_final)(void);
	/* Called before libcurl is first loaded (export_set_send). */
	void (*before_first_tls)(void);
	/* The active profile's stacks counted before a JIT renamed their code
	 * (uploader/jit_splits.h); zero-filled is empty. */
	struct jit_splits splits;
};

/* One period: swap, and when the old profile holds samples, name, encode and export it
 * (exports retried until deadline, CLOCK_MONOTONIC; final: the exit's one attempt);
 * then reset it and reap the timers of threads that ended. */
void upload_cycle_run(struct upload_ctx *ctx, bool final, uint64_t deadline);
/* Reads the symbol tables of the code every fork child runs into ctx->sym (made if
 * needed), giving up between modules once *give_up is set. */
void upload_cycle_warm(struct upload_ctx *ctx, const _Atomic bool *give_up);
/* Reads what is new in the process's perf map into ctx->sym's JIT names (ctx->sym made
 * first, when the map exists), so that names the map gives while code runs survive the
 * map's removal. One stat when there is no map. */
void upload_cycle_jit(struct upload_ctx *ctx);
/* Whether the sampling signal was taken from us (sampling stopped). Any thread. */
bool upload_cycle_signal_lost(void);
/* Fork child: the next profile is the child's first, its profiler CPU counted afresh. */
void upload_cycle_atfork_child(void);
#endif
