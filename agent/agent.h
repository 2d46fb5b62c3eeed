/*
 * agent.h - the agent's front door: everything the preload layer asks of the sampling
 * engine (start-up, a thread's begin and end, fork, dlopen/dlclose, the application's
 * signal dispositions and seccomp filters, diagnostics).
 *
 * Owns: the order in which the agent's rooms (sample/, unwind/, store/) are started and
 * taken through a fork, the profile pair the sampling handler records into, and whether
 * the agent runs. Each room keeps its own header, for the other rooms, the uploader
 * (which reads profiles, thread names and modules) and the unit tests; preload/ includes
 * only this one from agent/ and calls only what agent.c defines (scripts/check-layers
 * checks both). The room headers included below are here for their types only (struct
 * thread_start, struct sampler_thread_root, struct sandbox_state, struct profile_pair).
 * No function here calls into a room inline: every preload/ call into the agent is a
 * call into agent.o (one the layer check sees as such), and none is on an application
 * hot path that one more call would slow: the blocking-call wrappers' fast path
 * (preload/entry_points.c) calls only the uploader (agent_may_work_here is on their
 * cold path), and agent_running, which syscall() and prctl() read through
 * ddprof_status, is an inline load of a variable agent.c defines.
 * Context: each function says. Start-up runs in the constructor (one thread, before any
 * thread of ours exists); the fork functions in the fork handlers, in the order the
 * preload layer's handlers call them (preload/preload.c: the uploader's and the fork
 * guard's steps go between them).
 */
#ifndef DDPROF_AGENT_AGENT_H
#define DDPROF_AGENT_AGENT_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/sample/sampler.h"
#include "agent/sample/sandbox.h"
#include "agent/sample/thread_start.h"
#include "agent/store/profiles.h"
#include "common/config.h"
#include "common/own_thread.h"

/* ---------------------------------------------------------------- start and stop */

/* Start-up, first: maps the first chunks of both profiles (the profile pair on the
 * fork-local page when it has room), publishes an empty module map with the start-up
 * modules' CFI read from memory (agent/unwind/boot_cfi.h), picks and installs the
 * sampling signal (cfg->signal, else a free one), and sets up thread tracking; sampling
 * is enabled, no timer is armed yet. Returns the sampling signal's number, or a negative
 * errno after logging why (profiling is then off; the caller stops here). */
int agent_init(const struct config *cfg);

/* Start-up, after agent_init and once the fork handlers are registered: the agent runs
 * from here on (agent_running; new threads arm their timers), the main thread's CPU
 * before its timer is credited, and the calling thread's timer and those of the threads
 * that exist already are armed. */
void agent_start(void);

/* Start-up, after agent_start and uploader_start (which hands the module registry its
 * background host: modules_set_host): the unwind tables are built from here on, on the
 * host's thread, or on a thread of our own made with create when there is none.
 * cache_dir is the unwind table cache (NULL or "": none). 0 or a negative errno
 * (unwinding then uses frame pointers only). */
int agent_start_modules(const char *cache_dir, own_thread_create_fn create);

/* The profile pair the handler records into, for the uploader (uploader_start). Valid
 * once agent_init succeeded, for the process's life. */
struct profile_pair *agent_profiles(void);

/* Start-up, before the fork handlers are registered: size zeroed bytes on the agent's
 * fork-local page (agent/sample/fork_local.h), for a lock a fork handler takes; NULL
 * when the page has no room (the caller keeps ordinary memory). */
void *agent_fork_local_alloc(size_t size);

/* Exit (the destructor, a fork child's included): no sample is recorded from here on. */
void agent_stop(void);

/* Set by agent_start, read anywhere (fork children included: on their data page).
 * Acquire pairs with agent_start's release: the agent's start-up is visible. */
extern _Atomic bool agent_running_flag;
/* async-signal-safe. Whether the agent runs (agent_start ran). */
static inline bool agent_running(void)
{
	return atomic_load_explicit(&agent_running_flag, memory_order_acquire);
}

/* async-signal-safe. The sampling signal while the agent runs, else 0. */
int agent_sampling_signal(void);

/* async-signal-safe. The application's view of the sampling signal in its mask
 * (agent/sample/mask_view.h): the signal it is kept for (0: none; kept once the agent
 * started on a kernel that allows it), the calling thread's bit, and a real block for a
 * call whose child or new image inherits the mask (for_exec: a pending one is taken
 * too), undone by let_go. */
int agent_mask_view(void);
bool agent_mask_blocked(void);
void agent_mask_set_blocked(bool blocked);
bool agent_mask_hold(bool for_exec);
void agent_mask_let_go(bool held);

/* ---------------------------------------------------------------- threads */

/* Normal context, in pthread_create before the real one: the record a new thread reads
 * as it starts (agent_thread_begin), or NULL (no memory: the thread is created without
 * our trampoline, unsampled). No malloc in the common case (thread_start.h). */
struct thread_start *agent_thread_new(void *(*fn)(void *), void *arg, const pthread_attr_t *attr);
/* The real pthread_create failed: gives s back. */
void agent_thread_new_failed(struct thread_start *s);
/* Normal context, first thing in the new thread: copies s into out and gives s back;
 * arms the thread's timer when the agent runs (not running yet: the start-up scan will
 * find it), or, created under a seccomp filter, inherits it and arms none. */
void agent_thread_begin(struct thread_start *s, struct thread_start *out);
/* Normal context, the thread ending however it ends (a cleanup handler): deletes its
 * timer and adds its CPU no sample covered, at root for a thread never sampled. */
void agent_thread_end(const struct sampler_thread_root *root);

/* Normal context, the application called dlopen (before the real one: the registry
 * rescans until the new module shows up) or a dlclose succeeded. Nothing for the
 * profiler's own loads and threads, nor under a seccomp filter. */
void agent_module_loading(void);
void agent_module_unloaded(void);
/* Normal context, an application thread about to call dlopen: whether its own call may
 * build the new modules' unwind tables once the real dlopen returns (the agent runs,
 * the thread is the application's, no seccomp filter of its own, not inside one of the
 * application's signal handlers). When it may, the
 * caller calls agent_module_loaded after the load instead of agent_module_loading
 * before it. */
bool agent_module_load_in_caller(void);
/* Normal context, in the application's dlopen call after the real one returned a
 * module: the tables of the modules it loaded are built now, on this thread
 * (modules_load_sync); the host thread is started if it was not, and the hooks' GOT
 * rescans are asked for. */
void agent_module_loaded(void);

/* The host thread: applies the GOT hooks (allocation, lock, wall) to the modules loaded
 * since; returns when it is next due (UINT64_MAX: no hooks). rescan_wanted: whether a
 * load or unload asks for it sooner. */
uint64_t agent_hooks_service(uint64_t now_ns);
bool agent_hooks_rescan_wanted(void);

/* Normal context, start-up, after agent_start: SIGTERM, SIGINT and SIGHUP, where the
 * application leaves their default action (to die), call hook first in the thread they
 * are delivered to (async-signal-safe; it may wait, bounded), then kill the process as
 * the default action would (agent/sample/app_signals.h: app_signals_watch_deaths).
 * What a handler changes, which is why it is asked for (DD_PROFILING_FLUSH_ON_SIGNAL):
 * the kernel's default action kills at once, even a thread in a killable wait (a vfork
 * parent, I/O on a hung network file system), which the handler's thread leaves only
 * when the wait ends; the process's other threads run during the final profile (one
 * that exits meanwhile sets the exit status); the signals show as caught in
 * /proc/PID/status; a thread holding a lock the final profile needs makes it wait the
 * whole DD_PROFILING_EXIT_FLUSH_TIMEOUT and lose the profile. */
void agent_watch_deaths(void (*hook)(int sig));

/* Normal context or an application's signal handler: whether the calling thread may do
 * the profiler's work on the application's behalf (start a thread, map memory): not a
 * thread of ours, not inside one of the application's signal handlers, not under a
 * seccomp filter it installed. */
bool agent_may_work_here(void);

/* ---------------------------------------------------------------- fork */

/*
 * The agent's steps of the fork handlers, each where preload.c's handlers place it:
 *   prepare: agent_atfork_prepare_first, the fork guard's, the uploader's,
 *            agent_atfork_prepare;
 *   parent:  agent_atfork_parent, the uploader's, the fork guard's,
 *            agent_atfork_parent_last;
 *   child:   the fork guard's, agent_atfork_child, the uploader's,
 *            agent_atfork_child_last (which arms the child's timer: samples may land).
 * Each is called only when the agent runs (prepare saw agent_running).
 */
void agent_atfork_prepare_first(void); /* blocks the sampling signal if needed */
void agent_atfork_prepare(void);       /* the thread registry's and modules' locks */
void agent_atfork_parent(void);
void agent_atfork_parent_last(void); /* unblocks what prepare_first blocked */
/* A fresh profile, no parent thread, its module thread (created with create) unborn. */
void agent_atfork_child(own_thread_create_fn create);
void agent_atfork_child_last(void);

/* ---------------------------------------------------------------- the application's world */

/* async-signal-safe. sigaction as the application sees it (agent/sample/app_signals.h):
 * 0, or -1 with errno. */
int agent_sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* Normal context, in a thread about to install a seccomp filter (agent/sample/sandbox.h):
 * its state to give back if the filter is refused (agent_sandbox_restore), and the
 * profiler then makes no new kind of system call in it (every_thread: in any thread). */
struct sandbox_state agent_sandbox_save(void);
void agent_sandbox_enter(bool every_thread);
void agent_sandbox_restore(struct sandbox_state s);

/* ---------------------------------------------------------------- diagnostics */

/* The agent's part of ddprof_get_diagnostics (preload/ddprof.h says what each means). */
struct agent_diagnostics {
	uint64_t live_timers;
	uint64_t timer_failures;
	uint64_t timers_armed_late;
	uint64_t foreign_signals;
	uint64_t app_signals;
	uint64_t active_profile_bytes;
	int signal;
	uint64_t unwind_tables;
	uint64_t unwind_table_bytes;
	uint64_t unwind_table_build_ns;
	uint64_t stacks_unwound;
	uint64_t stacks_incomplete;
	uint64_t unwind_fp_fallbacks;
	uint64_t boot_cfi_frames;
	uint64_t unwind_rules_unsupported;
	uint64_t unwind_cache_hits;
	uint64_t unwind_cache_stored;
	uint64_t unwind_cache_failures;
	uint64_t sandbox_skips;
	uint64_t alloc_samples;
	uint64_t heap_live_samples;
	uint64_t heap_table_bytes;
	uint64_t heap_table_overflows;
	uint64_t heap_stacks;
	uint64_t heap_stacks_refused;
	uint64_t heap_profiler_bytes;
	uint64_t heap_compactions;
	uint64_t profiler_mapped_bytes;
	uint64_t jit_map_rejects;
	uint64_t jit_map_bad_lines;
	uint64_t jit_frames;
	uint64_t lock_hooks_installed;
	uint64_t lock_contended;
	uint64_t lock_samples;
	uint64_t lock_cond_waits;
	uint64_t wall_hooks_installed;
	uint64_t wall_wait_samples;
	uint64_t wall_running_samples;
	uint64_t wall_deferred_samples;
	uint64_t wall_open_charged;
	uint64_t wall_unregistered_threads;
};
/* Any thread but a signal handler; all zero while the agent does not run. */
void agent_get_diagnostics(struct agent_diagnostics *out);

#endif
