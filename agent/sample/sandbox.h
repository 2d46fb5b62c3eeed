/*
 * sandbox.h - what the application's seccomp filters leave the profiler.
 *
 * A seccomp filter cannot be read back, so from the moment a thread installs one (the
 * preload layer sees prctl(PR_SET_SECCOMP), seccomp(2) through syscall(); libseccomp
 * goes through them) the profiler makes, in that thread and in the threads it creates
 * afterwards, no kind of system call it did not make there before: no timer for new
 * threads, no end-of-thread accounting, no thread of ours started from it, no exit
 * flush from it, and the sampling handler reads the thread id it cached and only the
 * thread's stack (no process_vm_readv, in any thread once any filter exists). Sampling
 * goes on where it needs nothing new. A filter synchronized to every thread
 * (SECCOMP_FILTER_FLAG_TSYNC) makes the whole process sandboxed, the profiler's own
 * threads included: they are stopped before it is installed. What is skipped is
 * counted (sandbox_skips).
 * Filters the process had before the profiler loaded (a container runtime's) are not
 * known here: see unwind_dwarf_enable_guarded_reads for what is checked then.
 * Context: sandbox_enter_* in normal context, in the installing thread, before the
 * filter; the queries anywhere (async-signal-safe).
 */
#ifndef DDPROF_AGENT_SANDBOX_H
#define DDPROF_AGENT_SANDBOX_H

#include <stdbool.h>
#include <stdint.h>

/* Normal context: the calling thread is about to install a filter (strict mode, or a
 * filter for itself and the threads it creates). */
void sandbox_enter_thread(void);
/* Normal context: a filter for every thread of the process is about to be installed. */
void sandbox_enter_process(void);

/* The calling thread's flags, to give back when a filter was refused. */
struct sandbox_state {
	bool thread, process;
};
struct sandbox_state sandbox_save(void);
void sandbox_restore(struct sandbox_state s);

/* async-signal-safe. Whether the calling thread runs under a filter we saw installed. */
bool sandbox_thread_active(void);
/* async-signal-safe. Whether every thread does (SECCOMP_FILTER_FLAG_TSYNC). */
bool sandbox_process_active(void);
/* async-signal-safe. Whether any filter was installed since we loaded. */
bool sandbox_any(void);

/* Normal context, in a new thread: its creator was sandboxed (filters are inherited). */
void sandbox_inherit(void);

/* async-signal-safe. One piece of work skipped because of a filter. */
void sandbox_count_skip(void);
uint64_t sandbox_skips(void);

#endif
