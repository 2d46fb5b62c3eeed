/*
 * trie.c - lock-free append-only hash-trie of stacks (see trie.h).
 *
 * This file is async-signal-safe: trie_put runs inside the sampling signal handler.
 * It calls nothing but region_alloc and C11 atomics.
 *
 * Walk: start at the root slot; at each node compare the full key; on mismatch descend
 * to child[top 2 bits of the remaining hash] and shift the hash by 2. After 32 levels
 * the hash is exhausted and the walk keeps taking child 0: still correct, just a list,
 * and reached only by 4^32 colliding stacks.
 */
#include "agent/store/trie.h"

#include "common/fork_child.h"
#include "common/hash.h"

#include <stddef.h>
#include <string.h>

#define HASH_BITS 64
#define HASH_LEVEL_BITS 2 /* log2(TRIE_FANOUT) */

/* async-signal-safe */
static uint64_t key_hash(uint32_t kind, int32_t tid, const uintptr_t *pcs, uint32_t n)
{
	uint64_t h = hash_mix64(((uint64_t)(uint32_t)tid << 32) | ((uint64_t)kind << 16) | n);
	for (uint32_t i = 0; i < n; i++)
		h = hash_mix64(h ^ (uint64_t)pcs[i]) + i;
	return h;
}

/* async-signal-safe */
static bool key_equal(const struct trie_node *node, uint64_t hash, uint32_t kind, int32_t tid,
		      const uintptr_t *pcs, uint32_t n)
{
	return node->hash == hash && node->tid == tid && node->npcs == n && node->kind == kind &&
	       memcmp(node->pcs, pcs, n * sizeof(pcs[0])) == 0;
}

/* async-signal-safe (plain stores): a fork child's first sample may set up its pair
 * (agent/store/profiles.c). */
FORK_CHILD_PATH void trie_init(struct stack_trie *t, struct region *r)
{
	atomic_init(&t->root, NULL);
	atomic_init(&t->seq, 0);
	atomic_init(&t->nodes, 0);
	t->region = r;
}

/* async-signal-safe */
static struct trie_node *node_new(struct stack_trie *t, uint64_t hash, uint32_t kind, int32_t tid,
				  const uintptr_t *pcs, uint32_t n)
{
	struct trie_node *node =
	    region_alloc(t->region, sizeof(*node) + (size_t)n * sizeof(pcs[0]));
	if (!node)
		return NULL;
	/* Region memory is zero: children and values start nil/0. */
	node->hash = hash;
	node->tid = tid;
	node->npcs = (uint16_t)n;
	node->kind = (uint16_t)kind;
	memcpy(node->pcs, pcs, n * sizeof(pcs[0]));
	return node;
}

/* async-signal-safe */
struct trie_node *trie_put(struct stack_trie *t, enum profile_kind kind, int32_t tid,
			   const uintptr_t *pcs, uint32_t n, bool *inserted)
{
	if (n > UINT16_MAX)
		n = UINT16_MAX; /* deeper than any unwinder goes: the outermost frames cut */
	uint64_t hash = key_hash(kind, tid, pcs, n);
	uint64_t iter = hash;
	struct trie_node *fresh = NULL; /* built at most once, kept across lost races */
	_Atomic(struct trie_node *) *slot = &t->root;
	if (inserted)
		*inserted = false;
	for (;;) {
		/* Acquire pairs with the release CAS that published the node: its key is
		 * fully visible before we compare it. */
		struct trie_node *node = atomic_load_explicit(slot, memory_order_acquire);
		if (!node && !fresh) {
			fresh = node_new(t, hash, kind, tid, pcs, n);
			if (fresh) {
				/* The id is set before publication so the release CAS makes
				 * it visible with the key. A node that loses every race to
				 * an equal key wastes its id: ids are unique, not dense. */
				fresh->id =
				    atomic_fetch_add_explicit(&t->seq, 1, memory_order_relaxed) + 1;
			} else {
				/* Out of memory, but an equal key may have been published
				 * here meanwhile: count on it rather than drop. */
				node = atomic_load_explicit(slot, memory_order_acquire);
				if (!node)
					return NULL;
			}
		}
		if (!node) {
			/* Release publishes fresh's key and id to the acquire loads above. */
			if (atomic_compare_exchange_strong_explicit(
				slot, &node, fresh, memory_order_release, memory_order_acquire)) {
				atomic_fetch_add_explicit(&t->nodes, 1, memory_order_relaxed);
				if (inserted)
					*inserted = true;
				return fresh;
			}
			/* Lost the race: pointers are stored once, so node (loaded with
			 * acquire by the failed CAS) is the winner; compare against it and
			 * keep fresh for a nil slot further down. */
		}
		if (key_equal(node, hash, kind, tid, pcs, n))
			return node;
		slot = &node->children[iter >> (HASH_BITS - HASH_LEVEL_BITS)];
		iter <<= HASH_LEVEL_BITS;
	}
}

uint64_t trie_count(const struct stack_trie *t)
{
	return atomic_load_explicit(&t->nodes, memory_order_relaxed);
}

static void foreach_node(const struct trie_node *node,
			 void (*fn)(const struct trie_node *n, void *arg), void *arg)
{
	/* Recursion depth is the trie depth: ~log4(nodes), at most 32 + collisions. */
	while (node) {
		fn(node, arg);
		for (int i = 1; i < TRIE_FANOUT; i++) {
			/* Acquire pairs with the publishing CAS in trie_put. */
			const struct trie_node *c =
			    atomic_load_explicit(&node->children[i], memory_order_acquire);
			if (c)
				foreach_node(c, fn, arg);
		}
		/* Child 0 iteratively: a chain of collisions cannot blow the stack. */
		node = atomic_load_explicit(&node->children[0], memory_order_acquire);
	}
}

void trie_foreach(const struct stack_trie *t, void (*fn)(const struct trie_node *n, void *arg),
		  void *arg)
{
	/* Acquire pairs with the publishing CAS in trie_put. */
	foreach_node(atomic_load_explicit(&t->root, memory_order_acquire), fn, arg);
}

void trie_reset(struct stack_trie *t)
{
	atomic_store_explicit(&t->root, NULL, memory_order_relaxed);
	atomic_store_explicit(&t->seq, 0, memory_order_relaxed);
	atomic_store_explicit(&t->nodes, 0, memory_order_relaxed);
}
