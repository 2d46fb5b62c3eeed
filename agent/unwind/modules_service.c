/*
 * modules_service.c - the service that drives the module registry (see modules.h):
 * when the registry rescans and builds tables, and on which thread.
 *
 * Owns: the control state (ctl_lock, ctl_cond, the notify and ready generations, when
 * the service is next due, the first scan's wait for boot CFI, the load polls, the
 * dirty flag), modules_service, the thread of our own that runs it when no host does
 * ("ddprof-modules": modules_thread, start_own_thread, modules_host_failed), starting
 * and stopping the work (modules_start, modules_stop, modules_start_deferred), the
 * wake-ups (modules_notify, modules_notify_load, modules_wait_ready) and a fork
 * child's reset of that state (modules_service_after_fork). The scan, the records,
 * the tables and the map are the registry's (agent/unwind/modules.c), reached through
 * modules_rescan (agent/unwind/modules_internal.h).
 *
 * Context: normal context only. modules_service runs on the host's thread (the
 * uploader's, modules_set_host) or on ours; modules_notify and modules_notify_load on
 * any application thread, from the preload layer's dlopen/dlclose hooks; modules_start,
 * modules_stop and modules_start_deferred on the thread that starts, stops or first
 * needs the work; modules_service_init and modules_service_after_fork at start-up and
 * in a fork child (single-threaded).
 *
 * Locks: ctl_lock guards the thread's wake-up flags and generations; it is held only
 * for a few stores, never across a rescan (modules_rescan takes the registry's locks).
 * Invariant: ready_gen <= notify_gen; ready_gen is the last notify_gen whose rescan
 * has finished (modules_wait_ready waits for it).
 */
#include "agent/unwind/modules.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "agent/unwind/boot_cfi.h"
#include "agent/unwind/modules_internal.h"
#include "agent/unwind/unwind.h"
#include "common/bg_host.h"
#include "common/clock.h"
#include "common/fork_child.h"
#include "common/log.h"
#include "common/own_thread.h"

#define RESCAN_INTERVAL_NS (2ULL * NS_PER_SEC) /* catches libc's own dlopens */
#define STOP_TIMEOUT_NS (1ULL * NS_PER_SEC)
/* After a dlopen starts, rescan every LOAD_POLL_NS until a new module appears, at most
 * LOAD_POLLS times (a dlopen with many dependencies and constructors can take long). */
#define LOAD_POLL_NS (2ULL * 1000000ULL)
#define LOAD_POLLS 100
/* A scan that finds a new module may have caught the load midway (the library is
 * mapped before its dependencies): a few polls more find the rest. */
#define LOAD_POLLS_AFTER_CHANGE 5
/* The first scan. A process that lives a few milliseconds (a shell command) should not
 * pay for tables it never uses, nor wait at exit for work on them. Where the start-up
 * modules can be unwound from their CFI in memory (agent/unwind/boot_cfi.h: a slower walk,
 * as complete), tables only make later samples cheaper: they wait a second, so a program
 * that runs for less never builds them (milliseconds of CPU even with a warm cache,
 * taken from the application's cores in its first moments). A dlopen or dlclose scans
 * at once either way. Without boot CFI, samples walk frame pointers until the scan. */
#define START_DELAY_NS (1 * 1000000L)
#define START_DELAY_BOOT_CFI_NS (1000 * 1000000L)
/* While the first scan waits for START_DELAY_BOOT_CFI_NS, the service looks every
 * BOOT_POLL_NS at how many frames the samples walked from CFI in memory: past
 * BOOT_BUSY_FRAMES (a program that allocates a lot under allocation profiling samples
 * thousands of stacks a second) the tables pay for themselves at once, and the scan is
 * made then. */
#define BOOT_POLL_NS (50 * 1000000L)
#define BOOT_BUSY_FRAMES 5000
/* Nor does it wait while walks end incomplete: code the start-up modules' CFI does not
 * cover (a Go program's, which has none in .eh_frame, and whose roots only its table
 * marks: cfi_roots.h) is being sampled, and only tables make those walks whole. */
#define BOOT_INCOMPLETE_WALKS 20

FORK_CHILD_DATA static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
FORK_CHILD_DATA static pthread_cond_t ctl_cond;
FORK_CHILD_DATA static bool ctl_stop, ctl_running;
FORK_CHILD_DATA static struct own_stack ctl_stack; /* our thread's (common/own_thread.h) */
/* Rescans left while waiting for a dlopen to finish: set by any thread without the
 * lock (relaxed: the thread re-reads it under ctl_lock after every wake-up). */
FORK_CHILD_DATA static _Atomic unsigned load_polls;
static _Atomic bool dirty;	       /* a dlclose returned: rescan at the next wake-up */
static uint64_t notify_gen, ready_gen; /* ready_gen: last notify_gen fully built */
static pthread_t ctl_thread;
FORK_CHILD_DATA static bool own_thread; /* ctl_thread runs the service (not hosted) */
/* Fork child: the thread is started on the first dlopen/dlclose only (the inherited map
 * already covers every module); a short-lived child never pays for it. */
FORK_CHILD_DATA static modules_thread_create_fn lazy_create;

/* Set by modules_set_host: the background host whose thread runs modules_service (the
 * uploader's), and the service's id in its table. */
static struct bg_host *host;
static unsigned host_id;
FORK_CHILD_DATA static uint64_t next_due_ns = UINT64_MAX; /* ctl_lock; CLOCK_MONOTONIC */
/* ctl_lock: until when the first scan waits for boot CFI's samples (0: it does not). */
static uint64_t boot_deadline_ns;
/* The service's thread only: the seccomp check for guarded reads is done (a fork child
 * inherits the answer with the filters). */
static bool guard_checked;

/* Start-up and a fork child (modules_init): the wake-up condition, fresh. */
FORK_CHILD_PATH void modules_service_init(void)
{
	/* An assignment, not pthread_cond_init: waits name their clock (clockwait), and a
	 * fork child touches no code page of libc's for it (common/raw_syscall.h). */
	pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
	ctl_cond = fresh;
}

bool modules_rescan_pending(void)
{
	return atomic_load_explicit(&dirty, memory_order_relaxed);
}

void modules_set_host(struct bg_host *h, unsigned id)
{
	host = h;
	host_id = id;
}

uint64_t modules_service(uint64_t now_ns)
{
	pthread_mutex_lock(&ctl_lock);
	uint64_t gen = notify_gen;
	bool active = ctl_running && !ctl_stop;
	bool due = active && (gen != ready_gen || now_ns >= next_due_ns);
	uint64_t next = active ? next_due_ns : UINT64_MAX;
	pthread_mutex_unlock(&ctl_lock);
	if (active && !guard_checked) {
		/* The service's first call, off the application's path (the first scan may
		 * be a second away): see unwind_dwarf_set_guarded_reads. */
		guard_checked = true;
		if (!unwind_dwarf_enable_guarded_reads(NULL))
			log_debug("seccomp filter active: unwinding reads only the thread's stack");
	}
	if (!due)
		return next;
	if (gen == ready_gen && now_ns < boot_deadline_ns) {
		struct unwind_stats us;
		unwind_dwarf_get_stats(&us);
		if (us.boot_cfi_steps < BOOT_BUSY_FRAMES &&
		    us.walks - us.complete - us.truncated < BOOT_INCOMPLETE_WALKS) {
			pthread_mutex_lock(&ctl_lock);
			uint64_t poll = now_ns + BOOT_POLL_NS;
			next_due_ns = poll < boot_deadline_ns ? poll : boot_deadline_ns;
			next = next_due_ns;
			pthread_mutex_unlock(&ctl_lock);
			return next;
		}
	}
	pthread_mutex_lock(&ctl_lock);
	boot_deadline_ns = 0; /* the first scan is being made */
	pthread_mutex_unlock(&ctl_lock);
	bool changed = false;
	modules_rescan(&changed, MODULES_BUILD_ALL);
	pthread_mutex_lock(&ctl_lock);
	ready_gen = gen;
	if (changed &&
	    atomic_load_explicit(&load_polls, memory_order_relaxed) > LOAD_POLLS_AFTER_CHANGE)
		atomic_store_explicit(&load_polls, LOAD_POLLS_AFTER_CHANGE, memory_order_relaxed);
	pthread_cond_broadcast(&ctl_cond); /* modules_wait_ready */
	uint64_t wait = RESCAN_INTERVAL_NS;
	unsigned polls = atomic_load_explicit(&load_polls, memory_order_relaxed);
	if (polls > 0 || atomic_exchange_explicit(&dirty, false, memory_order_relaxed)) {
		if (polls > 0)
			atomic_fetch_sub_explicit(&load_polls, 1, memory_order_relaxed);
		wait = LOAD_POLL_NS;
	}
	/* A notify during the refresh: due again at once. */
	next_due_ns = notify_gen != gen ? 0 : clock_now_ns(CLOCK_MONOTONIC) + wait;
	next = ctl_stop ? UINT64_MAX : next_due_ns;
	pthread_mutex_unlock(&ctl_lock);
	return next;
}

/* Our own thread, when no host runs the service (unit tests, or the uploader thread
 * could not be started). */
static void *modules_thread(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ddprof-modules");
	for (;;) {
		uint64_t next = modules_service(clock_now_ns(CLOCK_MONOTONIC));
		pthread_mutex_lock(&ctl_lock);
		if (ctl_stop) {
			pthread_mutex_unlock(&ctl_lock);
			break;
		}
		if (notify_gen == ready_gen && next > clock_now_ns(CLOCK_MONOTONIC)) {
			struct timespec ts = clock_ns_to_timespec(next);
			pthread_cond_clockwait(&ctl_cond, &ctl_lock, CLOCK_MONOTONIC, &ts);
		}
		pthread_mutex_unlock(&ctl_lock);
	}
	return NULL;
}

static int start_own_thread(modules_thread_create_fn create);

int modules_start(modules_thread_create_fn create)
{
	pthread_mutex_lock(&ctl_lock);
	ctl_stop = false;
	/* See START_DELAY_NS and BOOT_POLL_NS. */
	uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
	if (boot_cfi_covers_roots()) {
		boot_deadline_ns = now + START_DELAY_BOOT_CFI_NS;
		next_due_ns = now + BOOT_POLL_NS;
	} else {
		boot_deadline_ns = 0;
		next_due_ns = now + START_DELAY_NS;
	}
	ctl_running = true;
	pthread_mutex_unlock(&ctl_lock);
	/* Hosted: the uploader thread runs the service, so the process has one profiler
	 * thread, not two (each one costs every fork: its stack mappings and its malloc
	 * arena, which glibc locks and unlocks around fork). */
	if (host && bg_host_wake(host, host_id, false))
		return 0;
	return start_own_thread(create);
}

/* The thread never takes a profiling signal: it is never sampled, and a handler must
 * not run inside the writer side of the grace scheme. */
static int start_own_thread(modules_thread_create_fn create)
{
	int rc = own_thread_create(&ctl_stack, PROFILER_THREAD_STACK_BYTES, create, &ctl_thread,
				   modules_thread, NULL);
	if (rc != 0) {
		pthread_mutex_lock(&ctl_lock);
		ctl_running = false;
		pthread_mutex_unlock(&ctl_lock);
		return rc;
	}
	own_thread = true;
	return 0;
}

void modules_host_failed(modules_thread_create_fn create)
{
	pthread_mutex_lock(&ctl_lock);
	bool orphaned = ctl_running && !ctl_stop && !own_thread;
	pthread_mutex_unlock(&ctl_lock);
	if (orphaned)
		start_own_thread(create);
}

void modules_stop(void)
{
	if (!ctl_running)
		return;
	pthread_mutex_lock(&ctl_lock);
	ctl_stop = true;
	pthread_cond_broadcast(&ctl_cond);
	pthread_mutex_unlock(&ctl_lock);
	if (!own_thread)
		return;
	/* Bounded: the thread may be in the middle of a large table. */
	struct timespec ts = clock_ns_to_timespec(clock_now_ns(CLOCK_REALTIME) + STOP_TIMEOUT_NS);
	if (pthread_timedjoin_np(ctl_thread, NULL, &ts) == 0) {
		own_thread_stack_release(&ctl_stack);
		ctl_running = false;
		own_thread = false;
	}
}

/* Wakes whoever runs the service: our thread (ctl_cond, broadcast by the caller) or
 * the host. Called without ctl_lock. */
static void wake_service(void)
{
	if (host && !own_thread)
		bg_host_wake(host, host_id, true);
}

/* A fork child's first dlopen/dlclose starts the deferred work (normal context). */
bool modules_start_deferred(void)
{
	if (ctl_running)
		return true;
	modules_thread_create_fn create = lazy_create;
	if (!create)
		return false;
	pthread_mutex_lock(&ctl_lock);
	bool mine = lazy_create != NULL;
	lazy_create = NULL;
	pthread_mutex_unlock(&ctl_lock);
	if (mine)
		modules_start(create);
	return ctl_running;
}

void modules_start_host(void)
{
	if (host && !own_thread)
		bg_host_wake(host, host_id, true);
}

/* Cheap on the application's path: a store, and a wake-up only when the thread sleeps
 * its long interval (while it polls every LOAD_POLL_NS it sees the flags anyway). */
void modules_notify(void)
{
	if (!modules_start_deferred())
		return;
	atomic_store_explicit(&dirty, true, memory_order_relaxed);
	if (atomic_load_explicit(&load_polls, memory_order_relaxed) > 0)
		return;
	pthread_mutex_lock(&ctl_lock);
	notify_gen++;
	pthread_cond_broadcast(&ctl_cond);
	pthread_mutex_unlock(&ctl_lock);
	wake_service();
}

void modules_notify_load(void)
{
	if (!modules_start_deferred())
		return;
	if (atomic_exchange_explicit(&load_polls, LOAD_POLLS, memory_order_relaxed) > 0)
		return; /* already polling */
	pthread_mutex_lock(&ctl_lock);
	notify_gen++;
	pthread_cond_broadcast(&ctl_cond);
	pthread_mutex_unlock(&ctl_lock);
	wake_service();
}

int modules_wait_ready(uint64_t timeout_ns)
{
	if (!ctl_running)
		return modules_refresh() < 0 ? -EIO : 0;
	uint64_t deadline = clock_now_ns(CLOCK_MONOTONIC) + timeout_ns;
	pthread_mutex_lock(&ctl_lock);
	uint64_t want = ++notify_gen;
	pthread_cond_broadcast(&ctl_cond);
	pthread_mutex_unlock(&ctl_lock);
	wake_service();
	pthread_mutex_lock(&ctl_lock);
	int rc = 0;
	while (ready_gen < want) {
		struct timespec ts = clock_ns_to_timespec(deadline);
		if (pthread_cond_clockwait(&ctl_cond, &ctl_lock, CLOCK_MONOTONIC, &ts) ==
		    ETIMEDOUT) {
			rc = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&ctl_lock);
	return rc;
}

/* Fork child: one thread, the forking one (modules_atfork_child). The parent's modules
 * thread is gone; the work starts again on the child's first dlopen/dlclose. */
FORK_CHILD_PATH void modules_service_after_fork(modules_thread_create_fn create)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	ctl_lock = fresh;
	atomic_store_explicit(&load_polls, 0, memory_order_relaxed);
	ctl_running = false;
	ctl_stop = false;
	own_thread = false; /* the parent's thread is not in the child */
	own_thread_stack_after_fork(&ctl_stack);
	next_due_ns = UINT64_MAX;
	lazy_create = create;
}
