/*
 * threads.h - the registry of sampled threads and their CPU-clock timers.
 *
 * Owns: one POSIX timer per sampled thread, on that thread's CPU clock, delivering the
 * sampling signal to that thread (SIGEV_THREAD_ID); the thread's name for labels.
 *  - threads_start_self: a thread arms its own timer (our pthread_create wrapper, the
 *    main thread), or registers for the deferred arming below;
 *    threads_scan_existing: arm the threads that existed before we loaded.
 *  - The first expiry is random in (0, period] so threads shorter than a period are
 *    sampled in proportion to their CPU time instead of never.
 *  - threads_exit_self deletes the timer at thread exit, adds the CPU no sample covered
 *    (agent/sample/sampler.h) (return, pthread_exit, cancel:
 *    a cleanup handler in our pthread_create trampoline) and forgets a thread that has
 *    no sample at once; threads_reap deletes timers of threads that ended without it
 *    (threads we did not create) and forgets them after their last upload.
 * Context: application threads at thread start/exit (normal context), the uploader
 * thread (reap, names), fork handlers. A mutex guards the registry; the fork prepare
 * handler takes it so the child never inherits it held.
 */
#ifndef DDPROF_AGENT_THREADS_H
#define DDPROF_AGENT_THREADS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define THREAD_NAME_MAX 16 /* TASK_COMM_LEN */

/* Normal context, once. Returns 0 or a negative errno. */
int threads_init(int signo, uint64_t period_ns);

/* Calling thread: set up handler state and arm its timer. is_main picks the stack
 * bounds method; stack_size is what the thread's creator asked for (0: unknown; see
 * stack_bounds_self). Allocates nothing in the common case. 0 or negative errno. */
int threads_start_self(bool is_main, size_t stack_size);

/* Calling thread is ending (normal context, called by the thread itself however it
 * ends: the caller arranges that, e.g. with pthread_cleanup_push). Idempotent. */
struct sampler_thread_root;
/* root: where an unsampled thread's CPU goes (sampler_thread_end); NULL: nowhere. */
void threads_exit_self(const struct sampler_thread_root *root);

/* Arms every thread in /proc/self/task that has no timer yet, except the caller.
 * Returns the number armed. */
int threads_scan_existing(void);

/* Uploader, once the profile's names are taken (threads_snapshot_names): deletes timers
 * of ended threads and forgets threads that ended before the previous call (their
 * samples were in an earlier profile). */
void threads_reap(void);

/* Uploader, before serializing: re-reads the names of live threads (threads rename
 * themselves after they start). */
void threads_refresh_names(void);

/*
 * Deferred arming, served by one background host (common/bg_host.h; the uploader's
 * thread): from threads_defer_arming on,
 * a new thread's timer is armed by threads_service once the thread has lived
 * THREADS_ARM_DELAY_NS, so the many threads of a churning process that end sooner cost
 * no timer system call at all (their CPU is still credited in full at their end:
 * sampler.h). A registration that finds the service asleep for longer than it may wait
 * (the delay plus 4 ms) kicks the host's service id (from the new thread, no lock of
 * ours held).
 *  - threads_defer_arming(h, id): enable (h NULL: disable; threads arm their own
 *    again).
 *  - threads_service(now): arms the due threads; returns when it next has work
 *    (CLOCK_MONOTONIC; UINT64_MAX: none until a registration).
 *  - threads_service_sleep(wake): before sleeping until wake; false: a registration
 *    came after the last threads_service, run it instead of sleeping.
 *  - threads_service_awake(): after waking.
 *  - threads_service_wanted(): a registration came after the last threads_service.
 * A fork child's threads arm their own timers until its own service is enabled.
 */
#define THREADS_ARM_DELAY_NS 1000000ULL
struct bg_host;
void threads_defer_arming(struct bg_host *h, unsigned id);
uint64_t threads_service(uint64_t now);
bool threads_service_sleep(uint64_t wake_ns);
void threads_service_awake(void);
bool threads_service_wanted(void);

/* Any thread but a signal handler: deletes every timer and arms none from now on (the
 * sampling signal was taken from us). */
void threads_stop_sampling(void);

/* Name of tid (live or ended since the last reap) into out; false if unknown. */
bool threads_name(pid_t tid, char out[THREAD_NAME_MAX]);

/* The names of the threads known now (live, and ended since the last reap; a live
 * thread's name where a tid was reused), a copy the registry's changes leave alone:
 * what a profile's encoder reads (agent/sample/thread_names.h). Normal context (it
 * allocates); out is empty if memory is short. */
struct thread_names;
void threads_snapshot_names(struct thread_names *out);

/* Live timers, for diagnostics and tests. */
size_t threads_count(void);
/* Entries held, live and ended (ended ones only if sampled), for tests. */
size_t threads_registered(void);
uint64_t threads_timer_failures(void);
/* Deferred arming: timers threads_service armed; timers it made for threads that ended
 * meanwhile (deleted at once). */
uint64_t threads_deferred_armed(void);
uint64_t threads_deferred_raced(void);

/* Fork: prepare locks the registry; parent unlocks; child forgets every parent thread
 * (their timers are not inherited) and arms the forking thread. */
void threads_atfork_prepare(void);
void threads_atfork_parent(void);
void threads_atfork_child(void);
/* Fork child, after threads_atfork_child: its pid (the forking thread is its only thread,
 * so its tid, which that handler read, is the pid): one system call less for others. */
pid_t threads_fork_child_pid(void);
/* Fork child, after threads_atfork_child and every other child handler of ours: arms
 * the child's timer (samples may land from then on). */
void threads_atfork_child_arm(void);

#endif
