/*
 * uploader.h - the background thread that turns profiles into exports each period.
 *
 * Owns: the uploader thread, its period clock, the red/black swap schedule, the
 * symbolizer, the exporters (file, Datadog agent or agentless, Pyroscope; several at
 * once) and the upload counters. Every period: swap, wait for handlers to leave the old
 * profile (profiles_swap), serialize it (pprof + gzip), hand it to each exporter (HTTP
 * ones side by side, retried until shortly before the next swap), reset it, and reap
 * timers of ended threads.
 * Exit: one final profile is exported if it holds samples, one attempt per HTTP
 * exporter, waiting at most DD_PROFILING_EXIT_FLUSH_TIMEOUT; then it is dropped and
 * counted. uploader_stop runs from the destructor, or earlier from an atexit handler
 * registered once libcurl is loaded, so that it runs before the TLS library's own exit
 * cleanup; the second call is a no-op.
 * Context: start/stop/flush from application threads (normal context); the thread
 * itself is profiler-owned and never sampled; fork handlers. No lock that the thread
 * holds while serializing or on the network is ever taken by an application thread or
 * by the fork prepare handler (only ctl.lock, held for a few instructions at a time).
 */
#ifndef DDPROF_UPLOADER_UPLOADER_H
#define DDPROF_UPLOADER_UPLOADER_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>
#include <stdint.h>

#include "agent/store/profiles.h"
#include "common/config.h"
#include "common/own_thread.h"

/* The real pthread_create (the preload layer interposes the public one). */
typedef own_thread_create_fn thread_create_fn;

struct uploader_stats {
	uint64_t profiles_exported; /* profiles every exporter accepted */
	uint64_t export_failures;   /* deliveries (profile x exporter) that failed */
	uint64_t serialize_failures;
	uint64_t samples;	    /* samples in serialized profiles (incl. dropped) */
	uint64_t dropped_samples;   /* samples whose new stack was refused by the ceiling */
	uint64_t bytes_exported;    /* gzip pprof bytes of profiles every exporter accepted */
	uint64_t last_serialize_ns; /* wall time of the last serialization */
	uint64_t uploads_ok;	    /* deliveries (profile x exporter) accepted */
	uint64_t uploads_failed;    /* attempts that failed, retried ones included */
	uint64_t uploads_dropped;   /* deliveries given up: retries, 4xx, exit timeout */
	uint64_t bytes_sent;	    /* HTTP request bytes written, every attempt */
};

/* Start-up, before the fork handlers are registered: moves the control lock, which fork
 * prepare takes, to the fork-local page (agent/sample/fork_local.h). Idempotent. */
void uploader_place_lock(void);

/* Sets the uploader up. cfg and pp must outlive the uploader; create makes the thread
 * (libc's own pthread_create: never an application's wrapper, which may take locks of
 * its own). The thread starts at the process's first need, from a context where the
 * application called us: its first pthread_create, dlopen or dlclose, a blocking libc
 * call after its first sample (preload/entry_points.c), ddprof_flush, or uploader_stop
 * with samples (exit). Exporters are made by the thread as it starts. Returns 0. */
int uploader_start(const struct config *cfg, struct profile_pair *pp, thread_create_fn create);

/* Normal context, called by the application (never from one of its signal handlers): a
 * process whose thread is not started yet starts it now. Cheap otherwise: one relaxed
 * load. */
void uploader_ensure_thread(void);
/* Whether an application call has work for uploader_app_call (relaxed loads: the
 * entry points' fast path). Any context. */
bool uploader_app_call_wanted(void);
/* Normal context, called by the application (preload/entry_points.c): maps memory the
 * active profile asked for, and starts the thread if it is still to start and the
 * process has samples. */
void uploader_app_call(void);
/* Normal context: the thread stops without a final profile, and is not started again
 * until uploader_resume (a seccomp filter for every thread is about to be installed, or
 * the process must be single-threaded for unshare). Waits at most timeout_ns; returns
 * whether the thread is gone (or never ran). */
bool uploader_quiesce(uint64_t timeout_ns);
/* Normal context, after uploader_quiesce: the thread may start again at the next need
 * (the filter was refused, or the single-threaded moment is over). */
void uploader_resume(void);

/* Exports what is pending and stops the thread, waiting at most the configured
 * DD_PROFILING_EXIT_FLUSH_TIMEOUT (its default before uploader_start has run); past it
 * the final profile is dropped and counted. Idempotent: only the first call waits. */
void uploader_stop(void);

/* async-signal-safe. The process is dying of a signal (agent.h's death hook): asks the
 * thread, if this process has one running, for the final profile and waits for it,
 * polling, at most DD_PROFILING_EXIT_FLUSH_TIMEOUT. Returns whether it was made. Does
 * nothing (false) without a thread, in a child made without our fork handlers (a vfork
 * child), or under a seccomp filter the application installed. */
bool uploader_final_from_signal(void);

/* Uploads what is pending now and waits for it (at most timeout_ns). 0, -ETIMEDOUT,
 * or -ESRCH when the uploader is not running. */
int uploader_flush(uint64_t timeout_ns);

void uploader_get_stats(struct uploader_stats *out);
/* Whether the sampling signal was taken from us (sampling stopped). Any thread. */
bool uploader_signal_lost(void);
/* Whether this process's uploader thread was started. Any thread. */
bool uploader_thread_started(void);
/* In the application's own set*id or chroot call, before it changes anything: the
 * output directory kept open, and before the effective user goes from root to euid a
 * spool for euid in it (uploader/file_spool.h). Nothing without an output directory.
 * Normal context, any application thread. */
void uploader_before_euid_change(uid_t euid);
void uploader_before_chroot(void);
/* In the application's exec call, before it runs (preload/exec.c): uploads what was
 * sampled and waits for it, at most the exit flush timeout; at once when nothing was;
 * nothing in a vfork child or a child made without our fork handlers. Keeps errno. */
void uploader_before_exec(void);

void uploader_atfork_prepare(void);
void uploader_atfork_parent(void);
/* Fork child: the parent's thread does not exist here. A fresh one starts at the
 * child's first need (see uploader_start) and never touches state the parent's uploader may have
 * held (its libcurl handles are simply forgotten: they belong to the parent's thread's stack). */
void uploader_atfork_child(void);

#endif
