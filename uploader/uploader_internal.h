/*
 * uploader_internal.h - what the uploader's files share (uploader.c, the thread and its
 * control; upload_services.c, the thread's own services): the control block, the
 * configuration, the thread's symbolizer and its exit hint. Not for use outside
 * uploader/.
 * Context: as uploader.c (the control block under up_ctl.lock).
 */
#ifndef DDPROF_UPLOADER_UPLOADER_INTERNAL_H
#define DDPROF_UPLOADER_UPLOADER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"
#include "common/own_thread.h"

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
	bool warm_asked; /* this process forked: its first fork kicked the warm service */
	bool warming;	 /* the thread is in upload_cycle_warm (lock released) */
	bool quiesce;	 /* exit without a final profile (uploader_quiesce) */
	bool joinable;	 /* thread is this process's thread, not joined yet */
	pthread_t thread;
	struct own_stack stack; /* the thread's (common/own_thread.h) */
};

/* The control block (uploader.c). */
extern struct control up_ctl;
/* The configuration uploader_start was given. */
extern const struct config *up_cfg;
/* The running thread's symbolizer, the one a fork child inherits (uploader.c). */
extern struct symbolizer *up_live_sym;
/* The process is exiting (stop_thread): upload_cycle_warm gives up between modules.
 * Relaxed: a hint, read without the lock by the thread while it warms. */
extern _Atomic bool up_exiting;

/* The thread's services (upload_services.c), struct bg_service callbacks whose arg is
 * the thread's struct upload_ctx: one period's profile; the perf map's names every
 * tenth of a period; the symbol tables fork children need. */
uint64_t upload_service_run(void *arg, uint64_t now);
uint64_t jit_service_run(void *arg, uint64_t now);
uint64_t warm_service_run(void *arg, uint64_t now);
/* As the thread starts: when its first period ends (CLOCK_MONOTONIC). */
void upload_services_first(uint64_t due_ns);

#endif
