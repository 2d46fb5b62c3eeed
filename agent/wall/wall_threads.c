/*
 * wall_threads.c - the registry of wall accounts and the charge of open waits at a
 * snapshot (see wall_threads.h).
 * Context: normal context only (threads that begin and end, the host thread).
 */
#include "agent/wall/wall_threads.h"

#include <stdatomic.h>
#include <time.h>

#include "agent/sample/sampler.h"
#include "agent/wall/wall_clock.h"
#include "common/clock.h"
#include "common/fork_child.h"

static _Atomic(struct wall_account *) registry[WALL_THREADS_MAX];
/* Slots in use are below it (never lowered: the host's scan bound). */
static _Atomic uint32_t high_water;
/* The account the host is reading (its fields and its thread's stack), or NULL. */
static _Atomic(struct wall_account *) reading;
static _Atomic uint64_t unregistered, open_charged;

void wall_threads_begin(void)
{
	if (!wall_clock_on())
		return;
	struct wall_account *a = wall_clock_account(clock_now_ns(CLOCK_MONOTONIC));
	/* NULL: a reset of this thread's account is under way (a signal handler of the
	 * application that forked in the middle of it): left unregistered. */
	if (!a || atomic_load_explicit(&a->registered, memory_order_relaxed))
		return;
	pid_t tid = 0;
	uintptr_t lo = 0, hi = 0;
	sampler_thread_bounds(&tid, &lo, &hi);
	if (hi == 0)
		return; /* no known stack top: the host could not bound its reads */
	a->tid = tid;
	a->stack_hi = hi;
	/* Before the account is in a slot: the host checks it there. */
	atomic_store_explicit(&a->registered, true, memory_order_relaxed);
	for (uint32_t i = 0; i < WALL_THREADS_MAX; i++) {
		struct wall_account *none = NULL;
		if (atomic_load_explicit(&registry[i], memory_order_relaxed) != NULL)
			continue;
		/* Release pairs with the host's acquire load of the slot: tid and stack_hi
		 * are set for whoever finds the account. */
		if (atomic_compare_exchange_strong_explicit(
			&registry[i], &none, a, memory_order_release, memory_order_relaxed)) {
			uint32_t hw = atomic_load_explicit(&high_water, memory_order_relaxed);
			while (hw < i + 1 && !atomic_compare_exchange_weak_explicit(
						 &high_water, &hw, i + 1, memory_order_relaxed,
						 memory_order_relaxed))
				;
			return;
		}
	}
	atomic_store_explicit(&a->registered, false, memory_order_relaxed);
	atomic_fetch_add_explicit(&unregistered, 1, memory_order_relaxed);
}

void wall_threads_end(void)
{
	struct wall_account *a = &wall_clock_tls;
	if (!atomic_load_explicit(&a->registered, memory_order_relaxed))
		return;
	atomic_store_explicit(&a->registered, false, memory_order_relaxed);
	uint32_t hw = atomic_load_explicit(&high_water, memory_order_relaxed);
	for (uint32_t i = 0; i < hw; i++) {
		if (atomic_load_explicit(&registry[i], memory_order_relaxed) != a)
			continue;
		/* Seq_cst, with the load of reading below, against the host's store of
		 * reading and its load of the slot (a Dekker pair): either the host sees
		 * the slot empty and leaves the account alone, or this thread sees the host
		 * reading it and waits. */
		atomic_store_explicit(&registry[i], NULL, memory_order_seq_cst);
		break;
	}
	/* The host reads for one unwind: this thread's stack and TLS stay mapped until
	 * it is done. A spin, no system call: the thread may run under a seccomp filter. */
	while (atomic_load_explicit(&reading, memory_order_seq_cst) == a)
		__builtin_ia32_pause();
}

uint32_t wall_threads_charge_open(struct profile *p, uint64_t now_ns, uint64_t min_open_ns,
				  unwinder_fn unwind)
{
	static uintptr_t pcs[UNWIND_MAX_DEPTH];
	uint32_t charged = 0;
	uint32_t hw = atomic_load_explicit(&high_water, memory_order_relaxed);
	for (uint32_t i = 0; i < hw; i++) {
		/* Acquire pairs with the registration's release: tid and stack_hi. */
		struct wall_account *a = atomic_load_explicit(&registry[i], memory_order_acquire);
		if (!a)
			continue;
		/* Seq_cst: the Dekker pair with wall_threads_end (see there). */
		atomic_store_explicit(&reading, a, memory_order_seq_cst);
		if (atomic_load_explicit(&registry[i], memory_order_seq_cst) != a ||
		    !wall_clock_is_current(a)) {
			atomic_store_explicit(&reading, NULL, memory_order_seq_cst);
			continue;
		}
		/* Acquire pairs with the hook's release store: the registers and state are
		 * those of the wait that opened at c. */
		uint64_t c = atomic_load_explicit(&a->open_since, memory_order_acquire);
		uint64_t owed = atomic_load_explicit(&a->pending, memory_order_relaxed);
		if (c != 0 && c <= now_ns && now_ns - c + owed >= min_open_ns) {
			struct unwind_regs regs = {
			    .pc = atomic_load_explicit(&a->wait_pc, memory_order_relaxed),
			    .sp = atomic_load_explicit(&a->wait_sp, memory_order_relaxed),
			    .fp = atomic_load_explicit(&a->wait_fp, memory_order_relaxed),
			    .stack_hi = a->stack_hi,
			};
			uint32_t state = atomic_load_explicit(&a->wait_state, memory_order_relaxed);
			uint32_t n = 0;
			if (regs.sp < regs.stack_hi && state < WALL_STATES)
				n = unwind(&regs, pcs, UNWIND_MAX_DEPTH);
			/* Acq_rel pairs with the thread's exchange as its wait ends: one of the
			 * two charges [c, now_ns). A failure: the wait ended (or another began)
			 * while the stack was read; the thread charges it. */
			uint64_t expect = c;
			if (n > 0 && atomic_compare_exchange_strong_explicit(
					 &a->open_since, &expect, now_ns, memory_order_acq_rel,
					 memory_order_acquire)) {
				/* The thread's earlier waits not charged yet (refused by the
				 * budget, or short of a sample point) go with this one, as
				 * they would with its next sample. */
				uint64_t earlier =
				    atomic_exchange_explicit(&a->pending, 0, memory_order_relaxed);
				n = wall_clock_tag(pcs, n, (enum wall_state)state);
				const uint64_t v[PROFILE_VALUES_MAX] = {1, now_ns - c + earlier};
				profiles_add_to(p, PROFILE_WALL, a->tid, pcs, n, v);
				charged++;
			}
		}
		atomic_store_explicit(&reading, NULL, memory_order_seq_cst);
	}
	atomic_fetch_add_explicit(&open_charged, charged, memory_order_relaxed);
	return charged;
}

FORK_CHILD_PATH void wall_threads_after_fork_child(void)
{
	/* The forking thread's copy of its account says whether it was registered, so
	 * whether it has an end that unregisters it (wall_threads.h). */
	bool was_registered =
	    atomic_load_explicit(&wall_clock_tls.registered, memory_order_relaxed);
	/* The parent's other threads are not in the child; their stacks, where their
	 * accounts are, may be unmapped once the child starts threads of its own. The
	 * host may have been reading one at the fork. Relaxed: the child has one thread. */
	uint32_t hw = atomic_load_explicit(&high_water, memory_order_relaxed);
	for (uint32_t i = 0; i < hw; i++)
		if (atomic_load_explicit(&registry[i], memory_order_relaxed) != NULL)
			atomic_store_explicit(&registry[i], NULL, memory_order_relaxed);
	atomic_store_explicit(&high_water, 0, memory_order_relaxed);
	atomic_store_explicit(&reading, NULL, memory_order_relaxed);
	wall_clock_after_fork_child();
	if (was_registered)
		wall_threads_begin(); /* its account reset for the child, and registered */
}

uint64_t wall_threads_unregistered(void)
{
	return atomic_load_explicit(&unregistered, memory_order_relaxed);
}

uint64_t wall_threads_open_charged(void)
{
	return atomic_load_explicit(&open_charged, memory_order_relaxed);
}
