/*
 * uploader.c - the uploader thread (see uploader.h).
 *
 * Context: the uploader thread runs upload_cycle; start/stop/flush are called from
 * application threads and only touch the control block under ctl.lock, which is never
 * held across serialization or I/O (so a fork's prepare handler can take it at once).
 * Everything the thread needs for one profile (symbolizer, buffers, the libcurl client,
 * the runtime id) lives in a struct upload_ctx on its own stack: a fork child's new
 * thread builds its own and never sees the parent's libcurl handles.
 * Memory for pending uploads: one gzip pprof plus one request body per HTTP exporter,
 * reused every period. A profile is never kept past its period (no spool): what could
 * not be delivered by then is dropped and counted.
 * Exit flush: one attempt per HTTP exporter, except for an exporter known not to answer
 * (its last request timed out, or the parent was waiting on it when this process was
 * forked): the final profile is then dropped at once rather than holding up the exit.
 */
#include "uploader.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent/fork_local.h"
#include "agent/app_signals.h"
#include "agent/dw_api.h"
#include "agent/modules.h"
#include "agent/sandbox.h"
#include "agent/symbolizer.h"
#include "agent/threads.h"
#include "agent/sampler.h"
#include "common/asan.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/own_stack.h"
#include "common/z_api.h"
#include "uploader/export_datadog.h"
#include "uploader/export_set.h"
#include "uploader/http_send.h"
#include "uploader/pprof.h"
#include "uploader/upload_stats.h"

#define UPLOADER_THREAD_NAME "ddprof-upload"
/* HTTP retries stop this fraction of a period before the next swap, so a failing
 * intake never delays it (1/20: 3 s of a 60 s period, 50 ms of a 1 s one). */
#define PERIOD_MARGIN_DIVISOR 20
/* At exit the thread gives up this long before uploader_stop stops waiting, so that it
 * has let go of libcurl by the time the process tears down (capped at half the flush
 * timeout). */
#define EXIT_GRACE_NS (100ULL * 1000000ULL)
/* A process's only profile, made at its exit after less CPU than this: named without
 * DWARF (~50 ms saved on its exit, 5% of this much CPU). */
#define NAMES_ONLY_BELOW_NS (1000ULL * 1000000ULL)

struct control {
	pthread_mutex_t *lock; /* on the fork-local page when there is one (fork_local.h):
				* fork prepare takes it, the parent handler releases it */
	pthread_cond_t cond;   /* CLOCK_MONOTONIC */
	bool running;
	bool stop;		  /* final upload, then exit */
	bool done;		  /* thread has finished */
	bool final_counted;	  /* the thread has counted the final profile's outcome */
	bool abandoned;		  /* uploader_stop gave up waiting and counted the drop itself */
	bool cycling;		  /* the thread is serializing or exporting (lock released) */
	uint64_t flush_requested; /* generation counters */
	uint64_t flush_completed;
	bool modules_kick; /* modules_service has work (agent/modules.h) */
	bool threads_kick; /* threads_service has work (agent/threads.h) */
	bool warm_asked;   /* this process forked: its first fork asked for warm_for_children */
	bool warm_kick;	   /* ... and the thread has not done it yet */
	bool warming;	   /* the thread is in warm_for_children (lock released) */
	bool quiesce;	   /* exit without a final profile (uploader_quiesce) */
	bool joinable;	   /* thread is this process's thread, not joined yet */
	pthread_t thread;
	struct own_stack stack; /* the thread's (common/own_stack.h) */
};

/* What one uploader thread owns (on its stack). */
struct upload_ctx {
	struct symbolizer *sym;
	struct pb_buf gz;
	struct export_client out; /* request bodies, the HTTP client (export_set.h) */
	char runtime_id[EXPORT_RUNTIME_ID_MAX];
};

static pthread_mutex_t ctl_lock_fallback;
FORK_CHILD_DATA static struct control ctl = {.lock = &ctl_lock_fallback};
/* ctl.running, for uploader_stop to read without the lock. */
FORK_CHILD_DATA static _Atomic bool thread_spawned;
/*
 * The running thread's symbolizer, and the one a fork child inherits. A symbolizer is
 * plain memory plus libdw state over shared read-only file descriptors and mappings,
 * all copied by fork. When the parent's thread was idle at the fork (not cycling: the
 * forking thread holds ctl.lock from prepare, so the thread is parked in its wait), the
 * copy is consistent and the child's thread adopts it: a pre-fork server's workers
 * start with the master's caches (no libdw reload, no DWARF work for pcs the master
 * already named). Otherwise the child starts a fresh one.
 */
FORK_CHILD_DATA static struct symbolizer *live_sym;
FORK_CHILD_DATA static struct symbolizer *inherited_sym;
static const struct config *up_cfg;
/* What a fork child's exit reads: on the page it touches anyway (common/fork_child.h);
 * the exit timeout copied there by uploader_start, not read from the pages of cfg. */
FORK_CHILD_DATA static struct profile_pair *up_profiles;
FORK_CHILD_DATA static uint64_t exit_flush_timeout_ns = CONFIG_DEFAULT_EXIT_FLUSH_TIMEOUT_NS;
static thread_create_fn up_create;
FORK_CHILD_DATA static uint64_t export_seq;
/* CLOCK_MONOTONIC time at which the thread must give up on HTTP (exit flush); 0 = none.
 * Set by uploader_stop, read by http_send_all between polls. */
FORK_CHILD_DATA static _Atomic uint64_t exit_abort_ns;
/* The process is exiting (stop_thread): warm_for_children gives up between modules.
 * Relaxed: a hint, read without the lock by the thread while it warms. */
FORK_CHILD_DATA static _Atomic bool exiting;
static bool curl_atexit_registered;
/* This process is to have an uploader thread (uploader_start made one): a fork child
 * inherits the wish, not the thread. */
FORK_CHILD_DATA static bool uploader_wanted;
/* A fork child's thread is not started yet: it starts at the first need (see
 * start_deferred). Set by the fork child handler, cleared under ctl.lock. With the pid
 * it was set for: in a grandchild, before our child handler ran (another library's
 * handler may create a thread), the flag is the parent's, and ctl.lock is held. */
FORK_CHILD_DATA static _Atomic bool spawn_pending;
/* The process this state belongs to: the one that ran uploader_start, or the fork
 * child whose handler ran. */
FORK_CHILD_DATA static pid_t owner_pid;
/* This process is a fork child of the one that started the profiler. */
FORK_CHILD_DATA static bool forked;
FORK_CHILD_DATA static pid_t spawn_pending_pid;

static void start_deferred(bool may_wait);

/* threads.h's kick: a thread registered for its timer while this thread sleeps long. */
static void threads_wake(void)
{
	pthread_mutex_lock(ctl.lock);
	ctl.threads_kick = true;
	pthread_cond_broadcast(&ctl.cond);
	pthread_mutex_unlock(ctl.lock);
}

bool uploader_modules_wake(bool start)
{
	/* A dlopen or dlclose: the new tables are built by the thread, so start it. */
	if (start)
		start_deferred(false);
	/* Not waiting, as start_deferred(false): a dlopen from another library's fork
	 * handler must not wait for the lock our prepare handler holds in this thread. The
	 * kick is then lost; the thread's periodic rescan finds the module. */
	if (pthread_mutex_trylock(ctl.lock) != 0)
		return atomic_load_explicit(&thread_spawned, memory_order_relaxed) ||
		       atomic_load_explicit(&spawn_pending, memory_order_relaxed);
	bool hosting = (ctl.running && !ctl.done) ||
		       (atomic_load_explicit(&spawn_pending, memory_order_relaxed) && !ctl.stop);
	ctl.modules_kick = true;
	pthread_cond_broadcast(&ctl.cond);
	pthread_mutex_unlock(ctl.lock);
	return hosting;
}

void uploader_place_lock(void)
{
	static bool placed;
	if (placed)
		return;
	placed = true;
	pthread_mutex_t *lock = fork_local_alloc(sizeof(*lock));
	if (lock) {
		pthread_mutex_init(lock, NULL);
		ctl.lock = lock;
	}
}

/* CPU time of the uploader thread already put in a profile as "[profiler]". */
FORK_CHILD_DATA static uint64_t profiler_cpu_accounted;

/* Uploader thread: its CPU time since the last call (PC_PROFILER in agent/unwind.h). */
static uint64_t take_profiler_cpu_ns(void)
{
	uint64_t now = clock_now_ns(CLOCK_THREAD_CPUTIME_ID);
	uint64_t d = now > profiler_cpu_accounted ? now - profiler_cpu_accounted : 0;
	profiler_cpu_accounted = now;
	return d;
}

FORK_CHILD_PATH static void control_init(void)
{
	/* At start-up too: a placed lock was initialized by uploader_place_lock. */
	fork_local_mutex_after_fork(ctl.lock);
	/* An assignment, not pthread_cond_init: waits name their clock (clockwait), and a
	 * fork child touches no code page of libc's for it (common/raw_syscall.h). */
	pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
	ctl.cond = fresh;
	ctl.running = ctl.stop = ctl.done = false;
	atomic_store_explicit(&thread_spawned, false, memory_order_relaxed);
	ctl.final_counted = ctl.abandoned = ctl.cycling = false;
	ctl.flush_requested = ctl.flush_completed = 0;
	ctl.modules_kick = false;
	ctl.threads_kick = false;
	/* A child warms at its own first fork (if it did not adopt a warmed symbolizer, its
	 * thread reads what its children need then): nothing of the parent's request. */
	ctl.warm_asked = ctl.warm_kick = ctl.warming = false;
	ctl.quiesce = ctl.joinable = false;
	own_stack_after_fork(&ctl.stack);
	atomic_store_explicit(&exiting, false, memory_order_relaxed);
}

static void build_comments(struct pprof_meta *meta, char buf[][CONFIG_TAG_MAX + 16])
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

FORK_CHILD_PATH static void uploader_atexit(void)
{
	uploader_stop();
}

/* libcurl's TLS library registers its exit cleanup (atexit) when libcurl initializes;
 * exit handlers run last-registered first, and the destructors (_dl_fini) only after
 * every handler registered once main had started: registering ours now makes the exit
 * flush happen while TLS still works. */
static void register_atexit_after_curl(void)
{
	if (curl_atexit_registered)
		return;
	curl_atexit_registered = true;
	if (atexit(uploader_atexit) != 0)
		log_debug("atexit failed; the exit flush runs from the destructor");
}

/* The final profile's outcome is counted once: by the thread, or by uploader_stop if
 * it gave up waiting first. Returns false when uploader_stop already counted it. */
static bool claim_final_count(void)
{
	pthread_mutex_lock(ctl.lock);
	bool mine = !ctl.abandoned;
	ctl.final_counted = true;
	pthread_mutex_unlock(ctl.lock);
	return mine;
}

/* Uploader thread: one swap, serialize, export. */

/* Libraries dlclose'd since the last upload are gone from /proc/self/maps; their pcs
 * in this profile are still named from the file (agent/modules.c keeps the list). */
static void note_unloaded_modules(struct symbolizer *sym)
{
	struct retired_segment segs[32];
	size_t n;
	while ((n = modules_take_retired(segs, 32)) > 0)
		for (size_t i = 0; i < n; i++)
			symbolizer_note_module(sym, segs[i].path, segs[i].start, segs[i].end,
					       segs[i].file_offset);
}

static void service_threads_while_busy(void);

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

bool uploader_signal_lost(void)
{
	return atomic_load_explicit(&signal_lost, memory_order_relaxed);
}

static void upload_cycle(struct upload_ctx *ctx, bool final, uint64_t deadline)
{
	check_sampling_signal();
	uint64_t now = clock_now_ns(CLOCK_REALTIME);
	struct profile *p = profiles_swap(up_profiles, now);
	uint64_t samples = atomic_load_explicit(&p->samples, memory_order_relaxed);
	bool has_data = profile_has_data(p);
	if (has_data && !ctx->sym) {
		/* Made at the first profile with samples: a fork child that never has one
		 * (most children of a fork storm) never pays for it. */
		ctx->sym = symbolizer_new();
		if (!ctx->sym)
			upload_count(&upload_counters.serialize_failures, 1);
		live_sym = ctx->sym; /* read by the fork child handler only */
	}
	if (has_data && ctx->sym) {
		uint64_t t0 = clock_now_ns(CLOCK_MONOTONIC);
		struct pprof_meta meta = {.start_ns = profile_start_ns(p),
					  .end_ns = now,
					  .period_ns = sampler_period_ns(),
					  .pid = getpid(),
					  .take_profiler_cpu_ns = take_profiler_cpu_ns};
		/* In this profile, or lost with it: never twice. */
		meta.startup_cpu_ns = profiles_take_startup(up_profiles, &meta.startup_tid);
		char comment_buf[3][CONFIG_TAG_MAX + 16];
		build_comments(&meta, comment_buf);
		service_threads_while_busy();
		symbolizer_refresh(ctx->sym);
		/* The only profile of a process that lived briefly (a fork child, a shell
		 * command): names without lines, so that its exit does not wait ~50 ms for
		 * DWARF (agent/symbolizer.h). */
		symbolizer_set_names_only(ctx->sym, final && export_seq == 0 &&
							clock_now_ns(CLOCK_PROCESS_CPUTIME_ID) <
							    NAMES_ONLY_BELOW_NS);
		note_unloaded_modules(ctx->sym);
		threads_refresh_names();
		struct pprof_stats ps;
		int rc = pprof_build(p, &meta, ctx->sym, &ctx->gz, &ps);
		service_threads_while_busy();
		/* The libdw sessions' DWARF data, up to 4 MiB decompressed per module
		 * (agent/sym_dwarf.c), is given back after every profile: the
		 * pc cache answers what was named before, and only a cycle with new pcs
		 * in a module opens it again (tens of ms, once a period). Kept, it would
		 * cost every fork of the process a copy of its page tables (a fork after
		 * an upload ran at 0.32x of the run without the agent with it, 0.60x
		 * without, A/B), and the idle process its memory. Its big buffers are
		 * mmap'd chunks, unmapped when freed. No malloc_trim: it walks and locks
		 * every arena of the application (~100 ms on a fragmented 1 GiB heap,
		 * measured), stalling its allocations. At exit there is nothing to give
		 * back for. */
		if (!final) {
			symbolizer_release_dwarf(ctx->sym);
			z_api_unload();
		}
		atomic_store_explicit(&upload_counters.serialize_ns,
				      clock_now_ns(CLOCK_MONOTONIC) - t0, memory_order_relaxed);
		upload_count(&upload_counters.samples, samples);
		upload_count(&upload_counters.dropped,
			     atomic_load_explicit(&p->dropped_samples, memory_order_relaxed));
		if (rc < 0) {
			upload_count(&upload_counters.serialize_failures, 1);
			log_warn("cannot serialize the profile: %s", strerror(-rc));
		} else {
			struct export_item item = {ctx->gz.data, ctx->gz.len,  meta.start_ns,  now,
						   meta.pid,	 export_seq++, ctx->runtime_id};
			struct outcomes o = {0};
			export_set_send(&ctx->out, &item, final, deadline, &exit_abort_ns,
					up_cfg->upload_timeout_ns, register_atexit_after_curl, &o);
			/* At exit, uploader_stop may have given up and counted it already. */
			if (!final || claim_final_count()) {
				outcomes_tally(&o);
				if (o.delivered == export_set_count() && o.delivered > 0) {
					upload_count(&upload_counters.exported, 1);
					upload_count(&upload_counters.bytes, ctx->gz.len);
				}
			}
			log_debug("profile %llu: %llu samples, %zu stacks, %zu locations, "
				  "%zu bytes gz, %zu/%zu exporters delivered",
				  (unsigned long long)item.seq, (unsigned long long)samples,
				  ps.samples, ps.locations, ps.gz_bytes, o.delivered,
				  export_set_count());
		}
	}
	profile_reset(p);
	/* After serialization: names of threads that ended this period were still
	 * needed above. */
	threads_reap();
	upload_stats_log();
}

/* When this period's exports must be over: a margin before the next swap. */

static uint64_t period_deadline(uint64_t next, uint64_t period)
{
	return next - period / PERIOD_MARGIN_DIVISOR;
}

/* Uploader thread: when modules_service and threads_service next have work
 * (CLOCK_MONOTONIC; UINT64_MAX: nothing due), set when the thread starts. Not
 * initialized here: .data shares the page of FORK_CHILD_DATA (common/fork_child.ld),
 * where this thread's frequent writes would copy the page after every fork. */
static uint64_t modules_next;
static uint64_t threads_next;

/* Uploader thread, between the steps of an upload (serializing a big profile takes tens
 * of milliseconds) and during its network waits: new threads' timers that are due. The
 * CPU a thread uses before its timer is armed goes to its first sample's stack: the
 * sooner, the closer to where it was spent. */
static void service_threads_while_busy(void)
{
	pthread_mutex_lock(ctl.lock);
	bool kicked = ctl.threads_kick && !ctl.stop;
	bool stopping = ctl.stop;
	ctl.threads_kick &= !kicked;
	pthread_mutex_unlock(ctl.lock);
	if (!stopping &&
	    (kicked || threads_service_wanted() || clock_now_ns(CLOCK_MONOTONIC) >= threads_next))
		threads_next = threads_service(clock_now_ns(CLOCK_MONOTONIC));
}

/* Uploader thread, while an upload waits on the network: the module and thread work
 * that is due, so a library loaded meanwhile gets its unwind table and a new thread its
 * timer without waiting for the upload to end. Not at exit (ctl.stop): the exit flush
 * must not wait for it. */
static void service_while_busy(void)
{
	pthread_mutex_lock(ctl.lock);
	bool stopping = ctl.stop;
	bool modules = ctl.modules_kick && !stopping;
	ctl.modules_kick &= !modules;
	pthread_mutex_unlock(ctl.lock);
	if (stopping)
		return;
	profiles_grow_if_needed(up_profiles);
	if (modules || clock_now_ns(CLOCK_MONOTONIC) >= modules_next)
		modules_next = modules_service(clock_now_ns(CLOCK_MONOTONIC));
	service_threads_while_busy();
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* The dynamic loader's (x86-64 psABI): a pc of its code without a lookup. */
extern void *__tls_get_addr(void *);

/*
 * Uploader thread, after the process's first fork: reads the symbol tables of the code
 * every fork child runs (the program, libc, the dynamic loader: its fork return, its
 * exit, lazy binding; this library's fork and exit handlers; the vdso's clocks) into the
 * symbolizer the children adopt (see live_sym). A child sampled before it exits (a
 * short command, a worker that fails at once) then names its pcs without reading them:
 * its exit took 7.1-7.6 ms, 3.5-3.9 ms with the adopted tables (0.7 ms without the
 * agent; libc6-dbg installed: libc's table is 13k symbols from the debug file). The
 * parent would read them at its first upload anyway; this only moves that earlier. Its
 * DWARF is given back at once, as after an upload.
 */
static void warm_for_children(struct upload_ctx *ctx)
{
	if (!ctx->sym) {
		ctx->sym = symbolizer_new();
		if (!ctx->sym)
			return; /* the first profile with samples tries again, and counts it */
		live_sym = ctx->sym;
	}
	if (symbolizer_refresh(ctx->sym) < 0)
		return;
	const uintptr_t code[] = {(uintptr_t)getauxval(AT_ENTRY), (uintptr_t)&exit,
				  (uintptr_t)&__tls_get_addr, (uintptr_t)&warm_for_children,
				  (uintptr_t)getauxval(AT_SYSINFO_EHDR)};
	int read = 0;
	for (size_t i = 0; i < sizeof(code) / sizeof(code[0]); i++) {
		if (atomic_load_explicit(&exiting, memory_order_relaxed))
			break; /* the exit needs its time: its final profile reads what it needs */
		read += symbolizer_warm(ctx->sym, code[i]) > 0;
	}
	symbolizer_release_dwarf(ctx->sym);
	log_debug("forked: pid %d: %d symbol tables read for the children", (int)getpid(), read);
}

static void *uploader_main(void *arg)
{
	(void)arg;
	asan_thread_forget_stack(); /* common/asan.h */
	sampler_thread_mark_internal();
	prctl(PR_SET_NAME, UPLOADER_THREAD_NAME);
	export_set_make(up_cfg, ctl.lock);
	/* A fork child of a parent that had built no table (its thread had not started):
	 * this thread builds them, and runs the seccomp check for guarded reads. */
	if (!modules_have_tables())
		modules_start_deferred();
	struct upload_ctx ctx;
	memset(&ctx, 0, sizeof(ctx));
	ctx.sym = inherited_sym; /* NULL unless we are a fork child's new thread */
	inherited_sym = NULL;
	live_sym = ctx.sym;
	pb_init(&ctx.gz);
	export_client_init(&ctx.out);
	datadog_runtime_id_new(ctx.runtime_id);
	uint64_t period = up_cfg->upload_period_ns;
	/* The first period ends a period after the profile began: in a fork child whose
	 * thread started late (start_deferred), at the fork plus a period. */
	uint64_t now_rt = clock_now_ns(CLOCK_REALTIME);
	/* The constructor set the process's first profile's start (0 only when its clock
	 * read failed: now, then). A fork child's starts at its fork (profile_start_ns). */
	if (!forked)
		profile_start_if_unset(profiles_active(up_profiles), now_rt);
	uint64_t start_rt = profile_start_ns(profiles_active(up_profiles));
	uint64_t age = now_rt > start_rt ? now_rt - start_rt : 0;
	uint64_t next = clock_now_ns(CLOCK_MONOTONIC) + period - (age < period ? age : period);
	/* This thread also runs the module registry's work (unwind tables of new
	 * modules): when modules_service says it is due, or a dlopen kicks it; during an
	 * upload's network waits too (service_while_busy). So do new threads' timers. */
	modules_next = 0; /* asks modules_service when its work is due */
	http_send_set_idle(service_while_busy);
	/* New threads' timers are armed by this thread from now on (agent/threads.h). */
	threads_next = UINT64_MAX;
	threads_defer_arming(threads_wake);
	pthread_mutex_lock(ctl.lock);
	for (;;) {
		while (!ctl.stop && ctl.flush_requested == ctl.flush_completed) {
			uint64_t t = clock_now_ns(CLOCK_MONOTONIC);
			if (t >= next)
				break;
			if (ctl.modules_kick || t >= modules_next) {
				ctl.modules_kick = false;
				pthread_mutex_unlock(ctl.lock);
				modules_next = modules_service(clock_now_ns(CLOCK_MONOTONIC));
				pthread_mutex_lock(ctl.lock);
				continue;
			}
			/* Memory for the active profile, checked at each wake-up
			 * (agent/profile.h); mapped without the lock. */
			if (profiles_room_wanted(up_profiles)) {
				pthread_mutex_unlock(ctl.lock);
				profiles_grow_if_needed(up_profiles);
				pthread_mutex_lock(ctl.lock);
				continue;
			}
			if (ctl.warm_kick) {
				ctl.warm_kick = false;
				/* A fork meanwhile must not adopt a symbolizer mid-update.
				 * Not cycling: an exit with nothing sampled need not wait. */
				ctl.warming = true;
				pthread_mutex_unlock(ctl.lock);
				warm_for_children(&ctx);
				pthread_mutex_lock(ctl.lock);
				ctl.warming = false;
				continue;
			}
			if (ctl.threads_kick || t >= threads_next || threads_service_wanted()) {
				ctl.threads_kick = false;
				pthread_mutex_unlock(ctl.lock);
				threads_next = threads_service(clock_now_ns(CLOCK_MONOTONIC));
				pthread_mutex_lock(ctl.lock);
				continue;
			}
			uint64_t wake = min_u64(next, min_u64(modules_next, threads_next));
			if (!threads_service_sleep(wake))
				continue; /* a thread registered meanwhile */
			struct timespec ts = clock_ns_to_timespec(wake);
			pthread_cond_clockwait(&ctl.cond, ctl.lock, CLOCK_MONOTONIC, &ts);
			threads_service_awake();
		}
		if (ctl.quiesce) {
			/* A filter for every thread is about to be installed, or the process
			 * must be single-threaded for a moment: nothing more, not even a
			 * final profile (uploader_quiesce). Threads arm their own timers. */
			threads_defer_arming(NULL);
			ctl.done = true;
			pthread_cond_broadcast(&ctl.cond);
			break;
		}
		bool final = ctl.stop;
		if (final)
			threads_defer_arming(NULL); /* threads arm their own timers again */
		uint64_t flush_gen = ctl.flush_requested;
		ctl.cycling = true;
		pthread_mutex_unlock(ctl.lock);

		uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
		while (next <= now)
			next += period; /* a missed period is skipped, not made up */
		upload_cycle(&ctx, final, final ? UINT64_MAX : period_deadline(next, period));

		now = clock_now_ns(CLOCK_MONOTONIC);
		while (next <= now)
			next += period;
		pthread_mutex_lock(ctl.lock);
		ctl.cycling = false;
		ctl.flush_completed = flush_gen;
		if (final) {
			ctl.done = true;
			pthread_cond_broadcast(&ctl.cond);
			break;
		}
		pthread_cond_broadcast(&ctl.cond);
	}
	pthread_mutex_unlock(ctl.lock);
	/* The process is exiting: nothing is freed. libcurl handles are left to it
	 * (cleaning them up could race with the TLS library's own exit cleanup), and
	 * freeing the symbolizer and buffers would only cost time: in a fork child every
	 * page they touch is shared with the parent and would be copied first. live_sym
	 * keeps the symbolizer reachable for leak checkers. */
	live_sym = ctx.sym;
	return NULL;
}

static int spawn_thread(void)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	/* Joinable: uploader_quiesce must know the thread is gone, its last system call
	 * made. Otherwise it ends only with the process, which needs no join. */
	/* A stack of ours (common/own_stack.h), of our size, not the application's
	 * default (agent/modules.h). Not MADV_WIPEONFORK: a fork child reuses it as it
	 * inherited it, a copy-on-write page for the descriptor, no zero-fill. */
	int src = own_stack_attr(&ctl.stack, &attr, PROFILER_THREAD_STACK_BYTES);
	if (src != 0) {
		pthread_attr_destroy(&attr);
		return src;
	}
	/* Block every signal in the new thread: the app's signals go to its own threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_t t;
	int rc = up_create(&t, &attr, uploader_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0)
		own_stack_release(&ctl.stack);
	if (rc == 0) {
		ctl.thread = t;
		ctl.joinable = true;
		ctl.running = true;
		atomic_store_explicit(&thread_spawned, true, memory_order_relaxed);
	}
	return -rc;
}

int uploader_start(const struct config *cfg, struct profile_pair *pp, thread_create_fn create)
{
	up_cfg = cfg;
	exit_flush_timeout_ns = cfg->exit_flush_timeout_ns;
	up_profiles = pp;
	up_create = create;
	control_init();
	uploader_wanted = true;
	/* Like a fork child's (uploader_atfork_child): a program that ends before its
	 * first sample (a shell command) never pays for the thread, its stack and malloc
	 * arena, nor waits at exit for it to be torn down. Release pairs with the acquire
	 * in start_deferred: the pid is written before the flag. */
	spawn_pending_pid = owner_pid = getpid();
	atomic_store_explicit(&spawn_pending, true, memory_order_release);
	return 0;
}

/* Normal context, called by the application (never from one of its signal handlers):
 * starts the thread the process deferred, if it did. */
FORK_CHILD_PATH static void start_deferred(bool may_wait)
{
	/* Acquire pairs with uploader_start's release (the pid before the flag); the fork
	 * child handler sets both before the child has another thread. Decided again below
	 * under ctl.lock. */
	if (!atomic_load_explicit(&spawn_pending, memory_order_acquire) ||
	    spawn_pending_pid != getpid())
		return;
	if (sandbox_thread_active()) {
		/* Under a seccomp filter: a thread is a new kind of system call (clone3). */
		sandbox_count_skip();
		return;
	}
	/* may_wait false: called from one of the application's calls, which may come from
	 * another library's fork handler while our prepare handler holds the lock in this
	 * very thread; the thread then starts at a later call. */
	if (may_wait)
		pthread_mutex_lock(ctl.lock);
	else if (pthread_mutex_trylock(ctl.lock) != 0)
		return;
	bool mine = atomic_exchange_explicit(&spawn_pending, false, memory_order_relaxed);
	int rc = mine && !ctl.stop ? spawn_thread() : 0;
	pthread_mutex_unlock(ctl.lock);
	if (rc != 0)
		modules_host_failed(up_create); /* unwind tables all the same */
	if (rc != 0)
		log_warn("cannot start the uploader thread in process %d (%s); profiles will "
			 "not be exported",
			 (int)getpid(), strerror(-rc));
}

void uploader_ensure_thread(void)
{
	start_deferred(false);
}

FORK_CHILD_PATH bool uploader_app_call_wanted(void)
{
	return atomic_load_explicit(&spawn_pending, memory_order_relaxed) ||
	       (up_profiles && !atomic_load_explicit(&thread_spawned, memory_order_relaxed) &&
		profiles_room_wanted(up_profiles));
}

void uploader_app_call(void)
{
	/* Memory first, while the thread is not running (once it runs, it maps memory
	 * itself at its wake-ups, never in the application's calls). */
	if (up_profiles && !atomic_load_explicit(&thread_spawned, memory_order_relaxed) &&
	    profiles_room_wanted(up_profiles))
		profiles_grow_if_needed(up_profiles);
	if (atomic_load_explicit(&spawn_pending, memory_order_relaxed) &&
	    !profiles_empty(up_profiles))
		start_deferred(false);
}

/* Waits, lock held, until pred or the deadline. */
static bool wait_until(uint64_t deadline, bool (*pred)(uint64_t), uint64_t arg)
{
	while (!pred(arg)) {
		if (clock_now_ns(CLOCK_MONOTONIC) >= deadline)
			return false;
		struct timespec ts = clock_ns_to_timespec(deadline);
		pthread_cond_clockwait(&ctl.cond, ctl.lock, CLOCK_MONOTONIC, &ts);
	}
	return true;
}

static bool is_done(uint64_t unused)
{
	(void)unused;
	return ctl.done;
}

static bool flushed(uint64_t gen)
{
	return ctl.flush_completed >= gen || ctl.done;
}

bool uploader_quiesce(uint64_t timeout_ns)
{
	/* Never started again in this process. */
	atomic_store_explicit(&spawn_pending, false, memory_order_relaxed);
	/* Warming gives up between modules (as at exit). */
	atomic_store_explicit(&exiting, true, memory_order_relaxed);
	/* The waits below are cancellation points: a cancel must not leave ctl.lock held
	 * (fork and exit take it). */
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	pthread_mutex_lock(ctl.lock);
	bool gone = true;
	if (ctl.running && !ctl.done) {
		uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
		ctl.quiesce = ctl.stop = true;
		/* HTTP in flight gives up at its next poll (a lone deadline: relaxed). */
		atomic_store_explicit(&exit_abort_ns, now, memory_order_relaxed);
		pthread_cond_broadcast(&ctl.cond);
		gone = wait_until(now + timeout_ns, is_done, 0);
	}
	bool join = gone && ctl.joinable;
	ctl.joinable &= !join;
	pthread_t t = ctl.thread;
	pthread_mutex_unlock(ctl.lock);
	/* Returns once the kernel has cleared the thread's id: it makes no more system
	 * calls. The thread only unlocks and returns after setting done. */
	if (join && pthread_join(t, NULL) == 0) {
		pthread_mutex_lock(ctl.lock);
		own_stack_release(&ctl.stack);
		pthread_mutex_unlock(ctl.lock);
	}
	pthread_setcancelstate(cancel_state, NULL);
	return gone;
}

void uploader_resume(void)
{
	pthread_mutex_lock(ctl.lock);
	if (ctl.quiesce && ctl.done && !ctl.joinable) {
		/* The stopped thread is gone (joined): a new one starts at the next need. */
		ctl.running = ctl.stop = ctl.done = ctl.quiesce = ctl.cycling = false;
		atomic_store_explicit(&thread_spawned, false, memory_order_relaxed);
		atomic_store_explicit(&exit_abort_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&exiting, false, memory_order_relaxed);
		spawn_pending_pid = getpid();
		atomic_store_explicit(&spawn_pending, true, memory_order_release);
	}
	pthread_mutex_unlock(ctl.lock);
}

/* The thread is told to stop, and waited for when it has a final profile to send. */
FORK_CHILD_PATH static void stop_thread(uint64_t timeout_ns)
{
	atomic_store_explicit(&exiting, true, memory_order_relaxed);
	pthread_mutex_lock(ctl.lock);
	if (ctl.running && !ctl.stop && !ctl.cycling && profiles_empty(up_profiles)) {
		/* Nothing sampled since the last upload and nothing in flight: no final
		 * profile, so no reason to wait for the thread, nor to wake it: it stays
		 * parked until the process ends (a short fork child exits at once, and
		 * its exit does not compete with the thread's). */
		ctl.stop = true;
	} else if (ctl.running && !ctl.stop) {
		uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
		uint64_t grace = timeout_ns / 2 < EXIT_GRACE_NS ? timeout_ns / 2 : EXIT_GRACE_NS;
		/* Relaxed: a lone deadline, read by the thread at its next poll; the
		 * broadcast below (under the lock) wakes it if it is waiting instead. */
		atomic_store_explicit(&exit_abort_ns, now + timeout_ns - grace,
				      memory_order_relaxed);
		ctl.stop = true;
		pthread_cond_broadcast(&ctl.cond);
		if (!wait_until(now + timeout_ns, is_done, 0) && !ctl.final_counted) {
			ctl.abandoned = true;
			upload_count(&upload_counters.uploads_dropped, export_set_count());
			upload_count(&upload_counters.export_failures, export_set_count());
			log_warn("the final profile was not exported within %llu ms "
				 "(DD_PROFILING_EXIT_FLUSH_TIMEOUT); dropped",
				 (unsigned long long)(timeout_ns / 1000000));
		}
	}
	pthread_mutex_unlock(ctl.lock);
}

FORK_CHILD_PATH void uploader_stop(void)
{
	/* exit() called from a thread the application created: its CPU since its last
	 * sample goes into the final profile (agent/sampler.h). The main thread and a
	 * fork child keep whole-period weights and have nothing to add: their exit pays
	 * no system call for it. */
	/* Under a seccomp filter the exiting thread makes no new kind of system call: no
	 * final profile from it (sandbox.h). */
	if (sandbox_thread_active()) {
		sandbox_count_skip();
		return;
	}
	bool end_account = sampler_thread_has_end_account() && sampler_thread_sampled();
	/* No thread (a fork child that never needed one) and nothing sampled or to
	 * account: neither the lock's page nor libc's errno code is touched. A thread
	 * another thread of ours starts from now on is one the lock would not show. */
	if (!end_account && !atomic_load_explicit(&thread_spawned, memory_order_relaxed) &&
	    profiles_empty(up_profiles))
		return;
	int saved_errno = errno; /* the exiting program's */
	/* A child made without our fork handlers (_Fork, a raw clone): the thread and the
	 * state are its parent's, whose locks a thread that is not here may hold. It
	 * exits at once. */
	if (getpid() != owner_pid) {
		errno = saved_errno;
		return;
	}
	if (end_account)
		threads_exit_self(NULL);
	if (!profiles_empty(up_profiles))
		start_deferred(true);
	if (atomic_load_explicit(&thread_spawned, memory_order_relaxed))
		stop_thread(exit_flush_timeout_ns);
	errno = saved_errno;
}

int uploader_flush(uint64_t timeout_ns)
{
	int rc = 0;
	start_deferred(true);
	/* The wait is a cancellation point: a cancel must not leave ctl.lock held. */
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	pthread_mutex_lock(ctl.lock);
	if (!ctl.running || ctl.done) {
		rc = -ESRCH;
	} else {
		uint64_t gen = ++ctl.flush_requested;
		pthread_cond_broadcast(&ctl.cond);
		if (!wait_until(clock_now_ns(CLOCK_MONOTONIC) + timeout_ns, flushed, gen))
			rc = -ETIMEDOUT;
	}
	pthread_mutex_unlock(ctl.lock);
	pthread_setcancelstate(cancel_state, NULL);
	return rc;
}

void uploader_get_stats(struct uploader_stats *out)
{
	upload_stats_get(out);
}

bool uploader_thread_started(void)
{
	return atomic_load_explicit(&thread_spawned, memory_order_relaxed);
}

void uploader_atfork_prepare(void)
{
	/* Never held across I/O or serialization: this waits for at most a few
	 * instructions, never for an upload in flight. */
	pthread_mutex_lock(ctl.lock);
}

void uploader_atfork_parent(void)
{
	/* The first fork: this process has children, whose exit names what they sampled
	 * with the symbolizer they adopt from it (warm_for_children). The thread, when it
	 * runs, readies it; every later fork only reads the flag. */
	if (!ctl.warm_asked) {
		ctl.warm_asked = true;
		ctl.warm_kick = true;
		pthread_cond_broadcast(&ctl.cond);
	}
	pthread_mutex_unlock(ctl.lock);
}

FORK_CHILD_PATH void uploader_atfork_child(void)
{
	bool was_running = uploader_wanted && !ctl.stop;
	forked = true;
	owner_pid = threads_fork_child_pid();
	bool busy = ctl.cycling || ctl.warming;
	inherited_sym = busy ? NULL : live_sym;
	if (!inherited_sym)
		dw_api_forget_sessions(); /* they were the parent thread's */
	/* The parent's thread may have been inside libdw (a lock or a one-time
	 * initialization of its own held by a thread that is not here): never call it. */
	if (busy && live_sym)
		dw_api_forbid_after_fork();
	/* Fresh control block: the old one's lock is held by this thread (prepare) and
	 * its waiters live in the parent. */
	control_init();
	export_seq = 0;
	profiler_cpu_accounted = 0; /* the child's thread is a new one */
	atomic_store_explicit(&exit_abort_ns, 0, memory_order_relaxed);
	upload_stats_reset();
	/* A request the parent was still waiting for: the intake may be hanging, and this
	 * child cannot know better; its exit flush will not wait for that exporter. */
	export_set_atfork_child();
	if (!was_running)
		return;
	/* The thread starts at the child's first need (uploader.h). Most children of a
	 * fork storm or a pre-fork server never sample: they never pay for a thread
	 * (pthread_create, and the copy-on-write faults of its malloc arena at every later
	 * fork of the parent and in the child). */
	spawn_pending_pid = threads_fork_child_pid(); /* getpid(), without a system call */
	atomic_store_explicit(&spawn_pending, true, memory_order_relaxed);
}
