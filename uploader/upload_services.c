/*
 * upload_services.c - the uploader thread's own services (see uploader_internal.h): the
 * period's profile, the perf map's names, the fork children's symbol tables. The
 * others (unwind tables, memory, timers, hooks) are the agent's (host_agent.c).
 * Context: the uploader thread; the control block's fields under up_ctl.lock.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "common/bg_host.h"
#include "common/clock.h"
#include "uploader/upload_cycle.h"
#include "uploader/uploader_internal.h"

/* HTTP retries stop this fraction of a period before the next swap, so a failing
 * intake never delays it (1/20: 3 s of a 60 s period, 50 ms of a 1 s one). */
#define PERIOD_MARGIN_DIVISOR 20

/* When this period's exports must be over: a margin before the next swap. */
static uint64_t period_deadline(uint64_t next, uint64_t period)
{
	return next - period / PERIOD_MARGIN_DIVISOR;
}

/* The upload service's clock: the end of the current period (CLOCK_MONOTONIC). The
 * thread's. */
static uint64_t upload_next;

void upload_services_first(uint64_t due_ns)
{
	upload_next = due_ns;
}

/* The upload service: one period's profile (upload_cycle_run), at the period's end or
 * when a flush asks for it (kicked). */
uint64_t upload_service_run(void *arg, uint64_t now)
{
	struct upload_ctx *ctx = arg;
	uint64_t period = up_cfg->upload_period_ns;
	pthread_mutex_lock(up_ctl.lock);
	uint64_t flush_gen = up_ctl.flush_requested;
	up_ctl.cycling = true;
	pthread_mutex_unlock(up_ctl.lock);
	while (upload_next <= now)
		upload_next += period; /* a missed period is skipped, not made up */
	upload_cycle_run(ctx, false, period_deadline(upload_next, period));
	up_live_sym = ctx->sym; /* read by the fork child handler, once not cycling */
	now = clock_now_ns(CLOCK_MONOTONIC);
	while (upload_next <= now)
		upload_next += period;
	pthread_mutex_lock(up_ctl.lock);
	up_ctl.cycling = false;
	up_ctl.flush_completed = flush_gen;
	pthread_cond_broadcast(&up_ctl.cond); /* uploader_flush */
	pthread_mutex_unlock(up_ctl.lock);
	return upload_next;
}

/* Work on ctx->sym marked warming: a fork meanwhile must not adopt a symbolizer
 * mid-update. Not cycling: an exit with nothing sampled need not wait. */
static void while_warming(struct upload_ctx *ctx, bool jit)
{
	pthread_mutex_lock(up_ctl.lock);
	up_ctl.warming = true;
	pthread_mutex_unlock(up_ctl.lock);
	if (jit)
		upload_cycle_jit(ctx);
	else
		upload_cycle_warm(ctx, &up_exiting);
	up_live_sym = ctx->sym;
	pthread_mutex_lock(up_ctl.lock);
	up_ctl.warming = false;
	pthread_mutex_unlock(up_ctl.lock);
}

/* JIT code's names from the perf map every tenth of a period, a second at most: a JIT
 * that removes its map, or whose only profile is made at exit, keeps them. */
uint64_t jit_service_run(void *arg, uint64_t now)
{
	while_warming(arg, true);
	uint64_t every = up_cfg->upload_period_ns / 10;
	return now + (every < NS_PER_SEC ? every : NS_PER_SEC);
}

/* The symbol tables every fork child needs, read once this process has forked. */
uint64_t warm_service_run(void *arg, uint64_t now)
{
	(void)now;
	while_warming(arg, false);
	return BG_NEVER;
}
