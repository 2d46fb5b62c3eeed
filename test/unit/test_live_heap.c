/*
 * test_live_heap.c - unit tests of agent/alloc/live_heap.c: the live heap's table and
 * stack store, and what a snapshot's profile gets from them.
 *
 * What the profiler relies on: a tracked allocation appears in every profile it is
 * added to (no reset between them) with its stack, its weight as inuse-space and the
 * objects that weight stands for as inuse-objects; an untracked (freed) one does not; a
 * realloc that failed tracks its block again; a fork child inherits what its parent
 * tracked (its heap is a copy), stacks included, and its own frees do not touch the
 * parent's.
 */
#include "agent/alloc/live_heap.h"

#include <check.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/unwind/unwind.h"
#include "common/clock.h"
#include "test/unit/check_run.h"

static struct profile_pair pp;

static void setup(void)
{
	ck_assert_int_eq(profiles_init(&pp, 8 << 20, 1000), 0);
	if (!live_heap_on())
		ck_assert_int_eq(live_heap_init(1 << 20), 0);
}

static void teardown(void)
{
	profiles_destroy(&pp);
}

/* inuse values of kind PROFILE_HEAP at the stack whose leaf is pc, in a fresh swap. */
struct found {
	uintptr_t leaf;
	uint64_t objects, bytes;
	int stacks;
};

static void visit(const struct trie_node *n, void *arg)
{
	struct found *f = arg;
	if (n->kind == PROFILE_HEAP && n->npcs > 0 && n->pcs[0] == f->leaf) {
		f->objects += atomic_load(&n->values[0]);
		f->bytes += atomic_load(&n->values[1]);
		f->stacks++;
	}
}

static struct found heap_at(uintptr_t leaf)
{
	struct profile *p = profiles_swap(&pp, 2000);
	live_heap_add_to(p);
	struct found f = {.leaf = leaf};
	trie_foreach(&p->trie, visit, &f);
	profiles_reset(p);
	return f;
}

START_TEST(test_tracked_allocations_stay_in_every_profile_until_untracked)
{
	const uintptr_t stack_a[] = {0x1111, 0x2222, 0x3333};
	const uintptr_t stack_b[] = {0x4444, 0x3333};
	/* Three blocks of 1000 bytes sampled at one stack, weighing 512 KiB each: 3 x 524
	 * objects; one 1 MiB block at another, weighing 1 MiB: one object. */
	for (uintptr_t i = 0; i < 3; i++)
		live_heap_track(0x100000 + i * 0x1000, 1000, 524288, 7, stack_a, 3);
	live_heap_track(0x200000, 1 << 20, 1 << 20, 8, stack_b, 2);
	for (int round = 0; round < 3; round++) {
		struct found a = heap_at(0x1111), b = heap_at(0x4444);
		ck_assert_int_eq(a.stacks, 1);
		ck_assert_uint_eq(a.bytes, 3 * 524288);
		ck_assert_uint_eq(a.objects, 3 * 524);
		ck_assert_uint_eq(b.bytes, 1 << 20);
		ck_assert_uint_eq(b.objects, 1);
	}
	struct live_table_entry e;
	ck_assert(live_heap_untrack(0x100000, &e));
	ck_assert_uint_eq(e.size, 1000);
	ck_assert(!live_heap_untrack(0x100000, NULL));
	ck_assert(!live_heap_untrack(0x999000, NULL)); /* never tracked */
	ck_assert_uint_eq(heap_at(0x1111).bytes, 2 * 524288);
	/* A failed realloc keeps its block: tracked again, with its stack. */
	live_heap_retrack(&e);
	ck_assert_uint_eq(heap_at(0x1111).bytes, 3 * 524288);
	for (uintptr_t i = 0; i < 3; i++)
		ck_assert(live_heap_untrack(0x100000 + i * 0x1000, NULL));
	ck_assert(live_heap_untrack(0x200000, NULL));
	ck_assert_uint_eq(heap_at(0x1111).bytes, 0);
	ck_assert_uint_eq(heap_at(0x4444).bytes, 0);
	struct live_heap_stats st;
	live_heap_get_stats(&st);
	ck_assert_uint_eq(st.table.entries, 0);
	ck_assert_uint_eq(st.stacks, 2);
}
END_TEST

START_TEST(test_a_fork_child_inherits_the_live_heap_with_its_stacks)
{
	const uintptr_t stack[] = {0x5555, 0x6666};
	live_heap_track(0x300000, 4096, 1 << 19, 9, stack, 2);
	live_heap_track(0x301000, 4096, 1 << 19, 9, stack, 2);
	pid_t pid = fork();
	if (pid == 0) {
		live_heap_after_fork_child();
		int ok = heap_at(0x5555).bytes == 2u << 19;
		ok &= live_heap_untrack(0x300000, NULL);
		ok &= heap_at(0x5555).bytes == 1u << 19;
		_exit(ok ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "the child did not see what it inherited");
	/* The child's free was its own. */
	ck_assert_uint_eq(heap_at(0x5555).bytes, 2u << 19);
	ck_assert(live_heap_untrack(0x300000, NULL) && live_heap_untrack(0x301000, NULL));
}
END_TEST

/* The live heap's own memory is in every heap profile as inuse-space of "[profiler]":
 * the table's pages written so far (the control words, a page per insert at most, never
 * more than the mapping) and the stack store. */
START_TEST(test_the_live_heaps_own_memory_is_the_profilers_share)
{
	struct live_heap_stats st0, st1;
	live_heap_get_stats(&st0);
	struct found f0 = heap_at(PC_PROFILER);
	ck_assert_int_eq(f0.stacks, 1);
	ck_assert_uint_eq(f0.bytes, live_heap_own_bytes(&st0));
	ck_assert_uint_eq(f0.objects, 0);
	ck_assert_uint_le(st0.table.touched_bound, st0.table.bytes);
	ck_assert_uint_gt(st0.stack_bytes, 0);
	const uintptr_t stack[] = {0x7171, 0x7272};
	for (uintptr_t i = 0; i < 4; i++)
		live_heap_track(0x400000 + i * 0x1000, 64, 1 << 19, 3, stack, 2);
	live_heap_get_stats(&st1);
	ck_assert_uint_eq(heap_at(PC_PROFILER).bytes, live_heap_own_bytes(&st1));
	ck_assert_uint_le(st1.table.touched_bound, st1.table.bytes);
	/* Four more inserts: four pages more at most, and no fewer than one more than
	 * before unless the whole mapping was already counted. */
	ck_assert_uint_le(st1.table.touched_bound, st0.table.touched_bound + 4 * 4096);
	ck_assert(st1.table.touched_bound > st0.table.touched_bound ||
		  st1.table.touched_bound == st1.table.bytes);
	for (uintptr_t i = 0; i < 4; i++)
		ck_assert(live_heap_untrack(0x400000 + i * 0x1000, NULL));
}
END_TEST

/* Compaction: the stacks of freed allocations leave the store, those of live ones stay
 * with their values, however many compactions ago they were made; a block untracked for
 * a realloc before a compaction and tracked again after it is dropped (its stack may
 * be gone), one from the same epoch is tracked again. */
/* The host's calls from a second after start-up on: the table mapped ahead. */
static void populate_all(void)
{
	uint64_t late = clock_now_ns(CLOCK_MONOTONIC) + 2000ULL * 1000 * 1000;
	for (int i = 0; i < 64 && live_heap_maintain(late, false) != UINT64_MAX; i++)
		;
}

START_TEST(test_the_table_is_mapped_ahead_only_after_a_second)
{
	/* A process that ends within a second (a compiler, a shell command) never maps
	 * the budget: 8 MiB of zeroed pages by default, several ms of its CPU. */
	uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
	struct live_heap_stats st;
	live_heap_get_stats(&st);
	ck_assert_uint_lt(st.table.touched_bound, st.table.bytes);
	ck_assert(!live_heap_populate_wanted());
	uint64_t due = live_heap_maintain(now, false);
	ck_assert_msg(due > now + 900ULL * 1000 * 1000 && due <= now + 1000ULL * 1000 * 1000 + 1,
		      "the host comes back when the second is over (due in %.3f s)",
		      (double)(due - now) / 1e9);
	live_heap_get_stats(&st);
	ck_assert_msg(st.table.touched_bound < st.table.bytes, "nothing mapped before then");
	populate_all();
	live_heap_get_stats(&st);
	ck_assert_uint_eq(st.table.touched_bound, st.table.bytes);
	ck_assert(!live_heap_populate_wanted());
}
END_TEST

START_TEST(test_compaction_keeps_the_live_stacks_and_drops_the_rest)
{
	populate_all();
	struct live_heap_stats st;
	live_heap_get_stats(&st);
	uint64_t stacks0 = st.stacks;
	for (uintptr_t i = 0; i < 200; i++) {
		const uintptr_t stack[] = {0x50000 + i, 0x5fff0};
		live_heap_track(0x1000000 + i * 0x1000, 100, 1000, 4, stack, 2);
	}
	for (uintptr_t i = 10; i < 200; i++)
		ck_assert(live_heap_untrack(0x1000000 + i * 0x1000, NULL));
	live_heap_get_stats(&st);
	ck_assert_uint_eq(st.stacks, stacks0 + 200);
	for (int round = 0; round < 3; round++) {
		ck_assert_uint_eq(live_heap_maintain(1, true), UINT64_MAX);
		live_heap_get_stats(&st);
		ck_assert_uint_eq(st.compactions, (uint64_t)round + 1);
		ck_assert_uint_eq(st.stacks, 10);
		for (uintptr_t i = 0; i < 12; i++) {
			struct found f = heap_at(0x50000 + i);
			ck_assert_uint_eq(f.bytes, i < 10 ? 1000 : 0);
			ck_assert_uint_eq(f.objects, i < 10 ? 10 : 0);
		}
	}
	/* A realloc across a compaction: not tracked again. Within one epoch: tracked. */
	struct live_table_entry e;
	ck_assert(live_heap_untrack(0x1000000, &e));
	ck_assert_uint_eq(live_heap_maintain(1, true), UINT64_MAX);
	live_heap_retrack(&e);
	live_heap_get_stats(&st);
	ck_assert_uint_eq(st.retracks_dropped, 1);
	ck_assert_uint_eq(heap_at(0x50000).bytes, 0);
	ck_assert(live_heap_untrack(0x1001000, &e));
	live_heap_retrack(&e);
	ck_assert_uint_eq(heap_at(0x50001).bytes, 1000);
	/* Below its mark the store is not compacted unless forced; while it grows the
	 * host looks again within 50 ms, once it stopped growing for a second no more. */
	const uint64_t t0 = 10ULL * 1000 * 1000 * 1000, ms = 1000 * 1000;
	const uintptr_t fresh[] = {0x7abc, 0x5fff0};
	live_heap_track(0x2000000, 100, 1000, 4, fresh, 2);
	ck_assert_uint_eq(live_heap_maintain(t0, false), t0 + 50 * ms);
	ck_assert_uint_eq(live_heap_maintain(t0 + 500 * ms, false), t0 + 550 * ms);
	ck_assert_uint_eq(live_heap_maintain(t0 + 1500 * ms, false), UINT64_MAX);
	live_heap_get_stats(&st);
	ck_assert_uint_eq(st.compactions, 4);
}
END_TEST

static Suite *live_heap_suite(void)
{
	Suite *s = suite_create("live_heap");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_tracked_allocations_stay_in_every_profile_until_untracked);
	tcase_add_test(tc, test_a_fork_child_inherits_the_live_heap_with_its_stacks);
	tcase_add_test(tc, test_the_live_heaps_own_memory_is_the_profilers_share);
	tcase_add_test(tc, test_compaction_keeps_the_live_stacks_and_drops_the_rest);
	tcase_add_test(tc, test_the_table_is_mapped_ahead_only_after_a_second);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(live_heap_suite());
}
