/*
 * profiles.c - red/black profiles (see profiles.h).
 *
 * This file is async-signal-safe: profiles_add runs in the sampling signal handler.
 * profiles_swap and profiles_reset run on the uploader thread and may sleep;
 * profiles_grow_if_needed maps memory, from any thread in normal context.
 */
#include "agent/store/profiles.h"
#include "agent/sample/fork_local.h"
#include "common/clock.h"
#include "common/process_start.h"
#include "common/sys_io.h"

#include <errno.h>
#include <string.h>
#include <time.h>

/* The uploader polls the writer count; handlers stay a few microseconds, so the first
 * poll nearly always succeeds. */
#define SWAP_POLL_NS 20000

/* Both regions as profiles_init left them, for a fork child that finds a pair on the
 * fork-local page zero-filled: written once, read only after. One pair per process
 * (the library's): profiles_init refuses a second one while the first is live. */
FORK_CHILD_DATA static struct region pristine[2];
/* Where each profile's chunks are mapped (agent/store/region.h): ordinary memory, which a
 * fork child inherits, unlike the pair on the fork-local page. Written only when a
 * region grows or shrinks (normal context, rarely). maps_owner: the pair they serve,
 * NULL once it is destroyed. */
static struct region_map region_maps[2];
static struct profile_pair *maps_owner;

/*
 * A fork child's pair on the fork-local page is set up again at its first use, not in
 * the fork handler: a child that never samples, uploads or flushes (most children of
 * a fork storm or a pre-fork server) never touches that page, one page fault less per
 * child. The state is on the FORK_CHILD_DATA page, which the child's fork handlers
 * write anyway and the parent only reads (READY, always).
 * PENDING: set in the fork handler; SETTING: one thread (or handler) is setting up.
 */
enum { PAIR_READY, PAIR_PENDING, PAIR_SETTING };
FORK_CHILD_DATA static _Atomic unsigned pending_state;
FORK_CHILD_DATA static struct profile_pair *pending_pair; /* set before PENDING */
FORK_CHILD_DATA static uint64_t pending_start_ns;
/* Samples a handler dropped because another thread (or the code it interrupted) was
 * setting up; moved into the next swapped-out profile. Written only in such a child
 * (and reset by every child's fork handler, on the page it writes anyway). */
FORK_CHILD_DATA static _Atomic uint64_t settle_dropped[PROFILE_KINDS][PROFILE_VALUES_MAX];

/* async-signal-safe. Adds values to counters (PROFILE_VALUES_MAX each: a kind's unused
 * values are 0, and a 0 costs no atomic add). A constant count: the loop unrolls. */
static inline void add_values(_Atomic uint64_t *counters, const uint64_t *values)
{
	for (uint32_t i = 0; i < PROFILE_VALUES_MAX; i++)
		if (values[i])
			atomic_fetch_add_explicit(&counters[i], values[i], memory_order_relaxed);
}

/* Whether any value of any kind waits in settle_dropped (relaxed reads). */
static bool settle_pending(void)
{
	for (int k = 0; k < PROFILE_KINDS; k++)
		for (int i = 0; i < PROFILE_VALUES_MAX; i++)
			if (atomic_load_explicit(&settle_dropped[k][i], memory_order_relaxed))
				return true;
	return false;
}

/* async-signal-safe. Sets up a pair the fork wiped, at its first use in the child:
 * what profiles_reinit_after_fork leaves pending (pending_state). */
static void set_up_wiped(struct profile_pair *pp)
{
	for (int i = 0; i < 2; i++) {
		/* Zero-filled in this child, so empty: only the set-up comes back. */
		pp->p[i].region = pristine[i];
		trie_init(&pp->p[i].trie, &pp->p[i].region);
		region_after_fork(&pp->p[i].region); /* a wiped region: counters only */
	}
	atomic_store_explicit(&pp->active, 0, memory_order_relaxed);
	pp->p[0].start_ns = pending_start_ns;
}

/* async-signal-safe. Whether pp may be used: set up first if it is a fork child's
 * pending pair. False only while another thread, or the code this handler interrupted,
 * is setting it up. */
static bool pair_usable(struct profile_pair *pp)
{
	/* acquire: pairs with the release store below, so that a thread that sees READY
	 * sees the set-up. Free on x86; in the parent the value never changes. */
	unsigned st = atomic_load_explicit(&pending_state, memory_order_acquire);
	if (__builtin_expect(st == PAIR_READY, 1) || pp != pending_pair)
		return true;
	/* acquire (on failure too): pairs with the release store below, when another
	 * thread's set-up is seen complete. */
	if (st == PAIR_PENDING &&
	    atomic_compare_exchange_strong_explicit(&pending_state, &st, PAIR_SETTING,
						    memory_order_acquire, memory_order_acquire)) {
		set_up_wiped(pp);
		/* release: publishes the set-up to the acquire loads above. */
		atomic_store_explicit(&pending_state, PAIR_READY, memory_order_release);
		return true;
	}
	return st == PAIR_READY;
}

/* Thread context (never a handler): waits out another thread's set-up, a few stores. */
static void pair_settle(struct profile_pair *pp)
{
	while (!pair_usable(pp)) {
		struct timespec ts = {0, 1000};
		sys_nanosleep(&ts, NULL);
	}
}

int profiles_init(struct profile_pair *pp, size_t ceiling, uint64_t now_ns)
{
	if (maps_owner && maps_owner != pp)
		return -EBUSY;
	/* The same pair again without profiles_destroy (tests that set up an agent per
	 * test in one process): its old chunks are abandoned, mapped. */
	memset(region_maps, 0, sizeof(region_maps));
	memset(pp, 0, sizeof(*pp));
	for (int i = 0; i < 2; i++) {
		int rc =
		    region_init(&pp->p[i].region, &region_maps[i], ceiling, PROFILE_FIRST_CHUNK);
		if (rc < 0) {
			if (i == 1)
				region_destroy(&pp->p[0].region);
			return rc;
		}
		trie_init(&pp->p[i].trie, &pp->p[i].region);
		pristine[i] = pp->p[i].region;
	}
	pp->p[0].start_ns = now_ns;
	atomic_init(&pp->active, 0);
	maps_owner = pp;
	return 0;
}

void profiles_destroy(struct profile_pair *pp)
{
	for (int i = 0; i < 2; i++)
		region_destroy(&pp->p[i].region);
	if (maps_owner == pp)
		maps_owner = NULL;
}

/* async-signal-safe */
void profiles_add(struct profile_pair *pp, enum profile_kind kind, int32_t tid,
		  const uintptr_t *pcs, uint32_t n, const uint64_t *values)
{
	if (!pair_usable(pp)) {
		add_values(settle_dropped[kind], values);
		return;
	}
	struct profile *p;
	for (;;) {
		/* seq_cst (all four Dekker accesses): pairs with the flip and the writer
		 * poll in profiles_swap. */
		unsigned idx = atomic_load_explicit(&pp->active, memory_order_seq_cst);
		p = &pp->p[idx];
		atomic_fetch_add_explicit(&p->writers, 1, memory_order_seq_cst);
		if (atomic_load_explicit(&pp->active, memory_order_seq_cst) == idx)
			break;
		/* A swap happened between the load and our entry: the swapper may already
		 * have seen zero writers. Leave and use the new active profile. */
		atomic_fetch_sub_explicit(&p->writers, 1, memory_order_release);
	}
	add_values(p->totals[kind], values);
	/* No region: a pair on the fork-local page, zero-filled in a child that was
	 * created without our fork handlers (_Fork, a raw clone): drop rather than crash. */
	struct trie_node *node =
	    p->trie.region ? trie_put(&p->trie, kind, tid, pcs, n, NULL) : NULL;
	add_values(node ? node->values : p->dropped[kind], values);
	/* Release: our counter and trie writes happen-before the swapper's acquire read
	 * of writers == 0, after which it serializes them. */
	atomic_fetch_sub_explicit(&p->writers, 1, memory_order_release);
}

void profiles_add_to(struct profile *p, enum profile_kind kind, int32_t tid, const uintptr_t *pcs,
		     uint32_t n, const uint64_t *values)
{
	add_values(p->totals[kind], values);
	struct trie_node *node = NULL;
	if (p->trie.region) {
		node = trie_put(&p->trie, kind, tid, pcs, n, NULL);
		/* Normal context: the memory a handler could not map, this caller can. */
		if (!node && region_grow(&p->region) == 0)
			node = trie_put(&p->trie, kind, tid, pcs, n, NULL);
	}
	add_values(node ? node->values : p->dropped[kind], values);
}

struct profile *profiles_active(struct profile_pair *pp)
{
	pair_settle(pp);
	return &pp->p[atomic_load_explicit(&pp->active, memory_order_acquire)];
}

/* The active profile when it asks for room, else NULL. */
static struct profile *wanting_room(struct profile_pair *pp)
{
	/* A fork child's pair not set up yet is empty: nothing to grow, and its page is
	 * not to be touched. Acquire: pairs with the release store in pair_usable (the
	 * set-up is visible once READY is). */
	if (atomic_load_explicit(&pending_state, memory_order_acquire) != PAIR_READY &&
	    pp == pending_pair)
		return NULL;
	/* Relaxed: a swap meanwhile makes this the profile just swapped out, whose growth
	 * is harmless (the swapper only reads its nodes); the next call sees the new one. */
	struct profile *p = &pp->p[atomic_load_explicit(&pp->active, memory_order_relaxed)];
	return region_wants_room(&p->region) ? p : NULL;
}

bool profiles_room_wanted(struct profile_pair *pp)
{
	return wanting_room(pp) != NULL;
}

int profiles_grow_if_needed(struct profile_pair *pp)
{
	struct profile *p = wanting_room(pp);
	return p ? region_grow(&p->region) : 0;
}

struct profile *profiles_swap(struct profile_pair *pp, uint64_t now_ns)
{
	pair_settle(pp);
	/* Only this thread writes active: relaxed read of our own value. */
	unsigned old = atomic_load_explicit(&pp->active, memory_order_relaxed);
	struct profile *next = &pp->p[old ^ 1];
	/* The next period likely needs about what this one used: mapped before the flip,
	 * not a few seconds of dropped stacks after it. */
	region_reserve(&next->region, region_used(&pp->p[old].region));
	next->start_ns = now_ns; /* published by the seq_cst store below */
	/* seq_cst: pairs with the handler's seq_cst re-check in profiles_record. */
	atomic_store_explicit(&pp->active, old ^ 1, memory_order_seq_cst);
	struct profile *p = &pp->p[old];
	/* seq_cst load (pairs with the handler's seq_cst increment) and acquire (pairs
	 * with the handler's release decrement: its writes are visible once we see 0). */
	while (atomic_load_explicit(&p->writers, memory_order_seq_cst) != 0) {
		struct timespec ts = {0, SWAP_POLL_NS};
		sys_nanosleep(&ts, NULL);
	}
	for (int k = 0; k < PROFILE_KINDS; k++) {
		for (int i = 0; i < PROFILE_VALUES_MAX; i++) {
			uint64_t lost = atomic_exchange_explicit(&settle_dropped[k][i], 0,
								 memory_order_relaxed);
			if (!lost)
				continue;
			atomic_fetch_add_explicit(&p->totals[k][i], lost, memory_order_relaxed);
			atomic_fetch_add_explicit(&p->dropped[k][i], lost, memory_order_relaxed);
		}
	}
	return p;
}

/* The profile's counters and trie, not its region. */
static void profile_clear(struct profile *p)
{
	trie_reset(&p->trie);
	for (int k = 0; k < PROFILE_KINDS; k++) {
		for (int i = 0; i < PROFILE_VALUES_MAX; i++) {
			atomic_store_explicit(&p->totals[k][i], 0, memory_order_relaxed);
			atomic_store_explicit(&p->dropped[k][i], 0, memory_order_relaxed);
		}
	}
}

void profiles_reset(struct profile *p)
{
	profile_clear(p);
	region_reset(&p->region);
}

FORK_CHILD_PATH bool profiles_empty(struct profile_pair *pp)
{
	/* A pending pair is empty, and reading it would touch its page. */
	if (atomic_load_explicit(&pending_state, memory_order_relaxed) != PAIR_READY &&
	    pp == pending_pair)
		return !settle_pending();
	return !profiles_has_data(&pp->p[0]) && !profiles_has_data(&pp->p[1]);
}

FORK_CHILD_PATH void profiles_reinit_after_fork(struct profile_pair *pp, uint64_t now_ns)
{
	/* Single-threaded here (fork child): plain resets are safe. */
	if (fork_local_owns(pp)) {
		/* Zero-filled in this child: set up at its first use (pair_usable). */
		pending_pair = pp;
		pending_start_ns = now_ns;
		atomic_store_explicit(&pending_state, PAIR_PENDING, memory_order_relaxed);
		for (int k = 0; k < PROFILE_KINDS; k++)
			for (int i = 0; i < PROFILE_VALUES_MAX; i++)
				atomic_store_explicit(&settle_dropped[k][i], 0,
						      memory_order_relaxed);
		return;
	}
	for (int i = 0; i < 2; i++) {
		region_after_fork(&pp->p[i].region); /* empty, every chunk kept */
		profile_clear(&pp->p[i]);
		atomic_store_explicit(&pp->p[i].writers, 0, memory_order_relaxed);
	}
	atomic_store_explicit(&pp->active, 0, memory_order_relaxed);
	pp->p[0].start_ns = now_ns;
	pp->startup_cpu_ns = 0; /* the parent's start-up is the parent's */
}

void profiles_note_startup(struct profile_pair *pp, int32_t tid, uint64_t cpu_ns)
{
	pp->startup_tid = tid;
	pp->startup_cpu_ns = cpu_ns;
}

uint64_t profiles_take_startup(struct profile_pair *pp, int32_t *tid)
{
	pair_settle(pp);
	uint64_t ns = pp->startup_cpu_ns;
	pp->startup_cpu_ns = 0;
	*tid = pp->startup_tid;
	return ns;
}

void profiles_start_if_unset(struct profile *p, uint64_t ns)
{
	if (p->start_ns == 0)
		p->start_ns = ns;
}

uint64_t profiles_start_ns(struct profile *p)
{
	if (p->start_ns == 0) {
		uint64_t t = process_start_realtime_ns();
		p->start_ns = t ? t : clock_now_ns(CLOCK_REALTIME);
	}
	return p->start_ns;
}
