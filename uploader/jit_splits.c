/*
 * jit_splits.c - records of stacks' counts per JIT epoch (see jit_splits.h).
 * Context: uploader thread only.
 */
#include "uploader/jit_splits.h"

#include <string.h>

#include "agent/unwind/unwind.h"
#include "common/big_alloc.h"
#include "common/sort.h"

void jit_splits_init(struct jit_splits *s)
{
	memset(s, 0, sizeof(*s));
}

void jit_splits_free(struct jit_splits *s)
{
	big_free(s->v);
	jit_splits_init(s);
}

struct record_walk {
	struct jit_splits *s;
	const struct symbolizer *sym;
	uint32_t before;
	uint64_t lo, hi; /* what the pass renamed lies in [lo, hi): other pcs are skipped */
};

static void push(struct jit_splits *s, const struct jit_split *r)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256;
		struct jit_split *v =
		    cap <= JIT_SPLITS_MAX ? big_realloc(s->v, cap * sizeof(*v)) : NULL;
		if (!v) {
			s->dropped++;
			return;
		}
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = *r;
}

static void visit(const struct trie_node *node, void *arg)
{
	struct record_walk *w = arg;
	bool renamed = false;
	for (uint32_t i = 0; i < node->npcs && !renamed; i++) {
		uintptr_t pc = node->pcs[i] - (i > 0);
		renamed = node->pcs[i] > PC_SYNTHETIC_MAX && pc >= w->lo && pc < w->hi &&
			  symbolizer_jit_renamed(w->sym, node->pcs[i], i > 0, w->before);
	}
	if (!renamed)
		return;
	struct jit_split r = {.node = node, .epoch = w->before};
	bool any = false;
	for (uint32_t i = 0; i < PROFILE_VALUES_MAX; i++) {
		r.values[i] = atomic_load_explicit(&node->values[i], memory_order_relaxed);
		any |= r.values[i] != 0;
	}
	if (any)
		push(w->s, &r);
}

void jit_splits_record(struct jit_splits *s, const struct profile *active,
		       const struct symbolizer *sym, uint32_t before)
{
	if (s->profile != active) {
		s->n = s->sorted = 0;
		s->profile = active;
	}
	struct record_walk w = {s, sym, before, 0, 0};
	symbolizer_jit_last_span(sym, &w.lo, &w.hi);
	if (w.lo < w.hi)
		trie_foreach(&active->trie, visit, &w);
}

static int split_cmp(const void *a, const void *b)
{
	const struct jit_split *x = a, *y = b;
	if (x->node != y->node)
		return (uintptr_t)x->node < (uintptr_t)y->node ? -1 : 1;
	return x->epoch < y->epoch ? -1 : x->epoch > y->epoch;
}

size_t jit_splits_of(struct jit_splits *s, const struct profile *p, const struct trie_node *node,
		     const struct jit_split **out)
{
	if (s->profile != p || s->n == 0)
		return 0;
	if (s->sorted != s->n) {
		sort_inplace(s->v, s->n, sizeof(*s->v), split_cmp);
		s->sorted = s->n;
	}
	size_t lo = 0, hi = s->n;
	while (lo < hi) { /* the first record of node */
		size_t mid = lo + (hi - lo) / 2;
		if ((uintptr_t)s->v[mid].node < (uintptr_t)node)
			lo = mid + 1;
		else
			hi = mid;
	}
	size_t k = lo;
	while (k < s->n && s->v[k].node == node)
		k++;
	*out = &s->v[lo];
	return k - lo;
}
