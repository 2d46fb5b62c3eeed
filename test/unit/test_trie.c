/*
 * test_trie.c - unit tests of agent/store/trie.c: the lock-free hash-trie.
 *
 * Single-threaded: one stable node (pointer and id) per key, keys that differ in one
 * field only, foreach visiting every node once, reset, a deep trie of many stacks,
 * crafted hash collisions (see check_colliding_keys) and running out of region
 * memory. Multi-threaded: THREADS threads putting the same stacks (one node each,
 * exact counters), and disjoint stacks (all found afterwards) while a reader walks the
 * trie (it must only see complete nodes).
 */
#include "agent/store/trie.h"
#include "common/hash.h"

#include <check.h>

#include "test/unit/check_run.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define THREADS 8
#define MAX_DEPTH 256
#ifdef DDPROF_TSAN
#define SCALE 4 /* TSan is ~10x slower: shrink iteration counts */
#else
#define SCALE 1
#endif

/* --- stacks --- */

struct key {
	int32_t tid;
	uint32_t n;
	uintptr_t pcs[MAX_DEPTH];
};

#define mix64 hash_mix64 /* the trie's mixer, from common/hash.h */

/* Stack number i of family f, depth 1..max_depth. pcs[0] holds i and f, so stacks are
 * distinct across (f, i); tid varies too. */
static void make_key(struct key *k, uint32_t f, uint64_t i, uint32_t max_depth)
{
	k->tid = (int32_t)(1000 + f * 16 + i % 7);
	k->n = 1 + (uint32_t)(mix64(i ^ ((uint64_t)f << 40)) % max_depth);
	k->pcs[0] = 0x400000 + ((uintptr_t)f << 40) + (uintptr_t)i * 16;
	for (uint32_t d = 1; d < k->n; d++)
		k->pcs[d] = 0x500000 + (uintptr_t)(mix64(i * MAX_DEPTH + d) & 0xffffff0);
}

/* A set of keys: keys[i] when keys is set, else make_key(family, i, max_depth). */
struct keyset {
	uint32_t family, max_depth;
	const struct key *keys;
};

static void get_key(const struct keyset *ks, size_t i, struct key *k)
{
	if (ks->keys)
		*k = ks->keys[i];
	else
		make_key(k, ks->family, i, ks->max_depth);
}

static struct trie_node *put(struct stack_trie *t, const struct key *k, bool *inserted)
{
	return trie_put(t, PROFILE_CPU, k->tid, k->pcs, k->n, inserted);
}

static bool node_has_key(const struct trie_node *node, const struct key *k)
{
	return node->tid == k->tid && node->npcs == k->n &&
	       memcmp(node->pcs, k->pcs, k->n * sizeof(k->pcs[0])) == 0;
}

/* Where the one region of a test maps its chunk (region_destroy frees it). */
static struct region_map region_map;

/* Fresh region of ceiling bytes, mapped at once (one chunk), and trie over it. */
static void setup(struct region *r, struct stack_trie *t, size_t ceiling)
{
	ck_assert_int_eq(region_init(r, &region_map, ceiling, ceiling), 0);
	trie_init(t, r);
}

/* --- foreach helpers --- */

struct visit {
	const struct trie_node **nodes;
	size_t n, cap;
};

static void collect(const struct trie_node *node, void *arg)
{
	struct visit *v = arg;
	if (v->n < v->cap)
		v->nodes[v->n] = node;
	v->n++;
}

static int by_pointer(const void *a, const void *b)
{
	const void *x = *(const void *const *)a, *y = *(const void *const *)b;
	return x < y ? -1 : x > y;
}

/* Checks that trie_count is n and foreach visits exactly expect[0..n), each once. */
static void check_holds_exactly(const struct stack_trie *t, struct trie_node *const *expect,
				size_t n)
{
	ck_assert_msg(trie_count(t) == n, "expected %zu nodes, saw %llu", n,
		      (unsigned long long)trie_count(t));
	struct visit v = {calloc(n + 1, sizeof(*v.nodes)), 0, n + 1};
	const struct trie_node **want = calloc(n + 1, sizeof(*want));
	ck_assert(v.nodes && want);
	if (n) /* expect may be NULL for an empty trie: memcpy's pointers must be valid */
		memcpy(want, expect, n * sizeof(*want));
	trie_foreach(t, collect, &v);
	ck_assert_msg(v.n == n, "foreach: expected %zu visits, saw %zu", n, v.n);
	qsort(v.nodes, n, sizeof(*v.nodes), by_pointer);
	qsort(want, n, sizeof(*want), by_pointer);
	for (size_t i = 0; i < n; i++) {
		if (v.nodes[i] != want[i])
			ck_abort_msg("foreach: expected node %p at sorted position %zu, saw %p",
				     (const void *)want[i], i, (const void *)v.nodes[i]);
	}
	free(want);
	free(v.nodes);
}

/* Puts keys 0..n of ks (all must be new), then again (each must give the same node and
 * id), then checks count and foreach. */
static void put_all_twice(struct stack_trie *t, const struct keyset *ks, size_t n,
			  struct trie_node **nodes)
{
	struct key k;
	for (size_t i = 0; i < n; i++) {
		bool inserted = false;
		get_key(ks, i, &k);
		nodes[i] = put(t, &k, &inserted);
		if (!nodes[i] || !inserted || !node_has_key(nodes[i], &k) || nodes[i]->id == 0)
			ck_abort_msg("key %zu: expected a new node with its key and an id, saw %p "
				     "inserted=%d",
				     i, (void *)nodes[i], inserted);
	}
	for (size_t i = 0; i < n; i++) {
		bool inserted = true;
		get_key(ks, i, &k);
		uint64_t id = nodes[i]->id;
		struct trie_node *again = put(t, &k, &inserted);
		if (again != nodes[i] || inserted || again->id != id)
			ck_abort_msg(
			    "key %zu: expected the same node %p id %llu, saw %p inserted=%d", i,
			    (void *)nodes[i], (unsigned long long)id, (void *)again, inserted);
	}
	check_holds_exactly(t, nodes, n);
}

START_TEST(test_put_gives_one_stable_node_per_stack)
{
	struct region r;
	struct stack_trie t;
	setup(&r, &t, 64 * MIB);
	enum { N = 5000 / SCALE };
	struct trie_node **nodes = calloc(N, sizeof(*nodes));
	put_all_twice(&t, &(struct keyset){1, MAX_DEPTH, NULL}, N, nodes);
	/* One thread never loses a race, so no id is wasted: the ids are exactly 1..N. */
	uint8_t *seen = calloc(N + 1, 1);
	for (size_t i = 0; i < N; i++) {
		uint64_t id = nodes[i]->id;
		if (id > N || seen[id]++ || nodes[i]->values[0] != 0 || nodes[i]->values[1] != 0)
			ck_abort_msg("stack %zu: expected a unique id <= %d and zero counters, "
				     "saw id %llu",
				     i, N, (unsigned long long)id);
	}
	free(seen);
	free(nodes);
	region_destroy(&r);
}
END_TEST

START_TEST(test_keys_differing_in_one_field_only_are_distinct)
{
	struct region r;
	struct stack_trie t;
	setup(&r, &t, MIB);
	enum { V = 8 };
	static struct key k[V];
	k[0] = (struct key){.tid = 1234, .n = 10};
	for (uint32_t d = 0; d < 10; d++)
		k[0].pcs[d] = 0x1000 + d * 8;
	for (int i = 1; i < V; i++)
		k[i] = k[0];
	k[1].tid++;		     /* tid only */
	k[2].n--;		     /* proper prefix */
	k[3].pcs[k[3].n++] = 0x9000; /* extension */
	k[4].pcs[9] ^= 1;	     /* last pc only */
	k[5].pcs[0] ^= 1;	     /* leaf pc only */
	k[6].tid = -k[6].tid;	     /* sign of tid */
	k[7].n = 1;		     /* depth 1 */
	struct trie_node *nodes[V];
	put_all_twice(&t, &(struct keyset){0, 0, k}, V, nodes);
	region_destroy(&r);
}
END_TEST

/* The profile kind is part of the key: the same thread and pcs recorded for two kinds
 * (a CPU sample and, say, an allocation at the same place) are two nodes, each keeping
 * its kind and its own values. */
START_TEST(test_same_stack_of_two_kinds_is_two_nodes)
{
	struct region r;
	struct stack_trie t;
	setup(&r, &t, MIB);
	const uintptr_t pcs[3] = {0x1000, 0x2000, 0x3000};
	const uint16_t other = PROFILE_KINDS; /* any other kind: the trie reads no table */
	bool ins_a, ins_b, ins_again;
	struct trie_node *a = trie_put(&t, PROFILE_CPU, 77, pcs, 3, &ins_a);
	struct trie_node *b = trie_put(&t, (enum profile_kind)other, 77, pcs, 3, &ins_b);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert(ins_a && ins_b);
	ck_assert_ptr_ne(a, b);
	ck_assert_uint_eq(a->kind, PROFILE_CPU);
	ck_assert_uint_eq(b->kind, other);
	ck_assert_ptr_eq(trie_put(&t, (enum profile_kind)other, 77, pcs, 3, &ins_again), b);
	ck_assert(!ins_again);
	ck_assert_uint_eq(trie_count(&t), 2);
	atomic_fetch_add(&a->values[1], 5);
	ck_assert_uint_eq(atomic_load(&b->values[1]), 0);
	region_destroy(&r);
}
END_TEST

START_TEST(test_reset_forgets_every_node_and_restarts_ids)
{
	struct region r;
	struct stack_trie t;
	setup(&r, &t, 16 * MIB);
	check_holds_exactly(&t, NULL, 0); /* empty from the start */
	enum { N = 1000 };
	struct trie_node **nodes = calloc(N, sizeof(*nodes));
	for (int round = 0; round < 3; round++) {
		/* All new again each round: the reset forgot them. */
		put_all_twice(&t, &(struct keyset){2, 64, NULL}, N, nodes);
		trie_reset(&t);
		region_reset(&r);
		check_holds_exactly(&t, NULL, 0);
	}
	struct key k;
	make_key(&k, 2, 0, 64);
	struct trie_node *first = put(&t, &k, NULL);
	ck_assert_msg(first && first->id == 1, "expected id 1 after reset, saw %llu",
		      first ? (unsigned long long)first->id : 0ULL);
	free(nodes);
	region_destroy(&r);
}
END_TEST

/* Depth of the deepest node of the subtree at node (node itself = 1). */
static unsigned trie_depth(const struct trie_node *node)
{
	unsigned best = 0;
	for (unsigned d = 1; node; d++) { /* child 0 iteratively, like foreach */
		best = d > best ? d : best;
		for (int i = 1; i < TRIE_FANOUT; i++) {
			unsigned sub = trie_depth(atomic_load(&node->children[i]));
			best = d + sub > best ? d + sub : best;
		}
		node = atomic_load(&node->children[0]);
	}
	return best;
}

START_TEST(test_deep_trie_of_many_stacks_finds_every_stack)
{
	struct region r;
	struct stack_trie t;
	setup(&r, &t, 256 * MIB);
	enum { N = 100000 / SCALE };
	struct trie_node **nodes = calloc(N, sizeof(*nodes));
	put_all_twice(&t, &(struct keyset){3, 8, NULL}, N, nodes);
	unsigned depth = trie_depth(atomic_load(&t.root));
	ck_assert_msg(depth >= 8, "expected a trie at least 8 levels deep, saw %u", depth);
	free(nodes);
	region_destroy(&r);
}
END_TEST

/* --- crafted collisions: a mirror of trie.c's key_hash and its inverse --- */

/* Inverse of mix64: each xorshift undone by repeating it, each odd multiplier by its
 * inverse mod 2^64. */
static uint64_t unmix64(uint64_t x)
{
	x ^= (x >> 31) ^ (x >> 62);
	x *= 0x319642b2d24d8ec3ULL; /* 0x94d049bb133111eb^-1 */
	x ^= (x >> 27) ^ (x >> 54);
	x *= 0x96de1b173f119089ULL; /* 0xbf58476d1ce4e5b9^-1 */
	return x ^ (x >> 30) ^ (x >> 60);
}

/* key_hash over the first n pcs of k (k->n still seeds it). */
static uint64_t mirror_hash_prefix(const struct key *k, uint32_t n)
{
	uint64_t h = mix64(((uint64_t)(uint32_t)k->tid << 32) | k->n);
	for (uint32_t i = 0; i < n; i++)
		h = mix64(h ^ (uint64_t)k->pcs[i]) + i;
	return h;
}

static uint64_t mirror_hash(const struct key *k)
{
	return mirror_hash_prefix(k, k->n);
}

/* Puts n keys crafted to hash to target + (i & spread): the last pc of each is chosen by
 * inverting the final mixing step. All must be told apart by their full keys. */
static void check_colliding_keys(uint64_t target, uint64_t spread, size_t n)
{
	struct region r;
	struct stack_trie t;
	setup(&r, &t, 64 * MIB);
	struct key *k = calloc(n, sizeof(*k));
	struct trie_node **nodes = calloc(n, sizeof(*nodes));
	for (size_t i = 0; i < n; i++) {
		uint64_t want = target + (i & spread);
		k[i].tid = (int32_t)(7 + i % 3);
		k[i].n = 2 + (uint32_t)(i % 5);
		for (uint32_t d = 0; d + 1 < k[i].n; d++)
			k[i].pcs[d] = 0x700000 + i * 64 + d;
		uint32_t last = k[i].n - 1;
		k[i].pcs[last] = unmix64(want - last) ^ mirror_hash_prefix(&k[i], last);
	}
	put_all_twice(&t, &(struct keyset){0, 0, k}, n, nodes);
	for (size_t i = 0; i < n; i++) {
		if (nodes[i]->hash != target + (i & spread))
			ck_abort_msg(
			    "key_hash changed, update mirror_hash: expected %#llx, saw %#llx",
			    (unsigned long long)(target + (i & spread)),
			    (unsigned long long)nodes[i]->hash);
	}
	unsigned depth = trie_depth(atomic_load(&t.root));
	unsigned shared = (64 - (unsigned)__builtin_popcountll(spread)) / 2;
	if (spread == 0) /* one chain: 32 hash levels, then child 0 */
		ck_assert_msg(depth == n, "expected a chain of %zu nodes, saw depth %u", n, depth);
	else /* the shared top bits make one path first */
		ck_assert_msg(depth > shared, "expected a path through %u shared levels, saw %u",
			      shared, depth);
	free(nodes);
	free(k);
	region_destroy(&r);
}

START_TEST(test_colliding_hashes_are_told_apart_by_the_full_key)
{
	/* Full 64-bit collisions: one chain, past the 32 hash levels. */
	check_colliding_keys(0x0123456789abcdefULL, 0, 2000 / SCALE);
	/* Same top 52 bits: 26 shared levels, then a fan-out over the low bits. */
	check_colliding_keys(0xfedcba9876543000ULL, 0xfff, 4096 / SCALE);
}
END_TEST

START_TEST(test_out_of_memory_put_returns_null_and_keeps_existing_stacks)
{
	struct region r;
	struct stack_trie t;
	setup(&r, &t, 64 * 1024);
	enum { MAX = 4096 };
	struct trie_node *nodes[MAX];
	struct key k;
	size_t n = 0;
	for (;; n++) {
		ck_assert_int_lt(n, MAX);
		make_key(&k, 4, n, 32);
		if (!(nodes[n] = put(&t, &k, NULL)))
			break;
	}
	ck_assert_msg(n > 10, "expected some stacks to fit in 64 KiB, saw %zu", n);
	size_t used = region_used(&r);
	for (size_t i = n; i < n + 100; i++) {
		bool inserted = true;
		make_key(&k, 4, i + 1000, 32);
		for (uint32_t d = k.n; d < 32; d++)
			k.pcs[d] = 0x800000 + d;
		k.n = 32; /* the largest node: bigger than any free tail */
		ck_assert_ptr_null(put(&t, &k, &inserted));
		ck_assert(!inserted);
	}
	ck_assert_uint_ge(atomic_load(&r.refused), 100);
	for (size_t i = 0; i < n; i++) {
		bool inserted = true;
		make_key(&k, 4, i, 32);
		struct trie_node *again = put(&t, &k, &inserted);
		if (again != nodes[i] || inserted)
			ck_abort_msg("old stack %zu: expected node %p, saw %p", i, (void *)nodes[i],
				     (void *)again);
	}
	ck_assert_msg(region_used(&r) == used,
		      "expected lookups not to allocate: used %zu, saw %zu", used, region_used(&r));
	check_holds_exactly(&t, nodes, n);
	region_destroy(&r);
}
END_TEST

/* --- concurrent puts --- */

struct worker {
	pthread_t thread;
	uint32_t id;
	struct stack_trie *t;
	pthread_barrier_t *start;
	bool same; /* all threads put family 5; else family 10 + id */
	size_t nstacks, repeats;
	struct trie_node **nodes; /* [nstacks]: what put returned */
	size_t inserted, mismatches, nulls;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint32_t f = w->same ? 5 : 10 + w->id;
	struct key k;
	pthread_barrier_wait(w->start);
	for (size_t rep = 0; rep < w->repeats; rep++) {
		for (size_t j = 0; j < w->nstacks; j++) {
			/* Threads start at different points of the set: both head-on races
			 * for one key and races for neighbouring slots. */
			size_t i = (j + w->id * w->nstacks / THREADS) % w->nstacks;
			bool inserted;
			make_key(&k, f, i, 48);
			struct trie_node *node = put(w->t, &k, &inserted);
			if (!node) {
				w->nulls++;
				continue;
			}
			w->inserted += inserted;
			if (!node_has_key(node, &k) || (rep > 0 && node != w->nodes[i]))
				w->mismatches++;
			w->nodes[i] = node;
			atomic_fetch_add_explicit(&node->values[0], 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&node->values[1], i + 1, memory_order_relaxed);
		}
	}
	return NULL;
}

static void run_workers(struct worker *w, struct stack_trie *t, bool same, size_t nstacks,
			size_t repeats)
{
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, THREADS);
	for (uint32_t i = 0; i < THREADS; i++) {
		w[i] = (struct worker){.id = i, .t = t, .start = &start, .same = same};
		w[i].nstacks = nstacks;
		w[i].repeats = repeats;
		w[i].nodes = calloc(nstacks, sizeof(*w[i].nodes));
		ck_assert_int_eq(pthread_create(&w[i].thread, NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(w[i].thread, NULL);
	pthread_barrier_destroy(&start);
	for (int i = 0; i < THREADS; i++)
		ck_assert_msg(w[i].nulls == 0 && w[i].mismatches == 0,
			      "thread %d: expected 0 NULL / wrong nodes, saw %zu / %zu", i,
			      w[i].nulls, w[i].mismatches);
}

START_TEST(test_concurrent_puts_of_the_same_stacks_make_one_node_each)
{
	struct region r;
	struct stack_trie t;
	setup(&r, &t, 64 * MIB);
	static struct worker w[THREADS];
	const size_t nstacks = 2048 / SCALE, repeats = 20 / SCALE;
	run_workers(w, &t, true, nstacks, repeats);
	size_t inserted = 0;
	for (int i = 0; i < THREADS; i++)
		inserted += w[i].inserted;
	ck_assert_msg(inserted == nstacks, "expected %zu insertions in all, saw %zu", nstacks,
		      inserted);
	for (size_t s = 0; s < nstacks; s++) {
		struct trie_node *node = w[0].nodes[s];
		for (int i = 1; i < THREADS; i++)
			if (w[i].nodes[s] != node)
				ck_abort_msg("stack %zu: thread 0 got %p, thread %d got %p", s,
					     (void *)node, i, (void *)w[i].nodes[s]);
		if (node->values[0] != THREADS * repeats ||
		    node->values[1] != THREADS * repeats * (s + 1))
			ck_abort_msg("stack %zu: expected samples %zu cpu %zu, saw %llu %llu", s,
				     THREADS * repeats, THREADS * repeats * (s + 1),
				     (unsigned long long)node->values[0],
				     (unsigned long long)node->values[1]);
	}
	check_holds_exactly(&t, w[0].nodes, nstacks);
	for (int i = 0; i < THREADS; i++)
		free(w[i].nodes);
	region_destroy(&r);
}
END_TEST

/* Walks the trie until told to stop: every node seen must be complete (its stored hash
 * matches the hash of its stored key, its id is set). */
struct reader {
	struct stack_trie *t;
	atomic_bool stop;
	size_t walks, bad;
};

static void check_complete(const struct trie_node *node, void *arg)
{
	struct reader *rd = arg;
	struct key k = {.tid = node->tid, .n = node->npcs};
	if (k.n == 0 || k.n > MAX_DEPTH || node->id == 0) {
		rd->bad++;
		return;
	}
	memcpy(k.pcs, node->pcs, k.n * sizeof(k.pcs[0]));
	rd->bad += mirror_hash(&k) != node->hash;
}

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	do {
		trie_foreach(rd->t, check_complete, rd);
		rd->walks++;
	} while (!atomic_load(&rd->stop));
	return NULL;
}

START_TEST(test_concurrent_disjoint_puts_are_all_found_and_walks_see_whole_nodes)
{
	struct region r;
	struct stack_trie t;
	setup(&r, &t, 128 * MIB);
	static struct worker w[THREADS];
	static struct reader rd;
	rd = (struct reader){.t = &t};
	pthread_t reader;
	ck_assert_int_eq(pthread_create(&reader, NULL, reader_main, &rd), 0);
	const size_t nstacks = 4096 / SCALE;
	run_workers(w, &t, false, nstacks, 1);
	atomic_store(&rd.stop, true);
	pthread_join(reader, NULL);
	ck_assert_msg(rd.bad == 0, "expected only whole nodes, saw %zu bad in %zu walks", rd.bad,
		      rd.walks);
	struct trie_node **all = calloc(THREADS * nstacks, sizeof(*all));
	struct key k;
	for (uint32_t i = 0; i < THREADS; i++) {
		ck_assert_msg(w[i].inserted == nstacks,
			      "thread %u: expected %zu insertions, saw %zu", i, nstacks,
			      w[i].inserted);
		for (size_t s = 0; s < nstacks; s++) {
			bool inserted = true;
			make_key(&k, 10 + i, s, 48);
			struct trie_node *node = put(&t, &k, &inserted);
			if (node != w[i].nodes[s] || inserted || node->values[0] != 1)
				ck_abort_msg("thread %u stack %zu: expected node %p, saw %p", i, s,
					     (void *)w[i].nodes[s], (void *)node);
			all[i * nstacks + s] = node;
		}
		free(w[i].nodes);
	}
	check_holds_exactly(&t, all, THREADS * nstacks);
	free(all);
	region_destroy(&r);
}
END_TEST

static Suite *stack_trie_suite(void)
{
	Suite *s = suite_create("stack_trie");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_put_gives_one_stable_node_per_stack);
	tcase_add_test(tc, test_keys_differing_in_one_field_only_are_distinct);
	tcase_add_test(tc, test_same_stack_of_two_kinds_is_two_nodes);
	tcase_add_test(tc, test_reset_forgets_every_node_and_restarts_ids);
	tcase_add_test(tc, test_deep_trie_of_many_stacks_finds_every_stack);
	tcase_add_test(tc, test_colliding_hashes_are_told_apart_by_the_full_key);
	tcase_add_test(tc, test_out_of_memory_put_returns_null_and_keeps_existing_stacks);
	tcase_add_test(tc, test_concurrent_puts_of_the_same_stacks_make_one_node_each);
	tcase_add_test(tc, test_concurrent_disjoint_puts_are_all_found_and_walks_see_whole_nodes);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(stack_trie_suite());
}
