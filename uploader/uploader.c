/*
 * uploader.c - the uploader thread (see uploader.h).
 *
 * Context: the uploader thread runs upload_cycle; start/stop/flush are called from
 * application threads and only touch the control block under up_ctl.lock, which is never
 * held across serialization or I/O (so a fork's prepare handler can take it at once).
 * Everything the thread needs for one profile lives in a struct upload_ctx on its own
 * stack (upload_cycle.h, which makes the profile).
 * Exit flush: one attempt per HTTP exporter, except for an exporter known not to answer
 * (its last request timed out, or the parent was waiting on it when this process was
 * forked): the final profile is then dropped at once rather than holding up the exit.
 * Death by a signal: uploader_final_from_signal, called in a signal handler, is
 * async-signal-safe (atomics, the host's futex, getpid and nanosleep); nothing else in
 * this file is.
 */
#include "uploader.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/alloc/live_heap.h"
#include "agent/sample/fork_local.h"
#include "agent/symbolize/dw_api.h"
#include "agent/unwind/modules.h"
#include "agent/sample/sandbox.h"
#include "agent/sample/threads.h"
#include "agent/sample/sampler.h"
#include "common/bg_host.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/own_thread.h"
#include "common/raw_syscall.h"
#include "uploader/export_datadog.h"
#include "uploader/export_set.h"
#include "uploader/file_spool.h"
#include "uploader/http_send.h"
#include "uploader/host_agent.h"
#include "uploader/upload_cycle.h"
#include "uploader/uploader_internal.h"
#include "uploader/upload_stats.h"

#define UPLOADER_THREAD_NAME "ddprof-upload"
/* At exit the thread gives up this long before uploader_stop stops waiting, so that it
 * has let go of libcurl by the time the process tears down (capped at half the flush
 * timeout). */
#define EXIT_GRACE_NS (100ULL * 1000000ULL)

static pthread_mutex_t ctl_lock_fallback;
FORK_CHILD_DATA struct control up_ctl = {.lock = &ctl_lock_fallback};
/*
 * The thread's services (common/bg_host.h), in the order they run when several are
 * due: the upload first (its period is the one that must hold), then unwind tables,
 * memory for the active profile, the fork children's symbol warm-up, and new threads'
 * timers. The host's kicks and run state are under up_ctl.lock; its due times are in
 * host_thr, which only the thread writes (not on the fork child's page: the thread's
 * frequent writes would copy that page after every fork).
 */
enum service_id {
	SVC_UPLOAD,
	SVC_MODULES,
	SVC_ROOM,
	SVC_WARM,
	SVC_THREADS,
	SVC_HOOKS,
	SVC_JIT,
	SVC_COUNT
};
#define SVC_BIT(id) (1u << (id))
FORK_CHILD_DATA static struct bg_host host;
static struct bg_host_thread host_thr;
/* up_ctl.running, for uploader_stop to read without the lock. */
FORK_CHILD_DATA static _Atomic bool thread_spawned;
/*
 * The running thread's symbolizer, and the one a fork child inherits. A symbolizer is
 * plain memory plus libdw state over shared read-only file descriptors and mappings,
 * all copied by fork. When the parent's thread was idle at the fork (not cycling: the
 * forking thread holds up_ctl.lock from prepare, so the thread is parked in its wait), the
 * copy is consistent and the child's thread adopts it: a pre-fork server's workers
 * start with the master's caches (no libdw reload, no DWARF work for pcs the master
 * already named). Otherwise the child starts a fresh one.
 */
FORK_CHILD_DATA struct symbolizer *up_live_sym;
FORK_CHILD_DATA static struct symbolizer *inherited_sym;
const struct config *up_cfg;
/* What a fork child's exit reads: on the page it touches anyway (common/fork_child.h);
 * the exit timeout copied there by uploader_start, not read from the pages of cfg. */
FORK_CHILD_DATA static struct profile_pair *up_profiles;
FORK_CHILD_DATA static uint64_t exit_flush_timeout_ns = CONFIG_DEFAULT_EXIT_FLUSH_TIMEOUT_NS;
static thread_create_fn up_create;
/* CLOCK_MONOTONIC time at which the thread must give up on HTTP (exit flush); 0 = none.
 * Set by uploader_stop, read by http_send_all between polls. */
FORK_CHILD_DATA static _Atomic uint64_t exit_abort_ns;
/* The process is exiting (stop_thread): upload_cycle_warm gives up between modules.
 * Relaxed: a hint, read without the lock by the thread while it warms. */
FORK_CHILD_DATA _Atomic bool up_exiting;
/* The thread made the final profile and is gone (uploader_final_from_signal waits for
 * it). Release and acquire: the profile's export precedes it. */
FORK_CHILD_DATA static _Atomic bool final_made;
static bool curl_atexit_registered;
/* This process is to have an uploader thread (uploader_start made one): a fork child
 * inherits the wish, not the thread. */
FORK_CHILD_DATA static bool uploader_wanted;
/* A fork child's thread is not started yet: it starts at the first need (see
 * start_deferred). Set by the fork child handler, cleared under up_ctl.lock. With the pid
 * it was set for: in a grandchild, before our child handler ran (another library's
 * handler may create a thread), the flag is the parent's, and up_ctl.lock is held. */
FORK_CHILD_DATA static _Atomic bool spawn_pending;
/* The process this state belongs to: the one that ran uploader_start, or the fork
 * child whose handler ran. */
FORK_CHILD_DATA static pid_t owner_pid;
/* This process is a fork child of the one that started the profiler. */
FORK_CHILD_DATA static bool forked;
FORK_CHILD_DATA static pid_t spawn_pending_pid;
/* This process runs as root, writes profiles into a directory and has forked: its
 * children may give root up and spool their profiles, which its thread moves into the
 * directory each period (uploader/file_spool.h). A need for the thread, as samples are.
 * Cleared in a fork child. */
FORK_CHILD_DATA static _Atomic bool sweep_duty;

static void start_deferred(bool may_wait);

/* The host's start function: a kick that asks for the thread (a dlopen or dlclose,
 * whose new tables the thread builds). */
static void start_for_host(void)
{
	start_deferred(false);
}

/* Lock held: whether the thread runs or is to start (the host's answer to a kick). */
FORK_CHILD_PATH static void hosting_update_locked(void)
{
	bool hosting = (up_ctl.running && !up_ctl.done) ||
		       (atomic_load_explicit(&spawn_pending, memory_order_relaxed) && !up_ctl.stop);
	atomic_store_explicit(&host.hosting, hosting, memory_order_relaxed);
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
		up_ctl.lock = lock;
	}
}

FORK_CHILD_PATH static void control_init(void)
{
	/* At start-up too: a placed lock was initialized by uploader_place_lock. */
	fork_local_mutex_after_fork(up_ctl.lock);
	/* An assignment, not pthread_cond_init: waits name their clock (clockwait), and a
	 * fork child touches no code page of libc's for it (common/raw_syscall.h). */
	pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
	up_ctl.cond = fresh;
	up_ctl.running = up_ctl.stop = up_ctl.done = false;
	atomic_store_explicit(&thread_spawned, false, memory_order_relaxed);
	up_ctl.final_counted = up_ctl.abandoned = up_ctl.cycling = false;
	up_ctl.flush_requested = up_ctl.flush_completed = 0;
	/* No kick, no service running (the parent's thread is not here). A child warms at
	 * its own first fork (if it did not adopt a warmed symbolizer, its thread reads
	 * what its children need then): nothing of the parent's request. */
	bg_host_reset(&host);
	up_ctl.warm_asked = up_ctl.warming = false;
	up_ctl.quiesce = up_ctl.joinable = false;
	own_thread_stack_after_fork(&up_ctl.stack);
	atomic_store_explicit(&up_exiting, false, memory_order_relaxed);
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
	pthread_mutex_lock(up_ctl.lock);
	bool mine = !up_ctl.abandoned;
	up_ctl.final_counted = true;
	pthread_mutex_unlock(up_ctl.lock);
	return mine;
}

/* The table; arg (the thread's upload context) and the upload's first due time are
 * filled in as the thread starts. */
static struct bg_service services[SVC_COUNT] = {
    [SVC_UPLOAD] = {.name = "upload", .run = upload_service_run},
    [SVC_MODULES] = {.name = "modules",
		     .run = host_agent_modules_run,
		     .first_due_ns = 0,
		     .nests = true},
    [SVC_ROOM] = {.name = "room",
		  .run = host_agent_room_run,
		  .wanted = host_agent_room_wanted,
		  .first_due_ns = BG_NEVER,
		  .nests = true},
    [SVC_WARM] = {.name = "warm", .run = warm_service_run, .first_due_ns = BG_NEVER},
    [SVC_THREADS] = {.name = "threads",
		     .run = host_agent_threads_run,
		     .wanted = host_agent_threads_wanted,
		     .before_sleep = host_agent_threads_before_sleep,
		     .after_sleep = host_agent_threads_after_sleep,
		     .first_due_ns = BG_NEVER,
		     .nests = true},
    [SVC_HOOKS] = {.name = "hooks",
		   .run = host_agent_hooks_run,
		   .wanted = host_agent_hooks_wanted,
		   .first_due_ns = 0,
		   .nests = true},
    [SVC_JIT] = {.name = "jit", .run = jit_service_run, .first_due_ns = 0},
};

/* While an upload waits on the network: memory, unwind tables and timers, so that a
 * library loaded meanwhile gets its table and a new thread its timer without waiting
 * for the upload to end. Not at exit (the host is leaving): the exit flush must not
 * wait for them. Between the steps of an upload (serializing a big profile takes tens
 * of milliseconds, symbolizing many new stacks longer): timers, and memory (the active
 * profile's and the live heap's stacks, which fill while the host is busy). */
#define SERVICES_WHILE_WAITING                                                                     \
	(SVC_BIT(SVC_ROOM) | SVC_BIT(SVC_MODULES) | SVC_BIT(SVC_THREADS) | SVC_BIT(SVC_HOOKS))
#define SERVICES_BETWEEN_STEPS (SVC_BIT(SVC_THREADS) | SVC_BIT(SVC_ROOM))

static void host_setup(void)
{
	bg_host_init(&host, up_ctl.lock, &up_ctl.cond, &host_thr);
	for (unsigned i = 0; i < SVC_COUNT; i++)
		bg_host_add(&host, &services[i]);
	host.start = start_for_host;
	/* The module registry's work runs on this host (a thread of its own only when
	 * this one cannot start: modules_host_failed). */
	modules_set_host(&host, SVC_MODULES);
}

static void *uploader_main(void *arg)
{
	(void)arg;
	raw_syscall(SYS_prctl, PR_SET_NAME, (long)UPLOADER_THREAD_NAME, 0, 0);
	export_set_make(up_cfg, up_ctl.lock);
	/* A fork child of a parent that had built no table (its thread had not started),
	 * or that forked before its registry caught up with its loads (a library loaded
	 * by libc itself, or by name, just before a pre-fork server forks its workers):
	 * this thread builds them, and runs the seccomp check for guarded reads. */
	if (!modules_have_tables())
		modules_start_deferred();
	else if (modules_registry_behind())
		modules_notify(); /* starts the deferred work and scans at once */
	struct upload_ctx ctx;
	memset(&ctx, 0, sizeof(ctx));
	ctx.sym = inherited_sym; /* NULL unless we are a fork child's new thread */
	inherited_sym = NULL;
	up_live_sym = ctx.sym;
	pb_init(&ctx.gz);
	export_set_client_init(&ctx.out);
	export_datadog_runtime_id_new(ctx.runtime_id);
	ctx.cfg = up_cfg;
	ctx.profiles = up_profiles;
	ctx.exit_abort_ns = &exit_abort_ns;
	ctx.host = &host;
	ctx.between_steps = SERVICES_BETWEEN_STEPS;
	ctx.claim_final = claim_final_count;
	ctx.before_first_tls = register_atexit_after_curl;
	uint64_t period = up_cfg->upload_period_ns;
	/* The first period ends a period after the profile began: in a fork child whose
	 * thread started late (start_deferred), at the fork plus a period. */
	uint64_t now_rt = clock_now_ns(CLOCK_REALTIME);
	/* The constructor set the process's first profile's start (0 only when its clock
	 * read failed: now, then). A fork child's starts at its fork (profiles_start_ns). */
	if (!forked)
		profiles_start_if_unset(profiles_active(up_profiles), now_rt);
	uint64_t start_rt = profiles_start_ns(profiles_active(up_profiles));
	uint64_t age = now_rt > start_rt ? now_rt - start_rt : 0;
	uint64_t first = period - (age < period ? age : period);
	upload_services_first(clock_now_ns(CLOCK_MONOTONIC) + first);
	services[SVC_UPLOAD].first_due_ns = first;
	services[SVC_UPLOAD].arg = &ctx;
	services[SVC_WARM].arg = &ctx;
	services[SVC_JIT].arg = &ctx;
	services[SVC_ROOM].arg = up_profiles;
	http_send_set_host(&host, SERVICES_WHILE_WAITING);
	/* New threads' timers are armed by this thread from now on (agent/sample/threads.h). */
	threads_defer_arming(&host, SVC_THREADS);
	pthread_mutex_lock(up_ctl.lock);
	/* Returns when uploader_stop or uploader_quiesce asks (bg_host_leave_locked). */
	bg_host_serve(&host);
	/* Threads arm their own timers again. */
	threads_defer_arming(NULL, 0);
	if (!up_ctl.quiesce) {
		/* The final profile, one attempt per exporter (uploader_stop waits for it). A
		 * quiesce sends nothing: a filter for every thread is about to be installed,
		 * or the process must be single-threaded for a moment. */
		up_ctl.cycling = true;
		pthread_mutex_unlock(up_ctl.lock);
		upload_cycle_run(&ctx, true, UINT64_MAX);
		up_live_sym = ctx.sym;
		pthread_mutex_lock(up_ctl.lock);
		up_ctl.cycling = false;
		up_ctl.flush_completed = up_ctl.flush_requested;
	}
	up_ctl.done = true;
	hosting_update_locked();
	pthread_cond_broadcast(&up_ctl.cond);
	pthread_mutex_unlock(up_ctl.lock);
	/* Release pairs with uploader_final_from_signal's acquire: the export is done. */
	atomic_store_explicit(&final_made, true, memory_order_release);
	/* The process is exiting: nothing is freed. libcurl handles are left to it
	 * (cleaning them up could race with the TLS library's own exit cleanup), and
	 * freeing the symbolizer and buffers would only cost time: in a fork child every
	 * page they touch is shared with the parent and would be copied first. up_live_sym
	 * keeps the symbolizer reachable for leak checkers. */
	up_live_sym = ctx.sym;
	return NULL;
}

static int spawn_thread(void)
{
	/* Joinable: uploader_quiesce must know the thread is gone, its last system call
	 * made. Otherwise it ends only with the process, which needs no join. A stack of
	 * ours (common/own_thread.h), of our size, not the application's default
	 * (agent/unwind/modules.h). Not MADV_WIPEONFORK: a fork child reuses it as it
	 * inherited it, a copy-on-write page for the descriptor, no zero-fill. */
	pthread_t t;
	int rc = own_thread_create(&up_ctl.stack, PROFILER_THREAD_STACK_BYTES, up_create, &t,
				   uploader_main, NULL);
	if (rc == 0) {
		up_ctl.thread = t;
		up_ctl.joinable = true;
		up_ctl.running = true;
		atomic_store_explicit(&final_made, false, memory_order_relaxed);
		atomic_store_explicit(&thread_spawned, true, memory_order_relaxed);
	}
	hosting_update_locked();
	return rc;
}

int uploader_start(const struct config *cfg, struct profile_pair *pp, thread_create_fn create)
{
	up_cfg = cfg;
	exit_flush_timeout_ns = cfg->exit_flush_timeout_ns;
	up_profiles = pp;
	up_create = create;
	host_setup();
	control_init();
	uploader_wanted = true;
	/* Like a fork child's (uploader_atfork_child): a program that ends before its
	 * first sample (a shell command) never pays for the thread, its stack and malloc
	 * arena, nor waits at exit for it to be torn down. Release pairs with the acquire
	 * in start_deferred: the pid is written before the flag. */
	spawn_pending_pid = owner_pid = getpid();
	atomic_store_explicit(&spawn_pending, true, memory_order_release);
	hosting_update_locked(); /* one thread: the lock need not be taken yet */
	return 0;
}

/* Normal context, called by the application (never from one of its signal handlers):
 * starts the thread the process deferred, if it did. */
FORK_CHILD_PATH static void start_deferred(bool may_wait)
{
	/* Acquire pairs with uploader_start's release (the pid before the flag); the fork
	 * child handler sets both before the child has another thread. Decided again below
	 * under up_ctl.lock. */
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
		pthread_mutex_lock(up_ctl.lock);
	else if (pthread_mutex_trylock(up_ctl.lock) != 0)
		return;
	bool mine = atomic_exchange_explicit(&spawn_pending, false, memory_order_relaxed);
	int rc = mine && !up_ctl.stop ? spawn_thread() : 0;
	hosting_update_locked();
	pthread_mutex_unlock(up_ctl.lock);
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
		(profiles_room_wanted(up_profiles) || live_heap_room_wanted()));
}

void uploader_app_call(void)
{
	/* Memory first, while the thread is not running (once it runs, it maps memory
	 * itself at its wake-ups, never in the application's calls). */
	if (up_profiles && !atomic_load_explicit(&thread_spawned, memory_order_relaxed)) {
		if (profiles_room_wanted(up_profiles))
			profiles_grow_if_needed(up_profiles);
		if (live_heap_room_wanted())
			live_heap_grow();
	}
	/* A need: samples, or allocations the live heap tracks (its stacks' memory and
	 * its compactions are the thread's to tend). */
	if (atomic_load_explicit(&spawn_pending, memory_order_relaxed) &&
	    (!profiles_empty(up_profiles) || live_heap_tracking() ||
	     atomic_load_explicit(&sweep_duty, memory_order_relaxed)))
		start_deferred(false);
}

/* Waits, lock held, until pred or the deadline. */
static bool wait_until(uint64_t deadline, bool (*pred)(uint64_t), uint64_t arg)
{
	while (!pred(arg)) {
		if (clock_now_ns(CLOCK_MONOTONIC) >= deadline)
			return false;
		struct timespec ts = clock_ns_to_timespec(deadline);
		pthread_cond_clockwait(&up_ctl.cond, up_ctl.lock, CLOCK_MONOTONIC, &ts);
	}
	return true;
}

static bool is_done(uint64_t unused)
{
	(void)unused;
	return up_ctl.done;
}

static bool flushed(uint64_t gen)
{
	return up_ctl.flush_completed >= gen || up_ctl.done;
}

bool uploader_quiesce(uint64_t timeout_ns)
{
	/* Never started again in this process. */
	atomic_store_explicit(&spawn_pending, false, memory_order_relaxed);
	/* Warming gives up between modules (as at exit). */
	atomic_store_explicit(&up_exiting, true, memory_order_relaxed);
	/* The waits below are cancellation points: a cancel must not leave up_ctl.lock held
	 * (fork and exit take it). */
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	pthread_mutex_lock(up_ctl.lock);
	bool gone = true;
	if (up_ctl.running && !up_ctl.done) {
		uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
		up_ctl.quiesce = up_ctl.stop = true;
		/* HTTP in flight gives up at its next poll (a lone deadline: relaxed). */
		atomic_store_explicit(&exit_abort_ns, now, memory_order_relaxed);
		bg_host_leave_locked(&host, true);
		gone = wait_until(now + timeout_ns, is_done, 0);
	}
	hosting_update_locked();
	bool join = gone && up_ctl.joinable;
	up_ctl.joinable &= !join;
	pthread_t t = up_ctl.thread;
	pthread_mutex_unlock(up_ctl.lock);
	/* Returns once the kernel has cleared the thread's id: it makes no more system
	 * calls. The thread only unlocks and returns after setting done. */
	if (join && pthread_join(t, NULL) == 0) {
		pthread_mutex_lock(up_ctl.lock);
		own_thread_stack_release(&up_ctl.stack);
		pthread_mutex_unlock(up_ctl.lock);
	}
	pthread_setcancelstate(cancel_state, NULL);
	return gone;
}

void uploader_resume(void)
{
	pthread_mutex_lock(up_ctl.lock);
	if (up_ctl.quiesce && up_ctl.done && !up_ctl.joinable) {
		/* The stopped thread is gone (joined): a new one starts at the next need. */
		up_ctl.running = up_ctl.stop = up_ctl.done = up_ctl.quiesce = up_ctl.cycling =
		    false;
		atomic_store_explicit(&thread_spawned, false, memory_order_relaxed);
		atomic_store_explicit(&exit_abort_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&up_exiting, false, memory_order_relaxed);
		bg_host_reset(&host);
		spawn_pending_pid = getpid();
		atomic_store_explicit(&spawn_pending, true, memory_order_release);
		hosting_update_locked();
	}
	pthread_mutex_unlock(up_ctl.lock);
}

/* The thread is told to stop, and waited for when it has a final profile to send. */
FORK_CHILD_PATH static void stop_thread(uint64_t timeout_ns)
{
	atomic_store_explicit(&up_exiting, true, memory_order_relaxed);
	pthread_mutex_lock(up_ctl.lock);
	if (up_ctl.running && !up_ctl.stop && !up_ctl.cycling && profiles_empty(up_profiles) &&
	    !atomic_load_explicit(&sweep_duty, memory_order_relaxed)) {
		/* Nothing sampled since the last upload and nothing in flight: no final
		 * profile, so no reason to wait for the thread, nor to wake it: it stays
		 * parked until the process ends (a short fork child exits at once, and
		 * its exit does not compete with the thread's). A root parent's final
		 * cycle moves its children's last spooled profiles. */
		up_ctl.stop = true;
		bg_host_leave_locked(&host, false);
	} else if (up_ctl.running && !up_ctl.stop) {
		uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
		uint64_t grace = timeout_ns / 2 < EXIT_GRACE_NS ? timeout_ns / 2 : EXIT_GRACE_NS;
		/* Relaxed: a lone deadline, read by the thread at its next poll; the
		 * broadcast below (under the lock) wakes it if it is waiting instead. */
		atomic_store_explicit(&exit_abort_ns, now + timeout_ns - grace,
				      memory_order_relaxed);
		up_ctl.stop = true;
		bg_host_leave_locked(&host, true);
		if (!wait_until(now + timeout_ns, is_done, 0) && !up_ctl.final_counted) {
			up_ctl.abandoned = true;
			upload_stats_count(&upload_counters.uploads_dropped, export_set_count());
			upload_stats_count(&upload_counters.export_failures, export_set_count());
			log_warn("the final profile was not exported within %llu ms "
				 "(DD_PROFILING_EXIT_FLUSH_TIMEOUT); dropped",
				 (unsigned long long)(timeout_ns / 1000000));
		}
	}
	pthread_mutex_unlock(up_ctl.lock);
}

FORK_CHILD_PATH void uploader_stop(void)
{
	/* exit() called from a thread the application created: its CPU since its last
	 * sample goes into the final profile (agent/sample/sampler.h). The main thread and a
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

/* async-signal-safe */
bool uploader_final_from_signal(void)
{
	if (!atomic_load_explicit(&thread_spawned, memory_order_relaxed) ||
	    raw_syscall(SYS_getpid, 0, 0, 0, 0) != owner_pid || sandbox_thread_active())
		return false;
	uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
	uint64_t timeout = exit_flush_timeout_ns;
	uint64_t grace = timeout / 2 < EXIT_GRACE_NS ? timeout / 2 : EXIT_GRACE_NS;
	/* Relaxed: lone deadlines and flags the thread reads at its next poll, as at exit
	 * (stop_thread); the leave below wakes it. */
	atomic_store_explicit(&exit_abort_ns, now + timeout - grace, memory_order_relaxed);
	atomic_store_explicit(&up_exiting, true, memory_order_relaxed);
	bg_host_leave_async(&host);
	/* Acquire pairs with uploader_main's release store of final_made. */
	while (!atomic_load_explicit(&final_made, memory_order_acquire) &&
	       clock_now_ns(CLOCK_MONOTONIC) < now + timeout) {
		struct timespec ms = {0, 1000000};
		raw_syscall(SYS_nanosleep, (long)&ms, 0, 0, 0);
	}
	return atomic_load_explicit(&final_made, memory_order_acquire);
}

int uploader_flush(uint64_t timeout_ns)
{
	int rc = 0;
	start_deferred(true);
	/* The wait is a cancellation point: a cancel must not leave up_ctl.lock held. */
	int cancel_state;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
	pthread_mutex_lock(up_ctl.lock);
	if (!up_ctl.running || up_ctl.done) {
		rc = -ESRCH;
	} else {
		uint64_t gen = ++up_ctl.flush_requested;
		bg_host_kick_locked(&host, SVC_UPLOAD);
		if (!wait_until(clock_now_ns(CLOCK_MONOTONIC) + timeout_ns, flushed, gen))
			rc = -ETIMEDOUT;
	}
	pthread_mutex_unlock(up_ctl.lock);
	pthread_setcancelstate(cancel_state, NULL);
	return rc;
}

void uploader_get_stats(struct uploader_stats *out)
{
	upload_stats_get(out);
}

bool uploader_signal_lost(void)
{
	return upload_cycle_signal_lost();
}

bool uploader_thread_started(void)
{
	return atomic_load_explicit(&thread_spawned, memory_order_relaxed);
}

void uploader_before_euid_change(uid_t euid)
{
	if (up_cfg && up_cfg->output_dir[0])
		file_spool_before_drop(up_cfg->output_dir, euid);
}

void uploader_before_exec(void)
{
	/* A vfork child runs on its parent's memory: getpid() is not the owner's. */
	if (!up_profiles || profiles_empty(up_profiles) || sandbox_thread_active() ||
	    getpid() != owner_pid)
		return;
	int saved_errno = errno;
	uploader_flush(exit_flush_timeout_ns);
	errno = saved_errno;
}

void uploader_before_chroot(void)
{
	if (up_cfg && up_cfg->output_dir[0])
		file_spool_before_chroot(up_cfg->output_dir);
}

void uploader_atfork_prepare(void)
{
	/* Never held across I/O or serialization: this waits for at most a few
	 * instructions, never for an upload in flight. */
	pthread_mutex_lock(up_ctl.lock);
}

void uploader_atfork_parent(void)
{
	if (!atomic_load_explicit(&sweep_duty, memory_order_relaxed) && up_cfg &&
	    up_cfg->output_dir[0] && geteuid() == 0)
		atomic_store_explicit(&sweep_duty, true, memory_order_relaxed);
	/* The first fork: this process has children, whose exit names what they sampled
	 * with the symbolizer they adopt from it (upload_cycle_warm). The thread, when it
	 * runs, readies it; every later fork only reads the flag. */
	if (!up_ctl.warm_asked) {
		up_ctl.warm_asked = true;
		bg_host_kick_locked(&host, SVC_WARM);
	}
	pthread_mutex_unlock(up_ctl.lock);
}

FORK_CHILD_PATH void uploader_atfork_child(void)
{
	atomic_store_explicit(&sweep_duty, false, memory_order_relaxed);
	bool was_running = uploader_wanted && !up_ctl.stop;
	forked = true;
	owner_pid = threads_fork_child_pid();
	bool busy = up_ctl.cycling || up_ctl.warming;
	inherited_sym = busy ? NULL : up_live_sym;
	if (!inherited_sym)
		dw_api_forget_sessions(); /* they were the parent thread's */
	/* The parent's thread may have been inside libdw (a lock or a one-time
	 * initialization of its own held by a thread that is not here): never call it. */
	if (busy && up_live_sym)
		dw_api_forbid_after_fork();
	/* Fresh control block: the old one's lock is held by this thread (prepare) and
	 * its waiters live in the parent. */
	control_init();
	upload_cycle_atfork_child();
	atomic_store_explicit(&exit_abort_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&final_made, false, memory_order_relaxed);
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
	hosting_update_locked(); /* the child's one thread: its fresh lock is not needed */
}
