/*
 * trie.h - lock-free, append-only hash-trie of stacks (the Go runtime's traceMap).
 *
 * Maps a key (profile kind, thread id, pcs[]) to a node carrying the kind's atomic
 * values (a sample count and weights: agent/store/profile_types.h).
 *  - 4-ary hash-trie: each level consumes the next 2 bits of a 64-bit hash; a node is
 *    both an entry and the parent of 4 children.
 *  - put inserts by CAS on a nil child pointer; a pointer is stored once and never
 *    changed, so readers need no lock and a lost CAS means somebody else's node is now
 *    there to compare against.
 *  - Keys are compared in full (hash, tid, depth, every pc): never hash-only equality.
 *  - Nodes are immutable once published except for their counters.
 *  - Memory comes from a region; there is no deletion or rebalancing. trie_reset drops
 *    everything at once and needs the caller to ensure no put runs concurrently.
 * Context: trie_put from signal handlers (async-signal-safe); trie_foreach and reset
 * from the uploader thread after the red/black swap made the trie quiescent.
 */
#ifndef DDPROF_AGENT_STORE_TRIE_H
#define DDPROF_AGENT_STORE_TRIE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/store/profile_types.h"
#include "agent/store/region.h"

#define TRIE_FANOUT 4

struct trie_node {
	_Atomic(struct trie_node *) children[TRIE_FANOUT];
	uint64_t hash;
	uint64_t id; /* unique, > 0, stable for the node's life (not dense) */
	int32_t tid;
	uint16_t npcs;
	uint16_t kind; /* enum profile_kind (agent/store/profile_types.h) */
	/* The kind's values (profile_types[kind].nvalues of them; values[0]: samples). */
	_Atomic uint64_t values[PROFILE_VALUES_MAX];
	uintptr_t pcs[]; /* leaf first */
};

struct stack_trie {
	_Atomic(struct trie_node *) root;
	_Atomic uint64_t seq;	/* last id handed out */
	_Atomic uint64_t nodes; /* nodes published */
	struct region *region;	/* not owned */
};

void trie_init(struct stack_trie *t, struct region *r);

/*
 * async-signal-safe, lock-free. Finds or inserts the node for (kind, tid, pcs[0..n)),
 * n at most UINT16_MAX. Returns NULL only when the region is out of memory for a new
 * stack. *inserted (may be NULL) tells whether this call created the node.
 */
struct trie_node *trie_put(struct stack_trie *t, enum profile_kind kind, int32_t tid,
			   const uintptr_t *pcs, uint32_t n, bool *inserted);

/* Number of nodes published. */
uint64_t trie_count(const struct stack_trie *t);

/* Calls fn on every node (order unspecified). Safe with concurrent puts (a node
 * published during the walk may or may not be seen); counts are a snapshot. */
void trie_foreach(const struct stack_trie *t, void (*fn)(const struct trie_node *n, void *arg),
		  void *arg);

/* Forgets every node. Precondition: no trie_put runs concurrently; the caller resets
 * the region afterwards (nodes live there). */
void trie_reset(struct stack_trie *t);

#endif
