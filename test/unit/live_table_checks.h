/*
 * live_table_checks.h - what the live table's suites share: payloads that check
 * themselves, and the comparison of a table's whole content with a recorded truth.
 * Context: test threads (malloc, Check); payload_* also from the suites' signal handlers.
 */
#ifndef DDPROF_TEST_UNIT_LIVE_TABLE_CHECKS_H
#define DDPROF_TEST_UNIT_LIVE_TABLE_CHECKS_H

#include "agent/alloc/live_table.h"
#include "common/hash.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

/* async-signal-safe. The weight that goes with (addr, ref, size): an entry read with
 * parts of two payloads fails it. */
static inline uint64_t payload_weight(uintptr_t addr, uint64_t ref, uint64_t size)
{
	return hash_mix64(addr ^ hash_mix64(ref ^ (size << 17))) | 1;
}

/* async-signal-safe. The entry for (addr, ref): a size and the weight above. */
static inline struct live_table_entry payload_make(uintptr_t addr, uint64_t ref)
{
	uint64_t size = 1 + (hash_mix64(ref) & 0xfffff);
	return (struct live_table_entry){addr, ref, size, payload_weight(addr, ref, size)};
}

/* async-signal-safe */
static inline bool payload_consistent(const struct live_table_entry *e)
{
	return e->weight == payload_weight(e->addr, e->ref, e->size);
}

/* async-signal-safe */
static inline bool entry_equal(const struct live_table_entry *a, const struct live_table_entry *b)
{
	return a->addr == b->addr && a->ref == b->ref && a->size == b->size &&
	       a->weight == b->weight;
}

/* async-signal-safe */
static inline bool insert_entry(struct live_table *t, const struct live_table_entry *e)
{
	return live_table_insert(t, e->addr, e->ref, e->size, e->weight);
}

struct entry_list {
	struct live_table_entry *e;
	size_t n, cap;
};

static __attribute__((unused)) void entry_list_add(struct entry_list *l,
						   const struct live_table_entry *e)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 1024;
		l->e = realloc(l->e, l->cap * sizeof(*l->e));
		ck_assert_ptr_nonnull(l->e);
	}
	l->e[l->n++] = *e;
}

static __attribute__((unused)) void collect_entry(const struct live_table_entry *e, void *arg)
{
	entry_list_add(arg, e);
}

static __attribute__((unused)) int by_addr(const void *a, const void *b)
{
	uintptr_t x = ((const struct live_table_entry *)a)->addr;
	uintptr_t y = ((const struct live_table_entry *)b)->addr;
	return x < y ? -1 : x > y;
}

/* Checks that for_each sees exactly want[0..n) (any order; want is sorted in place),
 * entry by entry, and that the entry count says n. */
static __attribute__((unused)) void
check_table_holds_exactly(struct live_table *t, struct live_table_entry *want, size_t n)
{
	struct entry_list seen = {0};
	live_table_for_each(t, collect_entry, &seen);
	if (n) /* want may be NULL for an empty table: qsort's pointer must be valid */
		qsort(want, n, sizeof(*want), by_addr);
	if (seen.n)
		qsort(seen.e, seen.n, sizeof(*seen.e), by_addr);
	for (size_t i = 0; i < n || i < seen.n; i++) {
		if (i >= n || i >= seen.n || !entry_equal(&want[i], &seen.e[i])) {
			const struct live_table_entry none = {0}, *w = i < n ? &want[i] : &none,
						      *s = i < seen.n ? &seen.e[i] : &none;
			ck_abort_msg(
			    "entry %zu of %zu expected (seen %zu): addr %#lx ref %#llx size "
			    "%llu weight %#llx, saw addr %#lx ref %#llx size %llu weight "
			    "%#llx",
			    i, n, seen.n, (unsigned long)w->addr, (unsigned long long)w->ref,
			    (unsigned long long)w->size, (unsigned long long)w->weight,
			    (unsigned long)s->addr, (unsigned long long)s->ref,
			    (unsigned long long)s->size, (unsigned long long)s->weight);
		}
	}
	struct live_table_stats st;
	live_table_stats(t, &st);
	ck_assert_msg(st.entries == n, "expected an entry count of %zu, saw %llu", n,
		      (unsigned long long)st.entries);
	/* The coarse filter: each region counts exactly the entries in it. */
	uint32_t *want_regions = calloc(LIVE_TABLE_REGIONS, sizeof(*want_regions));
	ck_assert_ptr_nonnull(want_regions);
	for (size_t i = 0; i < n; i++)
		want_regions[live_table_region(want[i].addr)]++;
	for (size_t r = 0; r < LIVE_TABLE_REGIONS; r++) {
		uint32_t c = atomic_load(&t->regions[r]);
		if (c != want_regions[r])
			ck_abort_msg("region %zu: expected a count of %u, saw %u", r,
				     want_regions[r], c);
	}
	free(want_regions);
	free(seen.e);
}

/* Checks that every control word is 0 (no tag left, no overflow count left), and every
 * region's count. */
static __attribute__((unused)) void check_control_words_zero(const struct live_table *t)
{
	for (uint64_t j = 0; j < t->nbuckets; j++) {
		uint64_t w = atomic_load(&t->ctrl[j]);
		if (w)
			ck_abort_msg("bucket %llu: expected an empty control word, saw %#llx",
				     (unsigned long long)j, (unsigned long long)w);
	}
	for (size_t r = 0; r < LIVE_TABLE_REGIONS; r++)
		if (atomic_load(&t->regions[r]))
			ck_abort_msg("region %zu: expected a count of 0, saw %u", r,
				     (unsigned)atomic_load(&t->regions[r]));
}

#endif
