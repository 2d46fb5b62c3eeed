/*
 * agent.c - the agent's front door (see agent.h): the rooms started, and taken through
 * a fork, in the order they need.
 *
 * Owns: the profile pair (on the fork-local page when it has room), whether the agent
 * runs, and the sampling signal's blocking around a fork on kernels that restart one.
 * Context: start-up in the constructor (one thread); thread begin and end, dlopen and
 * dlclose in application threads (normal context); the fork handlers in the forking
 * thread and in the child (its only thread); agent_sigaction anywhere, signal handlers
 * included. The child's path (agent_atfork_child, agent_atfork_child_last, agent_stop)
 * is FORK_CHILD_PATH and its data FORK_CHILD_DATA (common/fork_child.h): each page a
 * fork child touches is a page fault.
 */
#include "agent/agent.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent_snapshot.h"
#include "agent/alloc/alloc_hooks.h"
#include "agent/alloc/alloc_sample.h"
#include "agent/alloc/got_patch.h"
#include "agent/alloc/live_heap.h"
#include "agent/lock/lock_hooks.h"
#include "agent/lock/lock_sample.h"
#include "agent/wall/wall_clock.h"
#include "agent/wall/wall_hooks.h"
#include "agent/wall/wall_threads.h"
#include "agent/sample/app_signals.h"
#include "agent/sample/fork_local.h"
#include "agent/sample/mask_view.h"
#include "agent/sample/threads.h"
#include "agent/symbolize/perf_map.h"
#include "agent/unwind/boot_cfi.h"
#include "agent/unwind/cfi_cache.h"
#include "agent/unwind/modules.h"
#include "agent/unwind/unwind.h"
#include "common/big_alloc.h"
#include "common/clock.h"
#include "common/digits.h"
#include "common/fork_child.h"
#include "common/log.h"
#include "common/raw_syscall.h"

/* On the fork-local page when it has room: the signal handler writes the pair's
 * counters at every sample, and there the parent takes no copy-on-write fault after
 * a fork (agent/sample/fork_local.h); a fork child finds it zero-filled. */
static struct profile_pair profiles_fallback;
FORK_CHILD_DATA static struct profile_pair *profiles = &profiles_fallback; /* fork child reads */
/* Set once the agent runs: new threads get timers from then on. Acquire/release pairs
 * the constructor's set-up with the pthread_create wrapper reading it. */
/* On the page a fork child touches anyway: its destructor reads it (fork_local.h). */
FORK_CHILD_DATA _Atomic bool agent_running_flag;

/*
 * Samples during our fork handlers are harmless: the handler takes no lock and writes
 * only lock-free state, and in the child the timer is armed last. One exception, where
 * prepare blocks the sampling signal until the parent and child handlers ran (a system
 * call in each, which other forks do without): kernels before 5.0 restart a fork when a
 * signal arrives during it (the memory copy is thrown away): with the thread's CPU timer
 * running through the fork's kernel work, a fork longer than the period would never
 * finish (always_block_for_fork).
 * fork_unblock: this thread's prepare blocked it (it was not blocked before), written
 * only when it changes. forks_blocking counts such forks in flight: a fork child reads
 * its TLS only when it is not 0, and otherwise touches one page less.
 */
static bool always_block_for_fork;
static __thread bool fork_unblock __attribute__((tls_model("initial-exec")));
FORK_CHILD_DATA static _Atomic unsigned forks_blocking;

/* Kernel older than 5.0 ("signal: Don't restart fork when signals come in"), or
 * unknown: block the sampling signal around every fork. Start-up. */
static bool kernel_restarts_fork(void)
{
	struct utsname u;
	if (raw_syscall(SYS_uname, (long)&u, 0, 0, 0) != 0) /* not libc's: a code page less */
		return true;
	return digits_value(u.release, NULL) < 5;
}

/* Just the sampling signal; set at start-up, read only after (a fork child calling
 * sigemptyset would fault in one more page of libc's code; on the page the child
 * touches anyway, agent/sample/fork_local.h). */
FORK_CHILD_DATA static sigset_t sampling_set;

static void block_sampling_signal_if_needed(void)
{
	bool unblock = false;
	if (always_block_for_fork) {
		sigset_t old;
		sigemptyset(&old);
		raw_sigmask(SIG_BLOCK, &sampling_set, &old);
		unblock = sigismember(&old, sampler_signal()) != 1;
	}
	if (fork_unblock != unblock)
		fork_unblock = unblock;
	if (unblock)
		atomic_fetch_add_explicit(&forks_blocking, 1, memory_order_relaxed);
}

/* Only the sampling signal, and only if prepare blocked it: the rest of the mask is
 * left as the application's handlers leave it. */
static void restore_signal_mask_parent(void)
{
	if (fork_unblock) {
		raw_sigmask(SIG_UNBLOCK, &sampling_set, NULL);
		atomic_fetch_sub_explicit(&forks_blocking, 1, memory_order_relaxed);
	}
}

FORK_CHILD_PATH static void restore_signal_mask_child(void)
{
	/* The count is the parent's at fork; only this thread is here. */
	if (atomic_load_explicit(&forks_blocking, memory_order_relaxed) == 0)
		return;
	if (fork_unblock)
		raw_sigmask(SIG_UNBLOCK, &sampling_set, NULL);
	atomic_store_explicit(&forks_blocking, 0, memory_order_relaxed);
}

/* The memory and lock profiles asked for (start-up: agent_start installs them). */
static bool alloc_wanted, heap_wanted, lock_wanted, wall_wanted;
static uint64_t alloc_interval, heap_table_bytes, lock_interval_ns, wall_interval_ns;

int agent_init(const struct config *cfg)
{
	profiles = fork_local_or(&profiles_fallback, sizeof(*profiles));
	/* The profile starts now: the uploader thread may start much later (at the first
	 * need). A system call, not the vDSO, whose code and data pages /bin/true would
	 * not touch otherwise (start-up cost); 0 if it fails, and the thread then sets
	 * the start as it starts (uploader_main). */
	struct timespec now_rt;
	uint64_t start_ns = raw_syscall(SYS_clock_gettime, CLOCK_REALTIME, (long)&now_rt, 0, 0) == 0
				? timespec_ns(&now_rt)
				: 0;
	int rc = profiles_init(profiles, cfg->max_memory, start_ns);
	if (rc < 0) {
		log_error("cannot reserve %llu bytes for profiles (%s); profiling disabled",
			  (unsigned long long)cfg->max_memory, strerror(-rc));
		return rc;
	}
	uint64_t period_ns = NS_PER_SEC / cfg->cpu_hz;
	/* An empty module map first: until the tables are built, the DWARF unwinder
	 * reads the start-up modules' CFI straight from their memory (boot_cfi.h). */
	modules_init();
	boot_cfi_init();
	unwind_dwarf_place_counters();
	/* A seccomp filter may kill us on process_vm_readv: only the stack is read directly
	 * until the first module refresh has checked for one (reading /proc/self/status
	 * would be a noticeable share of a short program's start-up: BENCHMARKS.md). */
	unwind_dwarf_set_guarded_reads(false);
	int signo = sampler_init(profiles, period_ns, cfg->signal, unwind_dwarf);
	if (signo < 0) {
		log_error("no free signal for sampling; profiling disabled");
		return signo;
	}
	sigemptyset(&sampling_set);
	sigaddset(&sampling_set, signo);
	always_block_for_fork = kernel_restarts_fork();
	rc = threads_init(signo, period_ns);
	if (rc < 0) {
		log_error("cannot set up thread tracking (%s); profiling disabled", strerror(-rc));
		return rc;
	}
	sampler_set_enabled(true);
	alloc_wanted = cfg->allocation_enabled;
	heap_wanted = cfg->heap_enabled;
	alloc_interval = cfg->alloc_interval;
	heap_table_bytes = cfg->heap_table_bytes;
	lock_wanted = cfg->lock_enabled;
	lock_interval_ns = cfg->lock_interval_ns;
	wall_wanted = cfg->wall_enabled;
	wall_interval_ns = cfg->wall_interval_ns;
	if (alloc_wanted || heap_wanted || lock_wanted || wall_wanted)
		got_patch_place(fork_local_alloc(sizeof(pthread_mutex_t)));
	return signo;
}

/* Start-up: the kinds whose hooks were installed (the profile's columns beside CPU). */
static uint32_t hooked_kinds;

/* Start-up, sampling on: the allocation hooks, when an allocation or heap profile is
 * asked for. */
static void start_allocations(void)
{
	if (!alloc_wanted && !heap_wanted)
		return;
	alloc_sample_set_interval(alloc_interval);
	bool heap = false;
	if (heap_wanted) {
		int rc = live_heap_init(heap_table_bytes);
		if (rc < 0)
			log_warn("cannot map the live heap's table (%s); no heap profile",
				 strerror(-rc));
		heap = rc == 0;
	}
	if (!alloc_wanted && !heap)
		return;
	int rc = alloc_hooks_install(alloc_wanted);
	if (rc < 0) {
		log_warn("cannot hook the allocation functions (%s); no allocation or heap "
			 "profile",
			 strerror(-rc));
		return;
	}
	hooked_kinds |= (alloc_wanted ? PROFILE_KIND_BIT(PROFILE_ALLOC) : 0) |
			(heap ? PROFILE_KIND_BIT(PROFILE_HEAP) : 0);
}

/* Start-up, sampling on: the lock hooks, when a lock or wall profile is asked for (the
 * wall profile times mutex and condition waits there). */
static void start_locks(void)
{
	if (!lock_wanted && !wall_clock_on())
		return;
	lock_sample_set_interval(lock_interval_ns);
	int rc = lock_hooks_install(lock_wanted);
	if (rc < 0) {
		log_warn("cannot hook the lock functions (%s); no lock profile%s", strerror(-rc),
			 wall_clock_on() ? ", no lock waits in the wall profile" : "");
		return;
	}
	if (lock_wanted)
		hooked_kinds |= PROFILE_KIND_BIT(PROFILE_LOCK);
}

/* Start-up, sampling on: the wall hooks, when a wall profile is asked for. Its accounts
 * are on first: the lock hooks installed before may already time waits. */
static void start_wall(void)
{
	if (!wall_wanted)
		return;
	wall_clock_configure(true, wall_interval_ns);
	wall_threads_begin();
	int rc = wall_hooks_install();
	if (rc < 0) {
		wall_clock_configure(false, wall_interval_ns);
		log_warn("cannot hook the blocking calls (%s); no wall profile", strerror(-rc));
		return;
	}
	hooked_kinds |= PROFILE_KIND_BIT(PROFILE_WALL);
}

/* async-signal-safe */
int agent_sampling_signal(void)
{
	return agent_running() ? sampler_signal() : 0;
}

/* async-signal-safe */
int agent_mask_view(void)
{
	return mask_view_signal();
}

/* async-signal-safe */
bool agent_mask_blocked(void)
{
	return mask_view_blocked();
}

/* async-signal-safe */
void agent_mask_set_blocked(bool blocked)
{
	mask_view_set_blocked(blocked);
}

/* async-signal-safe */
bool agent_mask_hold(bool for_exec)
{
	if (agent_mask_view() <= 0)
		return false;
	return for_exec ? mask_view_hold_for_exec() : mask_view_hold();
}

/* async-signal-safe */
void agent_mask_let_go(bool held)
{
	mask_view_let_go(held);
}

void agent_start(void)
{
	/* Release pairs with the wrapper's acquire. New threads register themselves from
	 * now on, before the scan, so no thread is missed (one seen twice is armed once). */
	atomic_store_explicit(&agent_running_flag, true, memory_order_release);
	bool is_main = getpid() == sampler_gettid();
	/* The main thread's CPU before its timer (the exec's and the loader's page faults,
	 * earlier constructors): enough to matter in a short run's total. One system call
	 * (the vDSO does not serve CPU clocks). */
	struct timespec pre;
	if (is_main && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &pre) == 0) {
		uint64_t ns = timespec_ns(&pre);
		if (ns <= SAMPLER_STARTUP_CREDIT_MAX_NS)
			profiles_note_startup(profiles, sampler_gettid(), ns);
	}
	mask_view_start(sampler_signal());
	threads_start_self(is_main, 0);
	threads_scan_existing();
	start_allocations();
	start_wall();
	start_locks();
	if (hooked_kinds)
		agent_snapshot_set_kinds(hooked_kinds);
}

/* Unwind tables are built off the application's path, by the uploader thread (one
 * profiler thread: each thread costs every fork), or by a thread of their own if the
 * uploader's could not start. */
int agent_start_modules(const char *cache_dir, own_thread_create_fn create)
{
	cfi_cache_set_dir(cache_dir);
	return modules_start(create);
}

struct profile_pair *agent_profiles(void)
{
	return profiles;
}

void *agent_fork_local_alloc(size_t size)
{
	return fork_local_alloc(size);
}

FORK_CHILD_PATH void agent_stop(void)
{
	sampler_set_enabled(false);
}

struct thread_start *agent_thread_new(void *(*fn)(void *), void *arg, const pthread_attr_t *attr)
{
	/* No malloc: see agent/sample/thread_start.h. */
	struct thread_start *s = thread_start_alloc();
	if (!s)
		return NULL;
	s->fn = fn;
	s->arg = arg;
	s->stack_size = thread_start_stack_size(attr);
	s->sandboxed = sandbox_thread_active();
	s->sampling_masked = mask_view_blocked();
	return s;
}

void agent_thread_new_failed(struct thread_start *s)
{
	thread_start_release(s);
}

void agent_thread_begin(struct thread_start *s, struct thread_start *out)
{
	memcpy(out, s, sizeof(*out));
	thread_start_release(s);
	/* The creator's mask is the new thread's: the view's bit too. */
	mask_view_set_blocked(out->sampling_masked);
	/* Filters are inherited: a thread created under one makes no new kind of system
	 * call for us either (agent/sample/sandbox.h). */
	if (out->sandboxed) {
		sandbox_inherit();
		sandbox_count_skip();
	} else if (agent_running()) {
		/* Acquire pairs with the constructor's release: its set-up is visible. Not
		 * yet running: the start-up scan will find this thread. */
		threads_start_self(false, out->stack_size);
		wall_threads_begin();
	}
}

void agent_thread_end(const struct sampler_thread_root *root)
{
	/* A thread that started before the constructor ran (another library's
	 * constructor started it) ends here too: if the start-up scan armed its timer,
	 * its CPU since its last sample is accounted like any thread's. */
	/* Always (under a filter too): a registered account must leave the registry
	 * before the thread's memory goes. */
	wall_threads_end();
	if (agent_running() && !sandbox_thread_active())
		threads_exit_self(root);
}

void agent_module_loading(void)
{
	/* The profiler's own loads (libcurl, libdw and their dependencies, from the
	 * uploader thread) wait for the periodic rescan: the application rarely runs
	 * their code, and an exit flush should not compete with their tables. */
	if (agent_running() && !sampler_thread_is_internal() && !sandbox_thread_active())
		modules_notify_load();
	/* Every load, the profiler's too: its libraries' allocations on the application's
	 * threads are the application's (the hooks leave the profiler's threads alone). */
	alloc_hooks_notify();
	lock_hooks_notify();
	wall_hooks_notify();
}

bool agent_module_load_in_caller(void)
{
	/* Not in one of the application's signal handlers: the thread may hold the
	 * registry's lock in the call it interrupted. */
	return agent_running() && !sampler_thread_is_internal() && !sandbox_thread_active() &&
	       !app_signals_in_handler();
}

void agent_module_loaded(void)
{
	if (agent_module_load_in_caller() && modules_start_deferred()) {
		modules_load_sync();
		/* The host thread, started now if it was not (as a dlopen it does not watch
		 * would): it applies the GOT hooks to the new modules. */
		modules_start_host();
	}
	alloc_hooks_notify();
	lock_hooks_notify();
	wall_hooks_notify();
}

void agent_module_unloaded(void)
{
	if (agent_running() && !sampler_thread_is_internal() && !sandbox_thread_active())
		modules_notify();
	alloc_hooks_notify();
	lock_hooks_notify();
	wall_hooks_notify();
}

uint64_t agent_hooks_service(uint64_t now_ns)
{
	uint64_t a = alloc_hooks_service(now_ns), l = lock_hooks_service(now_ns),
		 w = wall_hooks_service(now_ns);
	uint64_t next = a < l ? a : l;
	return next < w ? next : w;
}

bool agent_hooks_rescan_wanted(void)
{
	return alloc_hooks_rescan_wanted() || lock_hooks_rescan_wanted() ||
	       wall_hooks_rescan_wanted();
}

void agent_watch_deaths(void (*hook)(int sig))
{
	/* Not SIGQUIT and the other signals whose default action dumps core: the core must
	 * show where the thread was, not our handler. Not SIGPIPE: a pipeline's writers die
	 * of it by design, at once. */
	static const int deaths[] = {SIGTERM, SIGINT, SIGHUP};
	if (agent_running())
		app_signals_watch_deaths(deaths, (int)(sizeof(deaths) / sizeof(deaths[0])), hook);
}

bool agent_may_work_here(void)
{
	return !sampler_thread_is_internal() && !app_signals_in_handler() &&
	       !sandbox_thread_active();
}

/* Whether a table of GOT hooks is applied (got_patch's fork handlers are then due). */
FORK_CHILD_PATH static bool any_hooks_installed(void)
{
	return alloc_hooks_installed() || lock_hooks_installed() || wall_hooks_installed();
}

void agent_atfork_prepare_first(void)
{
	block_sampling_signal_if_needed();
}

void agent_atfork_prepare(void)
{
	threads_atfork_prepare();
	modules_atfork_prepare();
	if (any_hooks_installed())
		got_patch_atfork_prepare();
}

void agent_atfork_parent(void)
{
	if (any_hooks_installed())
		got_patch_atfork_parent();
	modules_atfork_parent();
	threads_atfork_parent();
}

void agent_atfork_parent_last(void)
{
	restore_signal_mask_parent();
}

FORK_CHILD_PATH void agent_atfork_child(own_thread_create_fn create)
{
	/* A fresh profile: the parent's samples are the parent's to upload. */
	/* Start time 0: the uploader takes the process's start time when it first needs
	 * it (uploader.c). A clock read here would cost every child more pages touched
	 * (the read's stack or the vDSO's), a page fault each. */
	profiles_reinit_after_fork(profiles, 0);
	threads_atfork_child();
	thread_start_after_fork();
	modules_atfork_child(create);
	if (any_hooks_installed())
		got_patch_atfork_child();
	if (alloc_hooks_installed()) {
		alloc_sample_after_fork_child();
		live_heap_after_fork_child();
	}
	if (lock_hooks_installed())
		lock_hooks_after_fork_child();
	if (wall_hooks_installed())
		wall_threads_after_fork_child();
}

FORK_CHILD_PATH void agent_atfork_child_last(void)
{
	restore_signal_mask_child();
	app_signals_after_fork_child(threads_fork_child_pid());
	/* Last: from here on samples may land (harmless: see always_block_for_fork). Not
	 * under a seccomp filter: a timer is a new kind of system call
	 * (agent/sample/sandbox.h). */
	if (!sandbox_thread_active())
		threads_atfork_child_arm();
	else
		sandbox_count_skip();
}

/* async-signal-safe */
int agent_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return app_signals_sigaction(sig, act, old);
}

struct sandbox_state agent_sandbox_save(void)
{
	return sandbox_save();
}

void agent_sandbox_enter(bool every_thread)
{
	/* The calling thread's id read now, before the filter: the sampling handler uses
	 * the cached one from then on (agent/sample/sandbox.h). */
	(void)sampler_gettid();
	if (every_thread)
		sandbox_enter_process();
	else
		sandbox_enter_thread();
}

void agent_sandbox_restore(struct sandbox_state s)
{
	sandbox_restore(s);
}

void agent_get_diagnostics(struct agent_diagnostics *d)
{
	memset(d, 0, sizeof(*d));
	if (!agent_running())
		return;
	d->live_timers = threads_count();
	d->timer_failures = threads_timer_failures();
	d->timers_armed_late = threads_deferred_armed();
	d->foreign_signals = sampler_foreign_signals();
	d->app_signals = app_signals_forwarded();
	d->active_profile_bytes = region_used(&profiles_active(profiles)->region);
	d->signal = sampler_signal();
	struct modules_stats ms;
	modules_get_stats(&ms);
	d->unwind_tables = ms.tables;
	d->unwind_table_bytes = ms.table_bytes;
	d->unwind_table_build_ns = ms.build_ns;
	d->unwind_rules_unsupported = ms.rows_unsupported;
	struct unwind_stats us;
	unwind_dwarf_get_stats(&us);
	d->stacks_unwound = us.walks;
	d->stacks_incomplete = us.walks - us.complete - us.truncated;
	d->unwind_fp_fallbacks = us.fp_steps;
	d->boot_cfi_frames = us.boot_cfi_steps;
	struct cfi_cache_stats cs;
	cfi_cache_get_stats(&cs);
	d->unwind_cache_hits = cs.hits;
	d->unwind_cache_stored = cs.stored;
	d->unwind_cache_failures = cs.refused + cs.store_failures;
	d->sandbox_skips = sandbox_skips();
	d->alloc_samples = alloc_hooks_samples();
	struct live_heap_stats hs;
	live_heap_get_stats(&hs);
	d->heap_live_samples = hs.table.entries;
	d->heap_table_bytes = hs.table.bytes;
	d->heap_table_overflows = hs.table.overflows;
	d->heap_stacks = hs.stacks;
	d->heap_stacks_refused = hs.stacks_refused;
	d->heap_profiler_bytes = live_heap_on() ? live_heap_own_bytes(&hs) : 0;
	d->heap_compactions = hs.compactions;
	struct big_alloc_stats bs;
	big_alloc_stats(&bs);
	d->profiler_mapped_bytes = bs.mapped_bytes;
	struct perf_map_totals pt;
	perf_map_get_totals(&pt);
	d->jit_map_rejects = pt.rejects;
	d->jit_map_bad_lines = pt.bad_lines;
	d->jit_frames = pt.frames;
	struct lock_hooks_stats ls;
	lock_hooks_get_stats(&ls);
	d->lock_hooks_installed = lock_hooks_installed();
	d->lock_contended = ls.contended;
	d->lock_samples = ls.samples;
	d->lock_cond_waits = ls.cond_waits;
	struct wall_clock_stats ws;
	wall_clock_get_stats(&ws);
	d->wall_hooks_installed = wall_hooks_installed();
	d->wall_wait_samples = ws.wait_samples;
	d->wall_running_samples = ws.running_samples;
	d->wall_deferred_samples = ws.deferred_samples;
	d->wall_open_charged = wall_threads_open_charged();
	d->wall_unregistered_threads = wall_threads_unregistered();
}
