/*
 * test_profile_swap.c - unit tests of agent/store/profiles.c: the red/black profile pair.
 *
 * The invariant under test: a sample recorded by profiles_record lands in exactly one
 * profile that profiles_swap later returns, after every writer left it. WRITERS threads
 * record in a loop (a few shared stacks plus a stream of new ones) while the test
 * thread swaps about every millisecond, sums each returned profile (trie nodes plus
 * dropped counters) and resets it. The sums must equal what the writers recorded, to
 * the sample and to the nanosecond, while the test thread also maps memory for the
 * active profile as it asks (the writers allocate across chunks being mapped).
 * STRESS_SECONDS (default 1) sets the duration. Smaller tests check alternation,
 * waiting for writers, reset, the fork reinit, and the profiles' memory: what one
 * records before any growth, growth on demand, the next profile mapped at a swap.
 */
#include "agent/store/profiles.h"
#include "agent/sample/fork_local.h"

#include <check.h>

#include "test/unit/check_run.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define WRITERS 4
#define SHARED_STACKS 32
#define MAX_DEPTH 32
#define SWAP_PERIOD_NS 1000000 /* 1 ms */

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ULL), (long)(ns % 1000000000ULL)};
	nanosleep(&ts, NULL);
}

/* STRESS_SECONDS from the environment, else 1. */
static double stress_seconds(void)
{
	const char *s = getenv("STRESS_SECONDS");
	double v = s ? strtod(s, NULL) : 0;
	return v > 0 ? v : 1.0;
}

/* --- what the test thread saw in the profiles swapped out --- */

struct totals {
	uint64_t node_samples, node_cpu_ns; /* summed over trie nodes */
	uint64_t dropped_samples, dropped_cpu_ns;
	uint64_t samples, cpu_ns;   /* the profile-level counters */
	uint64_t swaps, busy_swaps; /* busy: the profile held samples */
	uint64_t inconsistent;	    /* profiles whose own counters disagreed */
	uint64_t not_alternating;   /* returned profile was not the expected one */
};

static void add_node(const struct trie_node *node, void *arg)
{
	uint64_t *sums = arg;
	sums[0] += atomic_load_explicit(&node->values[0], memory_order_relaxed);
	sums[1] += atomic_load_explicit(&node->values[1], memory_order_relaxed);
}

/* Swaps, sums the returned profile into tot and resets it. */
static void swap_and_collect(struct profile_pair *pp, struct totals *tot)
{
	struct profile *expect = profiles_active(pp);
	struct profile *p = profiles_swap(pp, mono_ns());
	tot->swaps++;
	if (p != expect || profiles_active(pp) == p)
		tot->not_alternating++;
	/* No writers check here: a handler that read the old index before the flip may
	 * still enter p, see the flip on its re-check and leave without touching p; only
	 * the single-threaded tests can expect writers == 0. */
	uint64_t sums[2] = {0, 0};
	trie_foreach(&p->trie, add_node, sums);
	uint64_t samples = profiles_total(p, PROFILE_CPU, 0),
		 cpu = profiles_total(p, PROFILE_CPU, 1);
	uint64_t dropped = profiles_dropped(p, PROFILE_CPU, 0);
	uint64_t dropped_cpu = profiles_dropped(p, PROFILE_CPU, 1);
	if (sums[0] + dropped != samples || sums[1] + dropped_cpu != cpu)
		tot->inconsistent++;
	tot->busy_swaps += samples != 0;
	tot->node_samples += sums[0];
	tot->node_cpu_ns += sums[1];
	tot->dropped_samples += dropped;
	tot->dropped_cpu_ns += dropped_cpu;
	tot->samples += samples;
	tot->cpu_ns += cpu;
	profiles_reset(p);
}

/* --- writers --- */

struct writer {
	pthread_t thread;
	uint32_t id;
	struct profile_pair *pp;
	pthread_barrier_t *start;
	atomic_bool *stop;
	uint32_t new_every; /* every new_every-th record is a stack never seen before */
	uint64_t records, weights;
};

/* Stack i of writer w: shared ones (same tid and pcs in every writer) or new ones. */
static uint32_t make_stack(const struct writer *w, uint64_t i, int32_t *tid, uintptr_t *pcs)
{
	uint64_t key = i % SHARED_STACKS;
	*tid = (int32_t)(1 + key % 3);
	if (i % w->new_every == 0) {
		key = ((uint64_t)(w->id + 1) << 40) | i;
		*tid = (int32_t)(100 + w->id);
	}
	uint32_t n = 1 + (uint32_t)((key * 0x9e3779b97f4a7c15ULL) >> 59); /* 1..32 */
	pcs[0] = 0x400000 + (uintptr_t)key * 16;
	for (uint32_t d = 1; d < n; d++)
		pcs[d] = 0x600000 + d * 0x40;
	return n;
}

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uintptr_t pcs[MAX_DEPTH];
	int32_t tid;
	pthread_barrier_wait(w->start);
	for (uint64_t i = 1; !atomic_load_explicit(w->stop, memory_order_relaxed); i++) {
		uint32_t n = make_stack(w, i, &tid, pcs);
		uint64_t weight = 1 + (i * 2654435761ULL + w->id) % 10007;
		profiles_record(w->pp, tid, pcs, n, weight);
		w->records++;
		w->weights += weight;
	}
	return NULL;
}

/* Runs WRITERS writers for seconds while swapping every SWAP_PERIOD_NS, then stops
 * them and swaps out both profiles. Returns the records and weights written. */
static void run_stress(size_t ceiling, uint32_t new_every, double seconds, struct totals *tot,
		       uint64_t *records, uint64_t *weights)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, ceiling, mono_ns()), 0);
	static struct writer w[WRITERS];
	pthread_barrier_t start;
	atomic_bool stop = false;
	pthread_barrier_init(&start, NULL, WRITERS + 1);
	for (uint32_t i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){
		    .id = i, .pp = &pp, .start = &start, .stop = &stop, .new_every = new_every};
		ck_assert_int_eq(pthread_create(&w[i].thread, NULL, writer_main, &w[i]), 0);
	}
	memset(tot, 0, sizeof(*tot));
	pthread_barrier_wait(&start);
	uint64_t end = mono_ns() + (uint64_t)(seconds * 1e9);
	while (mono_ns() < end) {
		sleep_ns(SWAP_PERIOD_NS);
		/* As the uploader thread: memory for the active profile while it records. */
		ck_assert_int_eq(profiles_grow_if_needed(&pp), 0);
		swap_and_collect(&pp, tot);
	}
	atomic_store(&stop, true);
	*records = *weights = 0;
	for (int i = 0; i < WRITERS; i++) {
		pthread_join(w[i].thread, NULL);
		*records += w[i].records;
		*weights += w[i].weights;
	}
	pthread_barrier_destroy(&start);
	swap_and_collect(&pp, tot); /* the profile active when the writers stopped */
	swap_and_collect(&pp, tot); /* the other one, reset before: empty */
	profiles_destroy(&pp);

	ck_assert_msg(tot->not_alternating == 0,
		      "expected swap to return the active profile and flip, saw %llu misses",
		      (unsigned long long)tot->not_alternating);
	ck_assert_msg(tot->inconsistent == 0,
		      "expected nodes + dropped == profile counters, saw %llu profiles differ",
		      (unsigned long long)tot->inconsistent);
	ck_assert_msg(tot->busy_swaps >= 2 && *records > tot->swaps,
		      "expected swaps during recording, saw %llu busy swaps of %llu, %llu records",
		      (unsigned long long)tot->busy_swaps, (unsigned long long)tot->swaps,
		      (unsigned long long)*records);
}

static void check_sums(const struct totals *tot, uint64_t records, uint64_t weights)
{
	ck_assert_msg(tot->node_samples + tot->dropped_samples == records,
		      "expected %llu samples (nodes + dropped), saw %llu + %llu",
		      (unsigned long long)records, (unsigned long long)tot->node_samples,
		      (unsigned long long)tot->dropped_samples);
	ck_assert_msg(tot->node_cpu_ns + tot->dropped_cpu_ns == weights,
		      "expected %llu cpu ns (nodes + dropped), saw %llu + %llu",
		      (unsigned long long)weights, (unsigned long long)tot->node_cpu_ns,
		      (unsigned long long)tot->dropped_cpu_ns);
	ck_assert_msg(tot->samples == records, "expected profile samples %llu, saw %llu",
		      (unsigned long long)records, (unsigned long long)tot->samples);
	ck_assert_msg(tot->cpu_ns == weights, "expected profile cpu ns %llu, saw %llu",
		      (unsigned long long)weights, (unsigned long long)tot->cpu_ns);
}

START_TEST(test_swap_loses_no_sample)
{
	struct totals tot;
	uint64_t records, weights;
	run_stress(64 * MIB, 64, stress_seconds(), &tot, &records, &weights);
	check_sums(&tot, records, weights);
}
END_TEST

START_TEST(test_swap_loses_no_sample_when_the_ceiling_drops_new_stacks)
{
	struct totals tot;
	uint64_t records, weights;
	run_stress(64 * KIB, 2, stress_seconds() / 2, &tot, &records, &weights);
	check_sums(&tot, records, weights);
	ck_assert_msg(tot.dropped_samples > 0,
		      "expected dropped samples with 64 KiB, saw 0 of %llu",
		      (unsigned long long)records);
	ck_assert_msg(tot.node_samples > 0, "expected some samples kept in nodes, saw 0");
}
END_TEST

/* --- single-threaded behaviour --- */

static const uintptr_t stack_a[3] = {0x401000, 0x402000, 0x403000};

/* Samples and cpu_ns of the node of (tid, stack_a) in p, 0 if absent. */
static uint64_t node_samples(struct profile *p, int32_t tid, uint64_t *cpu_ns)
{
	uint64_t before = trie_count(&p->trie);
	struct trie_node *node = trie_put(&p->trie, PROFILE_CPU, tid, stack_a, 3, NULL);
	ck_assert_msg(trie_count(&p->trie) == before, "expected the stack in the profile");
	*cpu_ns = atomic_load(&node->values[1]);
	return atomic_load(&node->values[0]);
}

START_TEST(test_swap_alternates_profiles_and_returns_with_no_writer)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, MIB, 5), 0);
	ck_assert_ptr_eq(profiles_active(&pp), &pp.p[0]);
	ck_assert_uint_eq(pp.p[0].start_ns, 5);
	for (int i = 0; i < 10; i++) {
		profiles_record(&pp, 7, stack_a, 3, 100 + i);
		profiles_record(&pp, 7, stack_a, 3, 1);
		struct profile *p = profiles_swap(&pp, 1000 + i);
		ck_assert_msg(p == &pp.p[i % 2], "swap %d: expected profile %d, saw %td", i, i % 2,
			      p - pp.p);
		ck_assert_msg(profiles_active(&pp) == &pp.p[(i + 1) % 2],
			      "swap %d: expected profile %d active, saw %td", i, (i + 1) % 2,
			      profiles_active(&pp) - pp.p);
		ck_assert_uint_eq(profiles_active(&pp)->start_ns, 1000 + i);
		ck_assert_uint_eq(atomic_load(&p->writers), 0);
		uint64_t cpu;
		ck_assert_uint_eq(node_samples(p, 7, &cpu), 2);
		ck_assert_uint_eq(cpu, 101 + i);
		ck_assert_uint_eq(profiles_total(p, PROFILE_CPU, 0), 2);
		ck_assert_uint_eq(profiles_total(p, PROFILE_CPU, 1), 101 + i);
		ck_assert_uint_eq(trie_count(&p->trie), 1);
		/* The new active profile was reset before: it holds nothing yet. */
		ck_assert_uint_eq(profiles_total(profiles_active(&pp), PROFILE_CPU, 0), 0);
		profiles_reset(p);
	}
	profiles_destroy(&pp);
}
END_TEST

START_TEST(test_profile_reset_empties_counters_trie_and_region)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, 4 * KIB, 0), 0);
	uintptr_t pcs[MAX_DEPTH] = {0};
	uint64_t i = 0;
	/* Fill the region until stacks are dropped. */
	while (profiles_dropped(&pp.p[0], PROFILE_CPU, 0) == 0) {
		pcs[0] = 0x400000 + ++i * 16;
		profiles_record(&pp, 1, pcs, MAX_DEPTH, 3);
		ck_assert_uint_lt(i, 1000);
	}
	struct profile *p = profiles_swap(&pp, 1);
	ck_assert_uint_eq(profiles_total(p, PROFILE_CPU, 0), i);
	ck_assert_uint_eq(profiles_total(p, PROFILE_CPU, 1), 3 * i);
	ck_assert_uint_eq(profiles_dropped(p, PROFILE_CPU, 0), 1);
	ck_assert_uint_eq(profiles_dropped(p, PROFILE_CPU, 1), 3);
	ck_assert_uint_eq(trie_count(&p->trie), i - 1);
	profiles_reset(p);
	ck_assert_uint_eq(profiles_total(p, PROFILE_CPU, 0), 0);
	ck_assert_uint_eq(profiles_total(p, PROFILE_CPU, 1), 0);
	ck_assert_uint_eq(profiles_dropped(p, PROFILE_CPU, 0), 0);
	ck_assert_uint_eq(profiles_dropped(p, PROFILE_CPU, 1), 0);
	ck_assert_uint_eq(trie_count(&p->trie), 0);
	ck_assert_uint_eq(region_used(&p->region), 0);
	/* Usable again at full capacity once it is active. */
	profiles_swap(&pp, 2);
	pcs[0] = 0x400000;
	profiles_record(&pp, 1, pcs, MAX_DEPTH, 3);
	ck_assert_uint_eq(trie_count(&p->trie), 1);
	ck_assert_uint_eq(profiles_dropped(p, PROFILE_CPU, 0), 0);
	profiles_destroy(&pp);
}
END_TEST

/* --- memory --- */

#define MEM_DEPTH 30
/* A node of MEM_DEPTH frames: 72 bytes and 8 per frame, rounded to REGION_ALIGN. */
#define MEM_NODE_BYTES 320

/* Records stack i (distinct for every i) of MEM_DEPTH frames. */
static void record_distinct(struct profile_pair *pp, uint64_t i)
{
	uintptr_t pcs[MEM_DEPTH];
	for (int d = 0; d < MEM_DEPTH; d++)
		pcs[d] = 0x400000 + (uintptr_t)(i * MEM_DEPTH + (uint64_t)d) * 16;
	profiles_record(pp, 1, pcs, MEM_DEPTH, 1000);
}

START_TEST(test_without_growth_a_profile_holds_its_first_chunk_of_stacks_then_drops)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, 64 * MIB, 0), 0);
	enum { N = 5000 };
	for (uint64_t i = 0; i < N; i++)
		record_distinct(&pp, i);
	/* A process whose uploader thread has not started: 3276 stacks of 30 frames. */
	struct profile *p = &pp.p[0];
	uint64_t kept = PROFILE_FIRST_CHUNK / MEM_NODE_BYTES;
	ck_assert_msg(trie_count(&p->trie) == kept,
		      "expected %llu stacks in the first chunk, saw %llu", (unsigned long long)kept,
		      (unsigned long long)trie_count(&p->trie));
	ck_assert_msg(profiles_dropped(p, PROFILE_CPU, 0) == N - kept,
		      "expected %llu samples dropped and counted, saw %llu",
		      (unsigned long long)(N - kept),
		      (unsigned long long)profiles_dropped(p, PROFILE_CPU, 0));
	ck_assert_uint_eq(profiles_total(p, PROFILE_CPU, 0), N);
	ck_assert_uint_eq(region_mapped(&p->region), PROFILE_FIRST_CHUNK);
	ck_assert_uint_eq(region_mapped(&pp.p[1].region), PROFILE_FIRST_CHUNK);
	ck_assert(profiles_room_wanted(&pp));
	profiles_destroy(&pp);
}
END_TEST

START_TEST(test_a_profile_grows_on_demand_and_the_next_gets_what_it_used)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, 64 * MIB, 0), 0);
	ck_assert(!profiles_room_wanted(&pp));
	enum { N = 20000, GROW_EVERY = 100 }; /* 6.1 MiB of stacks */
	for (uint64_t i = 0; i < N; i++) {
		record_distinct(&pp, i);
		if (i % GROW_EVERY == 0)
			ck_assert_int_eq(profiles_grow_if_needed(&pp), 0);
	}
	struct profile *p = &pp.p[0];
	ck_assert_msg(trie_count(&p->trie) == N && profiles_dropped(p, PROFILE_CPU, 0) == 0,
		      "expected %d stacks and none dropped, saw %llu and %llu dropped", N,
		      (unsigned long long)trie_count(&p->trie),
		      (unsigned long long)profiles_dropped(p, PROFILE_CPU, 0));
	size_t used = region_used(&p->region), mapped = region_mapped(&p->region);
	/* 1 + 1 + 2 + 4 MiB reached; 8 more mapped ahead once 2/3 of 8 were used. */
	ck_assert_msg(used >= (size_t)N * MEM_NODE_BYTES && mapped == 16 * MIB,
		      "expected %zu bytes used of 16 MiB mapped, saw %zu of %zu",
		      (size_t)N * MEM_NODE_BYTES, used, mapped);
	ck_assert_uint_eq(region_mapped(&pp.p[1].region), PROFILE_FIRST_CHUNK);
	/* The next profile gets what this one used before it becomes active. */
	ck_assert_ptr_eq(profiles_swap(&pp, 1), p);
	ck_assert_msg(region_mapped(&pp.p[1].region) == 8 * MIB,
		      "expected the next profile mapped for %zu bytes (8 MiB), saw %zu", used,
		      region_mapped(&pp.p[1].region));
	/* Reset: the 8 MiB chunk never reached is unmapped, the 4 reached are kept. */
	profiles_reset(p);
	ck_assert_msg(region_mapped(&p->region) == 8 * MIB,
		      "expected 8 MiB kept after the reset, saw %zu", region_mapped(&p->region));
	/* The new active profile holds as much without growing. */
	for (uint64_t i = 0; i < N; i++)
		record_distinct(&pp, N + i);
	ck_assert_uint_eq(trie_count(&pp.p[1].trie), N);
	ck_assert_uint_eq(profiles_dropped(&pp.p[1], PROFILE_CPU, 0), 0);
	profiles_destroy(&pp);
}
END_TEST

/* A thread that calls profiles_swap and reports when it returned. */
struct swapper {
	struct profile_pair *pp;
	struct profile *_Atomic returned;
};

static void *swapper_main(void *arg)
{
	struct swapper *s = arg;
	atomic_store(&s->returned, profiles_swap(s->pp, 42));
	return NULL;
}

START_TEST(test_swap_waits_for_writers_to_leave)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, MIB, 0), 0);
	profiles_record(&pp, 7, stack_a, 3, 10);
	/* Pretend a handler is inside profile 0 (entered, re-checked, not left yet). */
	atomic_fetch_add(&pp.p[0].writers, 1);
	struct swapper s = {.pp = &pp};
	atomic_init(&s.returned, NULL);
	pthread_t thread;
	ck_assert_int_eq(pthread_create(&thread, NULL, swapper_main, &s), 0);
	uint64_t deadline = mono_ns() + 2000000000ULL;
	while (profiles_active(&pp) != &pp.p[1] && mono_ns() < deadline)
		sleep_ns(100000);
	ck_assert_msg(profiles_active(&pp) == &pp.p[1], "expected the flip before the wait");
	/* New records go to the new active profile while the swapper waits. */
	profiles_record(&pp, 7, stack_a, 3, 20);
	sleep_ns(20000000); /* 20 ms: many polls of the writer count */
	ck_assert_msg(atomic_load(&s.returned) == NULL,
		      "expected swap to wait for the writer, saw it return");
	atomic_fetch_sub(&pp.p[0].writers, 1); /* the handler leaves */
	pthread_join(thread, NULL);
	ck_assert_ptr_eq(atomic_load(&s.returned), &pp.p[0]);
	uint64_t cpu;
	ck_assert_uint_eq(node_samples(&pp.p[0], 7, &cpu), 1);
	ck_assert_uint_eq(cpu, 10);
	ck_assert_uint_eq(node_samples(&pp.p[1], 7, &cpu), 1);
	ck_assert_uint_eq(cpu, 20);
	ck_assert_uint_eq(pp.p[1].start_ns, 42);
	profiles_destroy(&pp);
}
END_TEST

START_TEST(test_reinit_after_fork_forgets_both_profiles_and_writers)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, MIB, 0), 0);
	profiles_record(&pp, 7, stack_a, 3, 10);
	profiles_swap(&pp, 1); /* profile 0 swapped out, not reset */
	profiles_record(&pp, 7, stack_a, 3, 20);
	atomic_fetch_add(&pp.p[1].writers, 1);	/* a parent thread that was inside */
	profiles_note_startup(&pp, 7, 4000000); /* the parent's, not yet uploaded */
	profiles_reinit_after_fork(&pp, 99);
	int32_t tid = -1;
	ck_assert_uint_eq(profiles_take_startup(&pp, &tid), 0);
	ck_assert_ptr_eq(profiles_active(&pp), &pp.p[0]);
	ck_assert_uint_eq(pp.p[0].start_ns, 99);
	for (int i = 0; i < 2; i++) {
		ck_assert_uint_eq(atomic_load(&pp.p[i].writers), 0);
		ck_assert_uint_eq(profiles_total(&pp.p[i], PROFILE_CPU, 0), 0);
		ck_assert_uint_eq(profiles_total(&pp.p[i], PROFILE_CPU, 1), 0);
		ck_assert_uint_eq(trie_count(&pp.p[i].trie), 0);
		ck_assert_uint_eq(region_used(&pp.p[i].region), 0);
	}
	/* Swapping works again: the phantom writer does not block it. */
	profiles_record(&pp, 7, stack_a, 3, 30);
	struct profile *p = profiles_swap(&pp, 100);
	ck_assert_ptr_eq(p, &pp.p[0]);
	ck_assert_uint_eq(profiles_total(p, PROFILE_CPU, 1), 30);
	ck_assert_ptr_eq(profiles_swap(&pp, 101), &pp.p[1]);
	profiles_destroy(&pp);
}
END_TEST

/* The main thread's CPU before the profiler: taken once, by the first profile. */
START_TEST(test_startup_cpu_is_taken_once)
{
	struct profile_pair pp;
	ck_assert_int_eq(profiles_init(&pp, MIB, 0), 0);
	int32_t tid = -1;
	ck_assert_uint_eq(profiles_take_startup(&pp, &tid), 0);
	profiles_note_startup(&pp, 7, 4000000);
	ck_assert_uint_eq(profiles_take_startup(&pp, &tid), 4000000);
	ck_assert_int_eq(tid, 7);
	ck_assert_uint_eq(profiles_take_startup(&pp, &tid), 0);
	profiles_destroy(&pp);
}
END_TEST

/* Whether the page holding p is resident (mincore). */
static bool page_resident(const void *p)
{
	unsigned char vec = 0;
	void *page = (void *)((uintptr_t)p & ~(uintptr_t)4095);
	ck_assert_int_eq(mincore(page, 4096, &vec), 0);
	return vec & 1;
}

/* In the child: exit status 0, or the number of the check that failed. */
static int child_checks(struct profile_pair *pp, size_t parent_mapped)
{
	profiles_reinit_after_fork(pp, 77);
	/* A child that neither samples nor uploads never touches the pair's page, nor
	 * does asking whether it needs memory. */
	if (!profiles_empty(pp) || profiles_room_wanted(pp) || profiles_grow_if_needed(pp) != 0)
		return 2;
	if (page_resident(pp))
		return 3;
	/* WRITERS threads race for the set-up with their first records. */
	pthread_barrier_t start;
	atomic_bool stop = false;
	struct writer w[WRITERS];
	pthread_barrier_init(&start, NULL, WRITERS + 1);
	for (uint32_t i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){
		    .id = i, .pp = pp, .start = &start, .stop = &stop, .new_every = 7};
		pthread_create(&w[i].thread, NULL, writer_main, &w[i]);
	}
	pthread_barrier_wait(&start);
	sleep_ns(20 * 1000000ULL);
	atomic_store(&stop, true);
	uint64_t records = 0, weights = 0;
	for (uint32_t i = 0; i < WRITERS; i++) {
		pthread_join(w[i].thread, NULL);
		records += w[i].records;
		weights += w[i].weights;
	}
	if (!page_resident(pp) || profiles_empty(pp))
		return 4;
	/* Every chunk the parent had mapped is the child's, empty. */
	if (region_mapped(&pp->p[0].region) != parent_mapped)
		return 8;
	struct profile *first = profiles_active(pp);
	if (first != &pp->p[0] || first->start_ns != 77)
		return 5;
	struct totals tot = {0};
	swap_and_collect(pp, &tot);
	swap_and_collect(pp, &tot);
	if (tot.samples != records || tot.cpu_ns != weights || tot.inconsistent ||
	    tot.not_alternating || records == 0)
		return 6;
	/* The parent's sample is not the child's. */
	return tot.node_samples + tot.dropped_samples == records ? 0 : 7;
}

START_TEST(test_a_fork_child_sets_up_its_wiped_pair_at_first_use)
{
	struct profile_pair *pp = fork_local_alloc(sizeof(*pp));
	ck_assert_ptr_nonnull(pp);
	ck_assert_int_eq(profiles_init(pp, 64 * MIB, 0), 0);
	profiles_record(pp, 7, stack_a, 3, 10);
	ck_assert_int_eq(region_reserve(&pp->p[0].region, 4 * MIB), 0); /* 1 + 1 + 2 MiB */
	size_t mapped = region_mapped(&pp->p[0].region);
	ck_assert_uint_eq(mapped, 4 * MIB);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(child_checks(pp, mapped));
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	/* The parent's pair is as it was. */
	ck_assert_uint_eq(profiles_total(&pp->p[0], PROFILE_CPU, 0), 1);
	ck_assert(!profiles_empty(pp));
	profiles_destroy(pp);
}
END_TEST

static Suite *profile_swap_suite(void)
{
	Suite *s = suite_create("profile_swap");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 30 + 4 * stress_seconds());
	tcase_add_test(tc, test_swap_alternates_profiles_and_returns_with_no_writer);
	tcase_add_test(tc, test_profile_reset_empties_counters_trie_and_region);
	tcase_add_test(tc, test_swap_waits_for_writers_to_leave);
	tcase_add_test(tc, test_reinit_after_fork_forgets_both_profiles_and_writers);
	tcase_add_test(tc, test_a_fork_child_sets_up_its_wiped_pair_at_first_use);
	tcase_add_test(tc, test_startup_cpu_is_taken_once);
	tcase_add_test(tc,
		       test_without_growth_a_profile_holds_its_first_chunk_of_stacks_then_drops);
	tcase_add_test(tc, test_a_profile_grows_on_demand_and_the_next_gets_what_it_used);
	tcase_add_test(tc, test_swap_loses_no_sample);
	tcase_add_test(tc, test_swap_loses_no_sample_when_the_ceiling_drops_new_stacks);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(profile_swap_suite());
}
