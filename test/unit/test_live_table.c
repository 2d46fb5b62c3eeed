/*
 * test_live_table.c - unit tests of agent/alloc/live_table.c: the live heap's table.
 *
 * Single-threaded: sizing from the budget; the payload's round trip; removes of
 * addresses never inserted (false, the table unchanged, the filter's false hits
 * probed); an insert of a present address replacing it; a full table refusing and
 * counting, every entry still found; entries placed past a full home bucket found, and
 * the overflow counts back to 0 once they are gone; churn of 100 x the capacity without
 * losing a slot; for_each seeing exactly the live set; clear; a fork child inheriting a
 * copy. test_live_table_stress.c: many threads, cross-thread frees, signal handlers.
 */
#include "agent/alloc/live_table.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/unit/check_run.h"
#include "test/unit/live_table_checks.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
/* The smallest table: one page, 17 buckets of 7 slots. */
#define TINY_BUDGET (4 * KIB)

/* Address number i of family f: malloc-like (16-byte aligned, dense within a family). */
static uintptr_t addr_of(unsigned f, uint64_t i)
{
	return ((uintptr_t)(f + 1) << 36) + (uintptr_t)i * 16;
}

/* A random address below 2^47, 16-byte aligned. */
static uintptr_t random_addr(uint64_t *seed)
{
	*seed = hash_mix64(*seed + 0x9e3779b97f4a7c15ULL);
	return (uintptr_t)(*seed & ((1ULL << 47) - 16)) | 16;
}

/* The largest default a user is likely to set. */
#define BIG_BUDGET ((size_t)32 << 20)

START_TEST(test_init_sizes_the_table_from_the_budget)
{
	struct live_table t;
	struct live_table_stats st;
	ck_assert_int_eq(live_table_init(&t, BIG_BUDGET), 0);
	live_table_stats(&t, &st);
	/* 33 bytes and a seventh a slot: about a million in 32 MiB. */
	ck_assert_msg(st.bytes <= BIG_BUDGET && st.capacity >= 1000000,
		      "expected >= 1e6 slots in <= 32 MiB, saw %llu in %zu bytes",
		      (unsigned long long)st.capacity, st.bytes);
	ck_assert_uint_eq(st.entries + st.overflows + st.probes, 0);
	live_table_destroy(&t);
	ck_assert_int_eq(live_table_init(&t, TINY_BUDGET + 1000), 0);
	live_table_stats(&t, &st);
	ck_assert_msg(st.bytes == TINY_BUDGET && st.capacity == 17 * LIVE_TABLE_BUCKET_SLOTS,
		      "expected 119 slots in one page, saw %llu in %zu bytes",
		      (unsigned long long)st.capacity, st.bytes);
	live_table_destroy(&t);
	ck_assert_int_eq(live_table_init(&t, 1000), -EINVAL);
	ck_assert_int_eq(live_table_init(&t, 0), -EINVAL);
}
END_TEST

/* Populated ahead, step by step, while entries come and go: every page mapped in the
 * end, the entries intact, and the statistics count the whole mapping as resident; a
 * clear gives the pages back and populating starts over. */
START_TEST(test_populate_maps_the_table_ahead_of_its_entries)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, 4 * MIB), 0);
	enum { N = 2000 };
	struct live_table_entry *want = calloc(N, sizeof(*want));
	ck_assert_ptr_nonnull(want);
	uint64_t seed = 11;
	size_t left = t.map_len, steps = 0, n = 0;
	while (left) {
		size_t next = live_table_populate(&t, 256 * KIB);
		ck_assert_uint_lt(next, left);
		left = next;
		steps++;
		for (int i = 0; i < 100 && n < N; i++, n++) {
			want[n] = payload_make(random_addr(&seed), n);
			ck_assert(insert_entry(&t, &want[n]));
		}
	}
	ck_assert_uint_ge(steps, t.map_len / (256 * KIB));
	ck_assert_uint_eq(live_table_populate(&t, 256 * KIB), 0);
	struct live_table_stats st;
	live_table_stats(&t, &st);
	ck_assert_uint_eq(st.touched_bound, t.map_len);
	/* Resident: mincore says every page is in memory. */
	size_t pages = t.map_len / 4096;
	unsigned char *vec = malloc(pages);
	ck_assert_ptr_nonnull(vec);
	ck_assert_int_eq(mincore(t.map, t.map_len, vec), 0);
	size_t resident = 0;
	for (size_t i = 0; i < pages; i++)
		resident += vec[i] & 1;
	ck_assert_uint_eq(resident, pages);
	check_table_holds_exactly(&t, want, n);
	live_table_clear(&t);
	live_table_stats(&t, &st);
	ck_assert_uint_lt(st.touched_bound, t.map_len);
	ck_assert_uint_gt(live_table_populate(&t, 256 * KIB), 0);
	free(vec);
	free(want);
	live_table_destroy(&t);
}
END_TEST

START_TEST(test_payload_round_trips_and_removed_entries_are_gone)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, MIB), 0);
	enum { N = 20000 };
	for (uint64_t i = 0; i < N; i++) {
		struct live_table_entry e = payload_make(addr_of(0, i), i);
		ck_assert_msg(insert_entry(&t, &e), "insert %llu refused", (unsigned long long)i);
	}
	for (uint64_t i = 0; i < N; i++) {
		struct live_table_entry want = payload_make(addr_of(0, i), i), got = {0};
		if (!live_table_remove(&t, want.addr, &got) || !entry_equal(&want, &got))
			ck_abort_msg("entry %llu: expected ref %llu size %llu back, saw ref %llu "
				     "size %llu",
				     (unsigned long long)i, (unsigned long long)want.ref,
				     (unsigned long long)want.size, (unsigned long long)got.ref,
				     (unsigned long long)got.size);
		ck_assert_msg(!live_table_remove(&t, want.addr, NULL), "entry %llu: removed twice",
			      (unsigned long long)i);
	}
	check_table_holds_exactly(&t, NULL, 0);
	check_control_words_zero(&t);
	live_table_destroy(&t);
}
END_TEST

START_TEST(test_untracked_removes_are_false_and_change_nothing)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, TINY_BUDGET), 0);
	/* 100 entries in 119 slots: about 6 a bucket, so that about one untracked remove
	 * in 40 matches a tag and reads a slot (the filter's false hits). */
	enum { N = 100, OTHERS = 200000 };
	struct live_table_entry want[N];
	for (uint64_t i = 0; i < N; i++) {
		want[i] = payload_make(addr_of(1, i), i);
		ck_assert(insert_entry(&t, &want[i]));
	}
	/* Addresses of regions without an entry: the coarse filter answers, no control
	 * word is read (the region of family 1's entries and its aliases skipped). */
	struct live_table_stats st;
	uint64_t far = 0;
	for (uint64_t i = 0; far < OTHERS; i++) {
		uintptr_t a = addr_of(2, i);
		if (live_table_region(a) == live_table_region(addr_of(1, 0)))
			continue;
		if (live_table_remove(&t, a, NULL))
			ck_abort_msg("untracked address %llu removed", (unsigned long long)i);
		far++;
	}
	live_table_stats(&t, &st);
	ck_assert_msg(st.false_hits == 0 && st.probes == 0,
		      "removes in regions without entries read %llu slots",
		      (unsigned long long)st.probes);
	/* Untracked addresses whose counter is the entries' (the pages that share it): the
	 * control words filter, with a false hit in ~40 of the addresses. */
	uint64_t near = 0;
	const uint64_t entries_region = live_table_region(addr_of(1, 0));
	for (uintptr_t page = addr_of(3, 0); near < OTHERS; page += 1 << LIVE_TABLE_REGION_SHIFT) {
		if (live_table_region(page) != entries_region)
			continue;
		for (uintptr_t a = page; a < page + (1 << LIVE_TABLE_REGION_SHIFT) && near < OTHERS;
		     a += 16, near++)
			if (live_table_remove(&t, a, NULL))
				ck_abort_msg("untracked address %#llx removed",
					     (unsigned long long)a);
	}
	live_table_stats(&t, &st);
	ck_assert_msg(st.false_hits > OTHERS / 200 && st.false_hits < OTHERS / 10,
		      "expected a false hit in ~40 removes, saw %llu in %d",
		      (unsigned long long)st.false_hits, OTHERS);
	ck_assert_uint_ge(st.probes, st.false_hits);
	ck_assert(!live_table_remove(&t, 0, NULL));
	check_table_holds_exactly(&t, want, N);
	live_table_destroy(&t);
}
END_TEST

START_TEST(test_insert_of_a_present_address_replaces_it)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, TINY_BUDGET), 0);
	struct live_table_entry a = payload_make(0x5000, 1), b = payload_make(0x5000, 2),
				other = payload_make(0x6000, 3), got;
	ck_assert(insert_entry(&t, &a));
	ck_assert(insert_entry(&t, &other));
	ck_assert(insert_entry(&t, &b)); /* 0x5000 freed without a remove, then reused */
	struct live_table_stats st;
	live_table_stats(&t, &st);
	ck_assert_uint_eq(st.replaced, 1);
	struct live_table_entry want[2] = {b, other};
	check_table_holds_exactly(&t, want, 2);
	ck_assert(live_table_remove(&t, 0x5000, &got));
	ck_assert_msg(entry_equal(&got, &b), "expected the second payload, saw ref %llu",
		      (unsigned long long)got.ref);
	ck_assert(!live_table_remove(&t, 0x5000, &got));
	check_table_holds_exactly(&t, &other, 1);
	live_table_destroy(&t);
}
END_TEST

START_TEST(test_insert_refuses_zero_and_addresses_past_the_limit)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, TINY_BUDGET), 0);
	ck_assert(!live_table_insert(&t, 0, 1, 2, 3));
	ck_assert(!live_table_insert(&t, LIVE_TABLE_ADDR_LIMIT, 1, 2, 3));
	ck_assert(!live_table_insert(&t, UINTPTR_MAX, 1, 2, 3));
	ck_assert(live_table_insert(&t, LIVE_TABLE_ADDR_LIMIT - 1, 1, 2, 3));
	ck_assert(live_table_insert(&t, 1, 4, 5, 6));
	ck_assert(!live_table_remove(&t, LIVE_TABLE_ADDR_LIMIT, NULL));
	ck_assert(
	    !live_table_remove(&t, (LIVE_TABLE_ADDR_LIMIT - 1) | LIVE_TABLE_ADDR_LIMIT, NULL));
	struct live_table_stats st;
	live_table_stats(&t, &st);
	ck_assert_uint_eq(st.overflows, 2); /* the two past the limit, counted as refused */
	struct live_table_entry want[2] = {{LIVE_TABLE_ADDR_LIMIT - 1, 1, 2, 3}, {1, 4, 5, 6}};
	check_table_holds_exactly(&t, want, 2);
	live_table_destroy(&t);
}
END_TEST

START_TEST(test_full_table_refuses_counts_and_keeps_every_entry)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, TINY_BUDGET), 0);
	struct live_table_stats st;
	live_table_stats(&t, &st);
	enum { TRIES = 5000 };
	struct live_table_entry *in = calloc(TRIES, sizeof(*in));
	uintptr_t *out = calloc(TRIES, sizeof(*out));
	size_t n = 0, refused = 0;
	uint64_t seed = 7;
	for (uint64_t i = 0; i < TRIES; i++) {
		struct live_table_entry e = payload_make(random_addr(&seed), i);
		if (insert_entry(&t, &e))
			in[n++] = e;
		else
			out[refused++] = e.addr;
	}
	/* 17 buckets, each within reach of 8 homes: every slot ends up taken. */
	ck_assert_msg(n == st.capacity, "expected all %llu slots taken, saw %zu",
		      (unsigned long long)st.capacity, n);
	live_table_stats(&t, &st);
	ck_assert_uint_eq(st.overflows, refused);
	ck_assert_uint_gt(st.displaced, 0);
	check_table_holds_exactly(&t, in, n);
	/* A refused address is absent (the walk above saw only the taken ones); every
	 * taken one comes back. */
	for (size_t i = 0; i < refused; i++)
		if (live_table_remove(&t, out[i], NULL))
			ck_abort_msg("refused address %#lx found", (unsigned long)out[i]);
	qsort(in, n, sizeof(*in), by_addr);
	for (size_t i = 0; i < n; i++) {
		struct live_table_entry got;
		if (!live_table_remove(&t, in[i].addr, &got) || !entry_equal(&got, &in[i]))
			ck_abort_msg("entry %zu of a full table: expected it back", i);
	}
	live_table_stats(&t, &st);
	ck_assert_uint_eq(st.displaced, 0);
	check_table_holds_exactly(&t, NULL, 0);
	check_control_words_zero(&t);
	free(out);
	free(in);
	live_table_destroy(&t);
}
END_TEST

/* Inserts random addresses into a fresh 1 MiB table until the first refusal: the share
 * of the slots taken then (bounded probing refuses before the table is full). */
START_TEST(test_first_refusal_comes_late)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, MIB), 0);
	struct live_table_stats st;
	live_table_stats(&t, &st);
	uint64_t seed = 11, n = 0;
	while (live_table_insert(&t, random_addr(&seed), n, 1, 1))
		n++;
	double fill = (double)n / (double)st.capacity;
	ck_assert_msg(fill > 0.80,
		      "expected the first refusal past 80%% of %llu slots, saw "
		      "%.3f",
		      (unsigned long long)st.capacity, fill);
	live_table_destroy(&t);
}
END_TEST

START_TEST(test_churn_of_100_times_the_capacity_loses_no_slot)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, TINY_BUDGET), 0);
	struct live_table_stats st;
	live_table_stats(&t, &st);
	const size_t cap = st.capacity, live = cap / 2;
	struct live_table_entry *cur = calloc(live, sizeof(*cur));
	uint64_t next = 0, seed = 3;
	for (size_t i = 0; i < live; i++) {
		cur[i] = payload_make(addr_of(3, next), next);
		next++;
		ck_assert(insert_entry(&t, &cur[i]));
	}
	/* Each step frees a random live entry and inserts a new address in its place. */
	for (size_t step = 0; step < 100 * cap; step++) {
		seed = hash_mix64(seed + step);
		size_t i = seed % live;
		struct live_table_entry got;
		if (!live_table_remove(&t, cur[i].addr, &got) || !entry_equal(&got, &cur[i]))
			ck_abort_msg("step %zu: expected entry %#lx back", step,
				     (unsigned long)cur[i].addr);
		cur[i] = payload_make(addr_of(3, next), next);
		next++;
		if (!insert_entry(&t, &cur[i]))
			ck_abort_msg("step %zu: insert refused at half load", step);
	}
	check_table_holds_exactly(&t, cur, live);
	for (size_t i = 0; i < live; i++)
		ck_assert(live_table_remove(&t, cur[i].addr, NULL));
	check_control_words_zero(&t);
	/* As fresh: every slot can be taken again. */
	size_t n = 0;
	for (uint64_t i = 0; i < 20 * cap; i++)
		n += live_table_insert(&t, addr_of(4, i), i, 1, 1);
	ck_assert_msg(n == cap, "expected all %zu slots taken after the churn, saw %zu", cap, n);
	free(cur);
	live_table_destroy(&t);
}
END_TEST

START_TEST(test_for_each_sees_exactly_the_live_set)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, 256 * KIB), 0);
	enum { N = 3000 };
	struct live_table_entry *want = calloc(N, sizeof(*want));
	size_t n = 0;
	for (uint64_t i = 0; i < N; i++) {
		struct live_table_entry e = payload_make(addr_of(5, i * 7), i);
		ck_assert(insert_entry(&t, &e));
		/* Two in five removed again: the walk must not see them. */
		if (i % 5 < 2)
			ck_assert(live_table_remove(&t, e.addr, NULL));
		else
			want[n++] = e;
	}
	check_table_holds_exactly(&t, want, n);
	free(want);
	live_table_destroy(&t);
}
END_TEST

START_TEST(test_clear_drops_every_entry_and_the_table_works_after)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, 64 * KIB), 0);
	for (uint64_t i = 0; i < 1000; i++)
		ck_assert(live_table_insert(&t, addr_of(6, i), i, 1, 1));
	live_table_clear(&t);
	check_table_holds_exactly(&t, NULL, 0);
	check_control_words_zero(&t);
	ck_assert(!live_table_remove(&t, addr_of(6, 10), NULL));
	struct live_table_entry e = payload_make(addr_of(6, 10), 99);
	ck_assert(insert_entry(&t, &e));
	check_table_holds_exactly(&t, &e, 1);
	live_table_destroy(&t);
}
END_TEST

/* The child's checks, reported through its exit status (Check's asserts would end
 * the child's copy of the test with the parent's output). */
static int child_checks(struct live_table *t, const struct live_table_entry *want, size_t n)
{
	struct entry_list seen = {0};
	live_table_for_each(t, collect_entry, &seen);
	if (seen.n != n)
		return 10;
	qsort(seen.e, seen.n, sizeof(*seen.e), by_addr);
	for (size_t i = 0; i < n; i++)
		if (!entry_equal(&seen.e[i], &want[i]))
			return 11;
	free(seen.e);
	/* The child's own changes: half its entries freed, new ones, then a clear. */
	for (size_t i = 0; i < n; i += 2)
		if (!live_table_remove(t, want[i].addr, NULL))
			return 12;
	for (uint64_t i = 0; i < 50; i++)
		if (!live_table_insert(t, addr_of(8, i), i, 1, 1))
			return 13;
	live_table_clear(t);
	struct live_table_stats st;
	live_table_stats(t, &st);
	return st.entries == 0 ? 0 : 14;
}

START_TEST(test_fork_child_inherits_a_copy)
{
	struct live_table t;
	ck_assert_int_eq(live_table_init(&t, 64 * KIB), 0);
	enum { N = 500 };
	struct live_table_entry want[N];
	for (uint64_t i = 0; i < N; i++) {
		want[i] = payload_make(addr_of(7, i), i);
		ck_assert(insert_entry(&t, &want[i]));
	}
	qsort(want, N, sizeof(*want), by_addr);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(child_checks(&t, want, N));
	int status = 0;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "expected the child to see the parent's %d entries and clear its copy, "
		      "saw status %#x (10-14: the failed step)",
		      N, status);
	/* The parent's table is its own: nothing the child did shows. */
	check_table_holds_exactly(&t, want, N);
	live_table_destroy(&t);
}
END_TEST

static Suite *live_table_suite(void)
{
	Suite *s = suite_create("live_table");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_init_sizes_the_table_from_the_budget);
	tcase_add_test(tc, test_populate_maps_the_table_ahead_of_its_entries);
	tcase_add_test(tc, test_payload_round_trips_and_removed_entries_are_gone);
	tcase_add_test(tc, test_untracked_removes_are_false_and_change_nothing);
	tcase_add_test(tc, test_insert_of_a_present_address_replaces_it);
	tcase_add_test(tc, test_insert_refuses_zero_and_addresses_past_the_limit);
	tcase_add_test(tc, test_full_table_refuses_counts_and_keeps_every_entry);
	tcase_add_test(tc, test_first_refusal_comes_late);
	tcase_add_test(tc, test_churn_of_100_times_the_capacity_loses_no_slot);
	tcase_add_test(tc, test_for_each_sees_exactly_the_live_set);
	tcase_add_test(tc, test_clear_drops_every_entry_and_the_table_works_after);
	tcase_add_test(tc, test_fork_child_inherits_a_copy);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(live_table_suite());
}
