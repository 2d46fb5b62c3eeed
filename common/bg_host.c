/*
 * bg_host.c - the background host's table and loop (see bg_host.h).
 *
 * This file is async-signal-safe in bg_host_leave_async and wake_thread (C11 atomics
 * and the futex system call).
 * Context: normal context but there. bg_host_serve and bg_host_run_nested run on the
 * host thread; kicks come from any thread of the process, never from a signal handler.
 */
#include "bg_host.h"

#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>

#include "common/clock.h"
#include "common/fork_child.h"
#include "common/raw_syscall.h"
#include "common/sys_io.h"

void bg_host_init(struct bg_host *h, pthread_mutex_t *lock, pthread_cond_t *cond,
		  struct bg_host_thread *thr)
{
	memset(h, 0, sizeof(*h));
	h->lock = lock;
	h->cond = cond;
	h->thr = thr;
	memset(thr, 0, sizeof(*thr));
}

int bg_host_add(struct bg_host *h, const struct bg_service *s)
{
	if (h->n >= BG_HOST_SERVICES_MAX || !s->run)
		return -1;
	h->svc[h->n] = s;
	return (int)h->n++;
}

/* async-signal-safe. Wakes the thread from its sleep (the futex word moves). */
static void wake_thread(struct bg_host *h)
{
	/* Release pairs with the acquire load of the word before the thread sleeps: a
	 * thread that reads the new value also sees what the waker wrote first (a kick,
	 * async_leave). */
	atomic_fetch_add_explicit(&h->wake_word, 1, memory_order_release);
	raw_syscall(SYS_futex, (long)&h->wake_word, FUTEX_WAKE_PRIVATE, INT_MAX, 0);
}

/* Whether the thread is to leave (lock held: h->leave; from any context:
 * async_leave). */
static bool leaving(struct bg_host *h)
{
	/* Acquire pairs with bg_host_leave_async's release store. */
	return h->leave || atomic_load_explicit(&h->async_leave, memory_order_acquire);
}

/* async-signal-safe */
void bg_host_leave_async(struct bg_host *h)
{
	/* Release pairs with leaving()'s acquire load. */
	atomic_store_explicit(&h->async_leave, true, memory_order_release);
	wake_thread(h);
}

FORK_CHILD_PATH void bg_host_reset(struct bg_host *h)
{
	h->kicked = 0;
	h->running = 0;
	h->leave = false;
	atomic_store_explicit(&h->async_leave, false, memory_order_relaxed);
	h->clock_set = false;
	atomic_store_explicit(&h->hosting, false, memory_order_relaxed);
}

void bg_host_kick_locked(struct bg_host *h, unsigned id)
{
	if (id >= h->n)
		return;
	h->kicked |= 1u << id;
	h->kicks++;
	wake_thread(h);
	pthread_cond_broadcast(h->cond);
}

void bg_host_kick(struct bg_host *h, unsigned id)
{
	pthread_mutex_lock(h->lock);
	bg_host_kick_locked(h, id);
	pthread_mutex_unlock(h->lock);
}

bool bg_host_try_kick(struct bg_host *h, unsigned id)
{
	if (pthread_mutex_trylock(h->lock) != 0) {
		atomic_fetch_add_explicit(&h->kicks_lost, 1, memory_order_relaxed);
		return false;
	}
	bg_host_kick_locked(h, id);
	pthread_mutex_unlock(h->lock);
	return true;
}

/* Tries of bg_host_wake's kick, WAKE_PAUSE_NS apart: the host thread holds the lock
 * only while it picks a service, so a busy lock is free again within microseconds,
 * unless this very thread holds it (a fork prepare handler): then the kick is dropped
 * after about a millisecond. */
#define WAKE_TRIES 100
#define WAKE_PAUSE_NS 10000

bool bg_host_wake(struct bg_host *h, unsigned id, bool start)
{
	if (start && h->start)
		h->start();
	/* A kick lost in the end is found by the service's next due time. */
	for (int i = 0; i < WAKE_TRIES && !bg_host_try_kick(h, id); i++) {
		struct timespec ts = {0, WAKE_PAUSE_NS};
		sys_nanosleep(&ts, NULL);
	}
	/* Relaxed: the owner updates it under its lock; a caller that reads a stale
	 * "not hosting" starts its own thread, one more than needed, never one less. */
	return atomic_load_explicit(&h->hosting, memory_order_relaxed);
}

void bg_host_leave_locked(struct bg_host *h, bool wake)
{
	h->leave = true;
	if (wake) {
		wake_thread(h);
		pthread_cond_broadcast(h->cond);
	}
}

uint64_t bg_host_next_due(const struct bg_host *h)
{
	uint64_t t = BG_NEVER;
	for (unsigned i = 0; i < h->n; i++)
		if (h->thr->due[i] < t)
			t = h->thr->due[i];
	return t;
}

/* Lock held: the first service in mask (table order) that is not running and has work:
 * kicked, wanted, or due by now. -1 if none. */
static int find_due(struct bg_host *h, uint64_t now, unsigned mask)
{
	for (unsigned i = 0; i < h->n; i++) {
		unsigned bit = 1u << i;
		if (!(mask & bit) || (h->running & bit))
			continue;
		const struct bg_service *s = h->svc[i];
		if ((h->kicked & bit) || now >= h->thr->due[i] || (s->wanted && s->wanted(s->arg)))
			return (int)i;
	}
	return -1;
}

/* Lock held on entry and return: runs service i with the lock released. A kick that
 * comes while it runs is kept for the next turn. */
static void run_one(struct bg_host *h, unsigned i)
{
	unsigned bit = 1u << i;
	const struct bg_service *s = h->svc[i];
	h->kicked &= ~bit;
	h->running |= bit;
	pthread_mutex_unlock(h->lock);
	uint64_t next = s->run(s->arg, clock_now_ns(CLOCK_MONOTONIC));
	pthread_mutex_lock(h->lock);
	h->running &= ~bit;
	h->thr->due[i] = next;
	h->thr->runs[i]++;
}

static void set_clock(struct bg_host *h)
{
	uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
	for (unsigned i = 0; i < h->n; i++) {
		uint64_t d = h->svc[i]->first_due_ns;
		h->thr->due[i] = d == BG_NEVER ? BG_NEVER : now + d;
	}
	h->clock_set = true;
}

/* Lock held: tells every service the thread sleeps until wake; false when one has
 * work already: it is kicked, and every service told before it is told it woke. */
static bool may_sleep(struct bg_host *h, uint64_t wake)
{
	for (unsigned i = 0; i < h->n; i++) {
		const struct bg_service *s = h->svc[i];
		if (!s->before_sleep || s->before_sleep(s->arg, wake))
			continue;
		h->kicked |= 1u << i;
		for (unsigned j = 0; j < i; j++)
			if (h->svc[j]->after_sleep)
				h->svc[j]->after_sleep(h->svc[j]->arg);
		return false;
	}
	return true;
}

void bg_host_serve(struct bg_host *h)
{
	if (!h->clock_set)
		set_clock(h);
	while (!leaving(h)) {
		int i = find_due(h, clock_now_ns(CLOCK_MONOTONIC), ~0u);
		if (i >= 0) {
			run_one(h, (unsigned)i);
			continue;
		}
		uint64_t wake = bg_host_next_due(h);
		if (!may_sleep(h, wake))
			continue;
		h->thr->sleeps++;
		/* Read under the lock: a kick (which takes it) after this moves the word, and
		 * the wait returns at once. Acquire pairs with wake_thread's release. */
		uint32_t seen = atomic_load_explicit(&h->wake_word, memory_order_acquire);
		pthread_mutex_unlock(h->lock);
		/* Acquire pairs with bg_host_leave_async's release (h->leave is the lock's:
		 * a leave under it moves the word). */
		if (!atomic_load_explicit(&h->async_leave, memory_order_acquire)) {
			/* FUTEX_WAIT_BITSET: an absolute CLOCK_MONOTONIC deadline. */
			struct timespec ts = clock_ns_to_timespec(wake);
			raw_syscall6(SYS_futex, (long)&h->wake_word, FUTEX_WAIT_BITSET_PRIVATE,
				     seen, wake == BG_NEVER ? 0 : (long)&ts, 0,
				     FUTEX_BITSET_MATCH_ANY);
		}
		pthread_mutex_lock(h->lock);
		for (unsigned j = 0; j < h->n; j++)
			if (h->svc[j]->after_sleep)
				h->svc[j]->after_sleep(h->svc[j]->arg);
	}
}

void bg_host_run_nested(struct bg_host *h, unsigned mask)
{
	if (!h)
		return;
	unsigned nests = 0;
	for (unsigned i = 0; i < h->n; i++)
		if (h->svc[i]->nests)
			nests |= 1u << i;
	pthread_mutex_lock(h->lock);
	while (!leaving(h) && h->clock_set) {
		int i = find_due(h, clock_now_ns(CLOCK_MONOTONIC), mask & nests);
		if (i < 0)
			break;
		run_one(h, (unsigned)i);
	}
	pthread_mutex_unlock(h->lock);
}
