/*
 * ddprof.h - the public C API of libddprof.
 *
 * Nothing is needed to profile a program: LD_PRELOAD=libddprof.so starts the agent.
 * A program that wants control links or dlsyms these functions. Every function returns
 * 0 or a negative errno, never exits, and is safe to call from any application thread
 * (not from a signal handler).
 */
#ifndef LIBDDPROF_DDPROF_H
#define LIBDDPROF_DDPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Filled by ddprof_get_diagnostics. Fields are only ever appended, never moved or
 * removed: a caller passes the size of the struct it was compiled with and gets the
 * fields that size covers, so a program built against an older header keeps working. */
struct ddprof_diagnostics {
	uint64_t samples;	    /* samples in exported or serialized profiles */
	uint64_t dropped_samples;   /* samples whose new stack exceeded the memory ceiling */
	uint64_t profiles_exported; /* profiles accepted by every exporter */
	uint64_t export_failures;   /* deliveries that failed for good */
	uint64_t serialize_failures;
	uint64_t bytes_exported;
	uint64_t live_timers;	       /* threads being sampled now */
	uint64_t timer_failures;       /* threads whose timer could not be created */
	uint64_t foreign_signals;      /* profiling signals not sent by our timers */
	uint64_t active_profile_bytes; /* memory used by the profile being filled */
	int signal;		       /* the signal used for sampling, 0 when not running */
	/* Deliveries: a delivery is one profile to one exporter (file, Datadog,
	 * Pyroscope). */
	uint64_t uploads_ok;	  /* deliveries accepted (HTTP 2xx, file written) */
	uint64_t uploads_failed;  /* attempts that failed, including retried ones */
	uint64_t uploads_dropped; /* deliveries given up: out of retries or time, 4xx,
				   * exit flush timeout (also counted in export_failures) */
	uint64_t bytes_sent;	  /* HTTP request bytes written, all attempts */
	/* DWARF unwinding and its tables. */
	uint64_t unwind_tables;		/* loaded modules with a CFI unwind table */
	uint64_t unwind_table_bytes;	/* memory of those tables */
	uint64_t unwind_table_build_ns; /* time the profiler spent building them */
	uint64_t stacks_unwound;	/* stacks walked by the DWARF unwinder */
	uint64_t stacks_incomplete;	/* of them, not ending in a root frame ([incomplete]) */
	uint64_t unwind_fp_fallbacks;	/* frames found by frame pointers (no table for pc) */
	/* Timers armed late: a thread the application creates gets its timer from the
	 * profiler's thread once it has lived 1 ms (shorter ones never need one). */
	uint64_t timers_armed_late; /* timers armed that way */
	/* The unwind table cache (DD_PROFILING_UNWIND_CACHE_DIR). */
	uint64_t unwind_cache_hits;	/* tables loaded from it instead of built */
	uint64_t unwind_cache_stored;	/* tables this process wrote to it */
	uint64_t unwind_cache_failures; /* files refused, tables it could not write */
	uint64_t uploader_started;	/* 1 once this process's uploader thread started
					 * (at the process's first need, not at start-up) */
	uint64_t sandbox_skips;		/* work skipped under a seccomp filter the application
					 * installed: threads left unsampled, thread starts and
					 * exit flushes not made (see README) */
	uint64_t app_signals;		/* signals of the sampling number not from our timers
					 * that ran the application's own handler */
	uint64_t boot_cfi_frames;	/* frames unwound from a module's CFI in memory,
					 * before its table was built */
	uint64_t signal_lost;		/* 1 once the application took the sampling signal
					 * without libc (raw rt_sigaction): sampling stopped */
	/* Allocation and live heap profiles (DD_PROFILING_ALLOCATION_ENABLED,
	 * DD_PROFILING_HEAP_ENABLED). */
	uint64_t alloc_samples;		/* sampled allocations recorded, the profiler's
					 * own included ("[profiler]") */
	uint64_t heap_live_samples;	/* sampled allocations tracked as alive now */
	uint64_t heap_table_bytes;	/* the table's mapping (DD_PROFILING_HEAP_TABLE_SIZE) */
	uint64_t heap_table_overflows;	/* sampled allocations not tracked: table full */
	uint64_t heap_stacks;		/* distinct stacks of tracked allocations kept */
	uint64_t heap_stacks_refused;	/* sampled allocations not tracked: stack store full */
	uint64_t heap_profiler_bytes;	/* the live heap's own memory: table pages written
					 * (at most) and the stack store; the heap profile's
					 * "[profiler]" inuse-space */
	uint64_t heap_compactions;	/* of the stacks kept for tracked allocations: those
					 * of freed ones dropped */
	uint64_t profiler_mapped_bytes; /* the profiler's large buffers (unwind and symbol
					 * tables, the encoder's), mapped directly rather
					 * than taken from the application's malloc */
	/* JIT code named from the perf map, /tmp/perf-<pid>.map (see README). */
	uint64_t jit_map_rejects;   /* upload periods that found the map and ignored it
				     * (not a regular file of ours, writable by others, huge) */
	uint64_t jit_map_bad_lines; /* lines of the map skipped: malformed or too long */
	uint64_t jit_frames;	    /* frames named from the map (once per distinct pc
				     * per profile) */
	/* Lock contention profile (DD_PROFILING_LOCK_ENABLED). */
	uint64_t lock_hooks_installed; /* 1 when the lock functions' GOT slots were pointed
					* at the profiler's hooks (0: lock profiling off) */
	uint64_t lock_contended;       /* lock acquisitions that found the lock busy (all,
					* sampled or not; the profiler's threads' left out) */
	uint64_t lock_samples;	       /* sampled waits recorded (lock-count, lock-time) */
	uint64_t lock_cond_waits;      /* condition waits whose mutex reacquisition was
					* measured (from a stamped wake-up to the return) */
	/* Wall-clock profile (DD_PROFILING_WALL_ENABLED). */
	uint64_t wall_hooks_installed;	    /* 1 when the blocking calls' GOT slots were pointed
					     * at the profiler's hooks (0: wall profiling off) */
	uint64_t wall_wait_samples;	    /* wall samples of waits (charged by the hooks) */
	uint64_t wall_running_samples;	    /* wall samples of running time (charged at CPU
					     * samples) */
	uint64_t wall_deferred_samples;	    /* wait samples the process's budget refused (their
					     * time charged later with the thread's next one) */
	uint64_t wall_open_charged;	    /* waits in progress charged at a snapshot */
	uint64_t wall_unregistered_threads; /* threads past the registry's room: their open
					     * waits are charged at their returns only */
	/* Unwind rules of the loaded modules' tables that the unwinder cannot evaluate
	 * (a CFA in another register, DWARF expressions other than the PLT's and the
	 * caller's SP loaded from a slot): a frame there is walked by frame pointers.
	 * Per library: the debug log's "modules:" lines. */
	uint64_t unwind_rules_unsupported;
};

/* 0 when the agent is running, -ENOTCONN when disabled or failed to start. */
int ddprof_status(void);

/* Serializes and exports what has been sampled so far, waiting at most timeout_ms.
 * 0, -ETIMEDOUT, or -ENOTCONN. */
int ddprof_flush(unsigned timeout_ms);

/* Fills *out (size = sizeof(*out); larger structs of later versions are zero-filled
 * past what this version knows). */
int ddprof_get_diagnostics(struct ddprof_diagnostics *out, size_t size);

#ifdef __cplusplus
}
#endif

#endif
