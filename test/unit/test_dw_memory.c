/*
 * test_dw_memory.c - unit tests of agent/symbolize/dw_memory.c: libdw's and libelf's
 * large blocks come from mappings of the profiler's, remembered until freed; blocks of
 * others go back to malloc's free and realloc; libdw's slots point at the replacements
 * once dw_api loads it, and reading a debug file's compressed DWARF through it leaves
 * the process's mmap threshold where it was.
 */
#include "agent/symbolize/dw_memory.h"

#include <check.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/symbolize/dw_api.h"
#include "agent/symbolize/sym_dwarf.h"
#include "common/asan.h"
#include "test/unit/check_run.h"

#define BIG (DW_MEMORY_MAP_MIN + 100)
#define ZEROED (BIG / 8 * 8)

static bool glibc_mapped(const void *p)
{
	uint64_t size_word;
	memcpy(&size_word, (const void *)((uintptr_t)p - 8), sizeof(size_word));
	return size_word & 2; /* IS_MMAPPED */
}

START_TEST(test_small_blocks_are_mallocs_and_large_ones_mapped_apart)
{
	struct dw_memory_stats before, after;
	dw_memory_get_stats(&before);
	char *small = dw_memory_malloc(100);
	char *big = dw_memory_malloc(BIG);
	char *zeroed = dw_memory_calloc(ZEROED / 8, 8);
	void *aligned = NULL, *wide = NULL;
	ck_assert_int_eq(dw_memory_posix_memalign(&aligned, 16, BIG), 0);
	ck_assert_int_eq(dw_memory_posix_memalign(&wide, 256, BIG), 0);
	ck_assert(small && big && zeroed && aligned && wide);
	ck_assert(!dw_memory_owns(small));
	ck_assert(dw_memory_owns(big) && dw_memory_owns(zeroed) && dw_memory_owns(aligned));
	/* An alignment past big_alloc's 16 bytes: posix_memalign's, aligned as asked. */
	ck_assert(!dw_memory_owns(wide));
	ck_assert_uint_eq((uintptr_t)wide % 256, 0);
	ck_assert_uint_eq((uintptr_t)big % 16, 0);
	memset(big, 0xab, BIG);
	size_t nonzero = 0;
	for (size_t i = 0; i < ZEROED; i++)
		nonzero += zeroed[i] != 0;
	ck_assert_uint_eq(nonzero, 0);
	dw_memory_get_stats(&after);
	ck_assert_uint_eq(after.blocks_mapped - before.blocks_mapped, 3);
	ck_assert_uint_eq(after.live_blocks, before.live_blocks + 3);
	ck_assert_uint_ge(after.peak_bytes, 2 * (uint64_t)BIG + ZEROED);
	dw_memory_free(small);
	dw_memory_free(big);
	dw_memory_free(zeroed);
	dw_memory_free(aligned);
	dw_memory_free(wide);
	dw_memory_free(NULL);
	ck_assert(!dw_memory_owns(big));
	dw_memory_get_stats(&after);
	ck_assert_uint_eq(after.live_blocks, before.live_blocks);
	ck_assert_uint_eq(after.fallbacks, before.fallbacks);
}
END_TEST

/* realloc across the line both ways, and from ours to ours: the contents kept; a
 * block of libc's (strdup) grown large moves into one of ours. */
START_TEST(test_realloc_moves_across_the_line_keeping_the_contents)
{
	char *p = dw_memory_malloc(1000);
	for (int i = 0; i < 1000; i++)
		p[i] = (char)i;
	p = dw_memory_realloc(p, BIG);
	ck_assert(dw_memory_owns(p));
	int bad = 0;
	for (int i = 0; i < 1000; i++)
		bad += p[i] != (char)i;
	memset(p + 1000, 7, BIG - 1000);
	p = dw_memory_realloc(p, 4 * BIG);
	ck_assert(dw_memory_owns(p));
	for (int i = 0; i < 1000; i++)
		bad += p[i] != (char)i;
	for (size_t i = 1000; i < BIG; i++)
		bad += p[i] != 7;
	p = dw_memory_realloc(p, 500); /* still ours until freed: big_alloc's block */
	for (int i = 0; i < 500; i++)
		bad += p[i] != (char)i;
	ck_assert_int_eq(bad, 0);
	ck_assert_ptr_null(dw_memory_realloc(p, 0)); /* freed */
	ck_assert(!dw_memory_owns(p));

	char *s = strdup("a string libc allocated");
	s = dw_memory_realloc(s, BIG);
	ck_assert(dw_memory_owns(s));
	ck_assert_str_eq(s, "a string libc allocated");
	dw_memory_free(s);
	char *t = strdup("freed by free");
	dw_memory_free(t); /* not ours: malloc's free, no crash under ASan */
}
END_TEST

/* A thousand blocks, freed in a scrambled order: each one ours until freed, none left
 * (the registry's deletions keep every probe chain whole). */
START_TEST(test_the_registry_holds_every_block_until_it_is_freed)
{
	enum { N = 1000 };
	static char *v[N];
	struct dw_memory_stats base, s;
	dw_memory_get_stats(&base);
	for (int i = 0; i < N; i++)
		v[i] = dw_memory_malloc(DW_MEMORY_MAP_MIN);
	dw_memory_get_stats(&s);
	ck_assert_uint_eq(s.live_blocks, base.live_blocks + N);
	int lost = 0;
	for (int k = 0; k < N; k++) {
		int i = (int)((k * 7919u) % N);
		for (int j = 0; j < N; j += 97)
			lost += v[j] && !dw_memory_owns(v[j]);
		dw_memory_free(v[i]);
		lost += dw_memory_owns(v[i]);
		v[i] = NULL;
	}
	ck_assert_int_eq(lost, 0);
	dw_memory_get_stats(&s);
	ck_assert_uint_eq(s.live_blocks, base.live_blocks);
}
END_TEST

/* Past the registry's room, large blocks come from malloc, counted, and free well. */
START_TEST(test_a_full_registry_falls_back_to_malloc)
{
	enum { N = 4200 };
	static char *v[N];
	struct dw_memory_stats base, s;
	dw_memory_get_stats(&base);
	int owned = 0;
	for (int i = 0; i < N; i++) {
		v[i] = dw_memory_malloc(DW_MEMORY_MAP_MIN);
		ck_assert_ptr_nonnull(v[i]);
		owned += dw_memory_owns(v[i]);
	}
	dw_memory_get_stats(&s);
	ck_assert_int_lt(owned, N);
	ck_assert_uint_eq(s.fallbacks - base.fallbacks, (uint64_t)(N - owned));
	for (int i = 0; i < N; i++)
		dw_memory_free(v[i]);
	dw_memory_get_stats(&s);
	ck_assert_uint_eq(s.live_blocks, base.live_blocks);
}
END_TEST

/* libm's debug file (libc6-dbg) holds MiBs of compressed DWARF, which libelf
 * decompresses into blocks of hundreds of KiB. Through dw_api's libdw, in a child: the
 * slots point here, the blocks are mapped apart, and once the session is closed a
 * 130 KiB malloc is still a mapping of its own (glibc's threshold unchanged). */
#define LIBM "/lib/x86_64-linux-gnu/libm.so.6"

/* The session, on a thread of its own as on the uploader's: its small blocks go to that
 * thread's malloc arena, not to the heap the main thread's check allocates from (a free
 * chunk left there would serve the check's block and say nothing about the threshold). */
static void *session(void *arg)
{
	(void)arg;
	const struct dw_api *api = dw_api_get();
	if (!api)
		return (void *)10;
	struct dw_memory_stats s;
	dw_memory_get_stats(&s);
	if (s.slots == 0)
		return (void *)11;
	struct sym_dwarf *d = sym_dwarf_open(api, LIBM);
	if (!d)
		return (void *)12;
	bool found = sym_dwarf_has_debug_info(d); /* libc6-dbg: scripts/install-deps */
	sym_dwarf_close(d);
	return (void *)(uintptr_t)(found ? 0 : 13);
}

START_TEST(test_libdw_reading_compressed_dwarf_leaves_the_threshold)
{
	pid_t pid = fork();
	if (pid == 0) {
		dw_api_test_reset(NULL);
		pthread_t t;
		void *rc;
		if (pthread_create(&t, NULL, session, NULL) != 0 || pthread_join(t, &rc) != 0)
			_exit(9);
		if (rc)
			_exit((int)(uintptr_t)rc);
		/* Under AddressSanitizer malloc is ASan's (no threshold), and the suite links
		 * libelf itself (left alone as the application's): the slots are all there
		 * is to check. */
		if (DDPROF_ASAN)
			_exit(0);
		struct dw_memory_stats s;
		dw_memory_get_stats(&s);
		if (s.blocks_mapped == 0 || s.peak_bytes < (130u << 10))
			_exit(14);
		if (s.live_blocks != 0)
			_exit(15);
		void *p = malloc(130 << 10);
		_exit(glibc_mapped(p) ? 0 : 16);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "status 0x%x (10 no libdw, 11 no slot set, 12 no session, 13 no debug info "
		      "for libm, 14 no large block mapped, 15 blocks left after the session, 16 "
		      "threshold raised)",
		      st);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dw_memory");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_small_blocks_are_mallocs_and_large_ones_mapped_apart);
	tcase_add_test(tc, test_realloc_moves_across_the_line_keeping_the_contents);
	tcase_add_test(tc, test_the_registry_holds_every_block_until_it_is_freed);
	tcase_add_test(tc, test_a_full_registry_falls_back_to_malloc);
	tcase_add_test(tc, test_libdw_reading_compressed_dwarf_leaves_the_threshold);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
