/*
 * upload_cycle.c - one period's profile, from the swap to the exporters (see
 * upload_cycle.h).
 * Context: the uploader thread. Memory: one gzip pprof plus one request body per HTTP
 * exporter, in ctx, reused every period. A profile is never kept past its period (no
 * spool): what could not be delivered by then is dropped and counted.
 */
#include "uploader/upload_cycle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent_snapshot.h"
#include "agent/sample/app_signals.h"
#include "agent/unwind/modules.h"
#include "agent/sample/sampler.h"
#include "agent/symbolize/symbolizer.h"
#include "agent/sample/threads.h"
#include "agent/symbolize/dw_memory.h"
#include "common/bg_host.h"
#include "common/clock.h"
#include "common/fork_child.h"
#include "common/log.h"
#include "common/z_api.h"
#include "uploader/pprof.h"
#include "uploader/upload_stats.h"

/* A process's only profile, made at its exit after less CPU than this: named without
 * DWARF, whose decompression would add a noticeable share to so little CPU, all of it
 * in the exit (agent/symbolize/symbolizer.h). */
#define NAMES_ONLY_BELOW_NS (1000ULL * 1000000ULL)

/* CPU time of the uploader thread already put in a profile as "[profiler]". */
FORK_CHILD_DATA static uint64_t profiler_cpu_accounted;
/* Profiles this process made: the first one's number is 0. */
FORK_CHILD_DATA static uint64_t export_seq;

/* Uploader thread: its CPU time since the last call (PC_PROFILER in agent/unwind/unwind.h). */
static uint64_t take_profiler_cpu_ns(void)
{
	uint64_t now = clock_now_ns(CLOCK_THREAD_CPUTIME_ID);
	uint64_t d = now > profiler_cpu_accounted ? now - profiler_cpu_accounted : 0;
	profiler_cpu_accounted = now;
	return d;
}

static void build_comments(const struct config *up_cfg, struct pprof_meta *meta,
			   char buf[][CONFIG_TAG_MAX + 16])
{
	const struct {
		const char *key, *val;
	} tags[] = {
	    {"service", up_cfg->service}, {"env", up_cfg->env}, {"version", up_cfg->version}};
	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
		if (!tags[i].val[0])
			continue;
		snprintf(buf[meta->ncomments], CONFIG_TAG_MAX + 16, "%s:%s", tags[i].key,
			 tags[i].val);
		meta->comments[meta->ncomments] = buf[meta->ncomments];
		meta->ncomments++;
	}
	if (up_cfg->tags[0])
		meta->comments[meta->ncomments++] = up_cfg->tags;
}

/* Uploader thread: one swap, serialize, export. */

/* Libraries dlclose'd since the last upload are gone from /proc/self/maps; their pcs
 * in this profile are still named from the file (agent/unwind/modules.c keeps the list). */
static void note_unloaded_modules(struct symbolizer *sym)
{
	modules_retire_unloaded();
	struct retired_segment segs[32];
	size_t n;
	while ((n = modules_take_retired(segs, 32)) > 0)
		for (size_t i = 0; i < n; i++)
			symbolizer_note_module(sym, segs[i].path, segs[i].start, segs[i].end,
					       segs[i].file_offset);
}

/* Set once the sampling signal was taken from us (check_sampling_signal). */
static _Atomic bool signal_lost;

/* Uploader thread, each period: a program that replaced the sampling handler without
 * libc (a raw rt_sigaction, as the Go runtime does) gets our timers' signals in its own
 * handler, or dies of them under SIG_DFL: sampling stops for good, with one warning. */
static void check_sampling_signal(void)
{
	if (atomic_load_explicit(&signal_lost, memory_order_relaxed) ||
	    app_signals_sampling_intact())
		return;
	atomic_store_explicit(&signal_lost, true, memory_order_relaxed);
	threads_stop_sampling();
	sampler_set_enabled(false);
	log_warn("the application replaced the handler of signal %d without going through "
		 "libc; profiling stops (set DD_PROFILING_SIGNAL to a signal it leaves alone)",
		 sampler_signal());
}

void upload_cycle_jit(struct upload_ctx *ctx)
{
	if (!ctx->sym) {
		/* No symbolizer yet (no profile with samples): made only for a map. */
		char path[64];
		struct stat st;
		snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
		if (stat(path, &st) != 0)
			return;
		ctx->sym = symbolizer_new();
		if (!ctx->sym)
			return;
	}
	uint32_t before = symbolizer_jit_epoch(ctx->sym);
	symbolizer_refresh_jit(ctx->sym);
	if (symbolizer_jit_epoch(ctx->sym) != before)
		jit_splits_record(&ctx->splits, profiles_active(ctx->profiles), ctx->sym, before);
}

bool upload_cycle_signal_lost(void)
{
	return atomic_load_explicit(&signal_lost, memory_order_relaxed);
}

/* A short process's only profile is sent when it holds a CPU sample (10 ms of CPU at
 * the default rate), or at least this many samples of the other kinds (allocation,
 * lock, wall). Below, it holds a few samples from the process's start-up (its first
 * allocation sample, a wall sample of its loader), and writing it costs the process
 * about a millisecond of its exit: most of what it spent. A make -j2 with every
 * profile type on wrote 44 profiles, 26 of them such. */
#define SHORT_WORTH_SAMPLES 4

static bool worth_sending(const struct profile *p)
{
	if (profiles_total(p, PROFILE_CPU, 0) > 0)
		return true;
	uint64_t n = profiles_total(p, PROFILE_ALLOC, 0) + profiles_total(p, PROFILE_LOCK, 0) +
		     profiles_total(p, PROFILE_WALL, 0);
	return n >= SHORT_WORTH_SAMPLES;
}

void upload_cycle_run(struct upload_ctx *ctx, bool final, uint64_t deadline)
{
	check_sampling_signal();
	uint64_t now = clock_now_ns(CLOCK_REALTIME);
	struct agent_snapshot snap;
	bool has_data = agent_snapshot_take(ctx->profiles, now, &snap);
	uint64_t samples = snap.samples;
	/* The records of the profile just swapped out, and the epoch it ends in; the new
	 * active profile starts without records. */
	uint32_t swap_epoch = ctx->sym ? symbolizer_jit_epoch(ctx->sym) : 0;
	struct jit_splits done = ctx->splits;
	jit_splits_init(&ctx->splits);
	/* The only profile of a process that lived briefly (a fork child, a shell command,
	 * a compiler): see worth_sending, and below. */
	bool short_one = final && export_seq == 0 &&
			 clock_now_ns(CLOCK_PROCESS_CPUTIME_ID) < NAMES_ONLY_BELOW_NS;
	if (has_data && short_one && !worth_sending(snap.profile)) {
		has_data = false;
		upload_stats_count(&upload_counters.short_skipped, 1);
		log_debug("exit profile not sent: no CPU sample, fewer than %d others",
			  SHORT_WORTH_SAMPLES);
	}
	if (has_data && !ctx->sym) {
		/* Made at the first profile with samples: a fork child that never has one
		 * (most children of a fork storm) never pays for it. */
		ctx->sym = symbolizer_new();
		if (!ctx->sym)
			upload_stats_count(&upload_counters.serialize_failures, 1);
	}
	if (has_data && ctx->sym) {
		uint64_t t0 = clock_now_ns(CLOCK_MONOTONIC);
		struct pprof_meta meta = {.start_ns = snap.start_ns,
					  .end_ns = snap.end_ns,
					  .period_ns = snap.period_ns,
					  .pid = getpid(),
					  .take_profiler_cpu_ns = take_profiler_cpu_ns,
					  .startup_cpu_ns = snap.startup_cpu_ns,
					  .startup_tid = snap.startup_tid,
					  .thread_names = &snap.names,
					  .kinds = snap.kinds,
					  .jit_splits = &done,
					  .jit_epoch = swap_epoch};
		char comment_buf[3][CONFIG_TAG_MAX + 16];
		build_comments(ctx->cfg, &meta, comment_buf);
		bg_host_run_nested(ctx->host, ctx->between_steps);
		uint64_t t_refresh = clock_now_ns(CLOCK_MONOTONIC);
		symbolizer_refresh(ctx->sym);
		if (symbolizer_jit_epoch(ctx->sym) != swap_epoch)
			jit_splits_record(&ctx->splits, profiles_active(ctx->profiles), ctx->sym,
					  swap_epoch);
		/* A short process's only profile: names without lines, so that its exit
		 * does not wait for DWARF to be decompressed (agent/symbolize/symbolizer.h). */
		symbolizer_set_names_only(ctx->sym, short_one);
		meta.store_small = short_one;
		note_unloaded_modules(ctx->sym);
		struct pprof_stats ps;
		uint64_t t_build = clock_now_ns(CLOCK_MONOTONIC);
		int rc = pprof_build(snap.profile, &meta, ctx->sym, &ctx->gz, &ps);
		uint64_t t_built = clock_now_ns(CLOCK_MONOTONIC);
		bg_host_run_nested(ctx->host, ctx->between_steps);
		/* The libdw sessions' DWARF data, up to 4 MiB decompressed per module
		 * (agent/symbolize/sym_dwarf.c), is given back after every profile: the
		 * pc cache answers what was named before, and only a cycle with new pcs
		 * in a module opens it again (at most once a period). Kept, it would cost
		 * every fork of the process a copy of its page tables (the case of
		 * BENCHMARKS.md's fork after an HTTP upload), and the idle process its memory.
		 * Its big buffers are mmap'd chunks, unmapped when freed. No malloc_trim:
		 * it walks and locks every arena of the application (for long on a large,
		 * fragmented heap), stalling its allocations. At exit there is nothing to
		 * give back for. */
		if (!final) {
			symbolizer_release_dwarf(ctx->sym);
			z_api_unload();
		}
		dw_memory_log();
		atomic_store_explicit(&upload_counters.serialize_ns,
				      clock_now_ns(CLOCK_MONOTONIC) - t0, memory_order_relaxed);
		upload_stats_count(&upload_counters.samples, samples);
		upload_stats_count(&upload_counters.dropped, snap.dropped);
		if (rc < 0) {
			upload_stats_count(&upload_counters.serialize_failures, 1);
			log_warn("cannot serialize the profile: %s", strerror(-rc));
		} else {
			struct export_item item = {ctx->gz.data, ctx->gz.len,  meta.start_ns,  now,
						   meta.pid,	 export_seq++, ctx->runtime_id};
			struct outcomes o = {0};
			export_set_send(&ctx->out, &item, final, deadline, ctx->exit_abort_ns,
					ctx->cfg->upload_timeout_ns, ctx->before_first_tls, &o);
			log_debug("profile %llu: snapshot %.3f ms, maps %.3f ms, encoding %.3f ms "
				  "(symbols %.3f ms), sending %.3f ms",
				  (unsigned long long)item.seq, (double)(t_refresh - t0) / 1e6,
				  (double)(t_build - t_refresh) / 1e6,
				  (double)(t_built - t_build) / 1e6, (double)ps.symbolize_ns / 1e6,
				  (double)(clock_now_ns(CLOCK_MONOTONIC) - t_built) / 1e6);
			/* At exit, uploader_stop may have given up and counted it already. */
			if (!final || ctx->claim_final()) {
				upload_stats_tally(&o);
				if (o.delivered == export_set_count() && o.delivered > 0) {
					upload_stats_count(&upload_counters.exported, 1);
					upload_stats_count(&upload_counters.bytes, ctx->gz.len);
				}
			}
			log_debug("profile %llu: %llu samples, %zu stacks, %zu locations, "
				  "%zu bytes gz, %zu/%zu exporters delivered",
				  (unsigned long long)item.seq, (unsigned long long)samples,
				  ps.samples, ps.locations, ps.gz_bytes, o.delivered,
				  export_set_count());
		}
	}
	agent_snapshot_release(&snap);
	jit_splits_free(&done);
	/* No profile is left with counts from before the swap's epoch. */
	if (ctx->sym)
		symbolizer_jit_prune(ctx->sym, swap_epoch);
	export_set_housekeep();
	upload_stats_log();
}

/* The dynamic loader's (x86-64 psABI): a pc of its code without a lookup. */
extern void *__tls_get_addr(void *);

/*
 * After the process's first fork: reads the symbol tables of the code
 * every fork child runs (the program, libc, the dynamic loader: its fork return, its
 * exit, lazy binding; the process's malloc, which is another library's when one is
 * preloaded: jemalloc, tcmalloc, a sanitizer's runtime; this library's fork and exit
 * handlers; the vdso's clocks) into the symbolizer the children adopt (uploader.c). A
 * child sampled before it exits (a short command, a worker that fails at once) then
 * names its pcs without reading them, so its exit is not spent on tables (see
 * BENCHMARKS.md). The parent would read them at its first upload anyway; this only
 * moves that earlier. Its DWARF is given back at once, as after an upload.
 */
void upload_cycle_warm(struct upload_ctx *ctx, const _Atomic bool *give_up)
{
	if (!ctx->sym) {
		ctx->sym = symbolizer_new();
		if (!ctx->sym)
			return; /* the first profile with samples tries again, and counts it */
	}
	if (symbolizer_refresh(ctx->sym) < 0)
		return;
	/* &malloc: the process's definition, which this library binds to as the program
	 * does (the first in the global scope). */
	const uintptr_t code[] = {(uintptr_t)getauxval(AT_ENTRY),
				  (uintptr_t)&exit,
				  (uintptr_t)&malloc,
				  (uintptr_t)&__tls_get_addr,
				  (uintptr_t)&upload_cycle_warm,
				  (uintptr_t)getauxval(AT_SYSINFO_EHDR)};
	int read = 0;
	for (size_t i = 0; i < sizeof(code) / sizeof(code[0]); i++) {
		if (atomic_load_explicit(give_up, memory_order_relaxed))
			break; /* the exit needs its time: its final profile reads what it needs */
		read += symbolizer_warm(ctx->sym, code[i]) > 0;
	}
	symbolizer_release_dwarf(ctx->sym);
	log_debug("forked: pid %d: %d symbol tables read for the children", (int)getpid(), read);
}

FORK_CHILD_PATH void upload_cycle_atfork_child(void)
{
	export_seq = 0;
	profiler_cpu_accounted = 0; /* the child's thread is a new one */
}
