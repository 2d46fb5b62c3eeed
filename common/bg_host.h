/*
 * bg_host.h - the background host: the table of services one profiler thread runs.
 *
 * In the style of jemalloc's background_thread.c: each service says, every time it
 * runs, when it is next due; the thread runs what is due and sleeps until the earliest.
 * A service is also run when kicked (bg_host_kick: work arrived) or when its wanted()
 * poll says so. Services run in table order, one at a time, with the host's lock
 * released; a service that waits (an upload on the network) may run the others that
 * allow it meanwhile (bg_host_run_nested).
 *
 * The host is the one documented seam through which a lower layer reaches a higher
 * one: agent modules kick their service by id (a call down into common/), and the
 * host runs the functions its owner (the uploader) put in the table, plus, for a kick
 * that asks to start the thread, the owner's start function.
 *
 * Locking: the owner's lock (h->lock) guards the kicks, the leave flag and the run
 * state. The thread sleeps on a futex word (h->wake_word) that every wake-up bumps,
 * under the lock or, for bg_host_leave_async, in a signal handler; the owner's
 * condition variable (h->cond, CLOCK_MONOTONIC) is broadcast too, for the owner's own
 * waiters. Due times are the thread's alone (h->thr, memory the
 * owner gives: a fork child never writes it, so a fork costs no copy of that page).
 * Context: normal context, but bg_host_leave_async (any context). The thread's functions
 * (bg_host_serve, bg_host_run_nested) are called by the host thread; kicks from any
 * thread.
 */
#ifndef DDPROF_COMMON_BG_HOST_H
#define DDPROF_COMMON_BG_HOST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define BG_HOST_SERVICES_MAX 8
/* A due time that never comes: the service runs only when kicked or wanted. */
#define BG_NEVER UINT64_MAX

struct bg_service {
	const char *name;
	/* Runs the work that is due; returns when the service is next due
	 * (CLOCK_MONOTONIC ns; BG_NEVER: at a kick or a wanted poll only). No host lock
	 * held. */
	uint64_t (*run)(void *arg, uint64_t now_ns);
	void *arg;
	/* Optional, any of them NULL: */
	/* Work is waiting now (a relaxed poll, host lock held: keep it to loads). */
	bool (*wanted)(void *arg);
	/* The thread is about to sleep until wake_ns (host lock held): false means work
	 * arrived after the service last ran, and the thread runs it instead. */
	bool (*before_sleep)(void *arg, uint64_t wake_ns);
	/* The thread woke up (host lock held). */
	void (*after_sleep)(void *arg);
	/* When the service first runs, relative to bg_host_serve's first call (0: at
	 * once; BG_NEVER: at its first kick). */
	uint64_t first_due_ns;
	/* It may run while another service waits (bg_host_run_nested). */
	bool nests;
};

/* The host thread's own memory (the owner's, outside the fork child's page: the
 * thread writes it at every turn). */
struct bg_host_thread {
	uint64_t due[BG_HOST_SERVICES_MAX];  /* when each service is next due */
	uint64_t runs[BG_HOST_SERVICES_MAX]; /* calls of each service's run */
	uint64_t sleeps;		     /* waits on the condition variable */
};

struct bg_host {
	pthread_mutex_t *lock;
	pthread_cond_t *cond;
	const struct bg_service *svc[BG_HOST_SERVICES_MAX];
	unsigned n;
	unsigned kicked;  /* lock: one bit per service */
	unsigned running; /* lock: services inside run (the nested ones too) */
	bool leave;	  /* lock: bg_host_serve returns; nested runs stop */
	bool clock_set;	  /* the thread: due[] holds the services' times */
	/* The thread runs, or is to start at the process's first need (the owner keeps it
	 * up to date): what a kick tells a service that would run a thread of its own. */
	_Atomic bool hosting;
	/* The owner's: starts the thread for a kick that asks to (bg_host_wake). Normal
	 * context, no host lock held; must not wait for the lock (it may be held by a
	 * fork prepare handler in the calling thread). */
	void (*start)(void);
	struct bg_host_thread *thr;  /* the thread's, given by the owner */
	uint64_t kicks;		     /* lock: kicks that reached the table */
	_Atomic uint64_t kicks_lost; /* try-kicks that found the lock busy */
	/* What the sleeping thread waits on (a futex): bumped by every wake-up, so that a
	 * signal handler, which may take no lock, can wake it too (bg_host_leave_async). */
	_Atomic uint32_t wake_word;
	_Atomic bool async_leave; /* bg_host_leave_async was called */
};

/* Sets h up with the owner's lock and condition variable, no service. thr: written by
 * the host thread only. */
void bg_host_init(struct bg_host *h, pthread_mutex_t *lock, pthread_cond_t *cond,
		  struct bg_host_thread *thr);
/* Adds s (it must outlive h) at the end of the table; returns its id, or -1 when the
 * table is full. Before the thread serves. */
int bg_host_add(struct bg_host *h, const struct bg_service *s);

/* Fork child (or a thread started again): no kick, no service running, not leaving;
 * the next bg_host_serve sets every service's first due time again. The table stays.
 * Touches only h itself. */
void bg_host_reset(struct bg_host *h);

/* Work for service id: it runs at the thread's next turn. Lock held by the caller. */
void bg_host_kick_locked(struct bg_host *h, unsigned id);
/* The same, taking the lock. */
void bg_host_kick(struct bg_host *h, unsigned id);
/* A kick that never waits for the lock (it may be held by a fork prepare handler in
 * this very thread): returns false when the lock was busy and the kick was dropped. */
bool bg_host_try_kick(struct bg_host *h, unsigned id);
/* The kick of a service that can run on a thread of its own instead: first asks the
 * owner to start the host's thread when start is set, then kicks without waiting.
 * Returns whether the host's thread runs or is to start (hosting). */
bool bg_host_wake(struct bg_host *h, unsigned id, bool start);

/* Lock held: bg_host_serve returns (with the lock held) at its next turn, and nested
 * runs stop. wake: every waiter on h->cond is woken; otherwise a sleeping thread
 * leaves when it next wakes (a process that exits need not wait for it). */
void bg_host_leave_locked(struct bg_host *h, bool wake);

/* async-signal-safe (a signal handler, no lock held): bg_host_serve returns at its next
 * turn, and nested runs stop, as after bg_host_leave_locked(h, true). The thread, if it
 * sleeps, wakes at once. */
void bg_host_leave_async(struct bg_host *h);

/* The host thread's loop, called and returning with the lock held: runs the services
 * that are due (kicked, wanted, or their time has come), in table order, one at a time
 * with the lock released, and sleeps until the earliest due time; returns when
 * bg_host_leave_locked was called (or at once if it was). */
void bg_host_serve(struct bg_host *h);

/* The host thread, inside a service's run (no lock held), while it waits: runs the
 * other services in mask (bit = 1u << id) that allow nesting, are not running and are
 * due. Returns at once when the host is leaving (or h is NULL). */
void bg_host_run_nested(struct bg_host *h, unsigned mask);

/* The earliest due time of the services (BG_NEVER if none): for tests and
 * diagnostics. The host thread, or a caller holding the lock while it sleeps. */
uint64_t bg_host_next_due(const struct bg_host *h);

#endif
