/*
 * test_sym_table.c - the sorted symbol table (agent/symbolize/sym_table.c): one entry per address,
 * the alias sym_table.h documents, lookups by address, and a sort that stays
 * O(n log n) on tables built to defeat quicksort.
 *
 * The reference is written here from the header's rule (sized, then global, then fewest
 * leading underscores, then shortest, then byte order), not taken from the module.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/symbolize/sym_elf.h"
#include "agent/symbolize/sym_table.h"
#include "check_run.h"

struct ref {
	uint64_t addr, size;
	char name[24];
	bool global;
};

static size_t underscores(const char *s)
{
	size_t n = 0;
	while (s[n] == '_')
		n++;
	return n;
}

/* True when a is the alias the header's rule names over b (same address). */
static bool preferred(const struct ref *a, const struct ref *b)
{
	if ((a->size != 0) != (b->size != 0))
		return a->size != 0;
	if (a->global != b->global)
		return a->global;
	if (underscores(a->name) != underscores(b->name))
		return underscores(a->name) < underscores(b->name);
	if (strlen(a->name) != strlen(b->name))
		return strlen(a->name) < strlen(b->name);
	int c = strcmp(a->name, b->name);
	return c != 0 ? c < 0 : a->size > b->size;
}

/* Builds a table from refs and checks it against them: strictly increasing addresses,
 * each input address once, with the preferred alias. */
static void check_against(const struct ref *refs, size_t n)
{
	struct sym_table t;
	sym_table_init(&t);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(
		    sym_table_add(&t, refs[i].addr, refs[i].size, refs[i].name, refs[i].global), 0);
	sym_table_finish(&t);
	size_t distinct = 0;
	for (size_t i = 0; i < n; i++) {
		bool first = true;
		for (size_t k = 0; k < i && first; k++)
			first = refs[k].addr != refs[i].addr;
		distinct += first;
	}
	ck_assert_uint_eq(t.nsyms, distinct);
	for (size_t i = 1; i < t.nsyms; i++)
		ck_assert_msg(t.syms[i - 1].addr < t.syms[i].addr,
			      "entries %zu and %zu out of order", i - 1, i);
	for (size_t i = 0; i < n; i++) {
		const struct ref *best = &refs[i];
		for (size_t k = 0; k < n; k++)
			if (refs[k].addr == best->addr && preferred(&refs[k], best))
				best = &refs[k];
		const struct sym_entry *e = sym_table_find(&t, best->addr);
		ck_assert_ptr_nonnull(e);
		ck_assert_uint_eq(e->addr, best->addr);
		ck_assert_str_eq(sym_table_name(&t, e), best->name);
		ck_assert_uint_eq(e->size, best->size);
	}
	sym_table_free(&t);
}

START_TEST(one_entry_per_address_with_the_preferred_alias)
{
	static struct ref refs[1500];
	static const char *const stems[] = {"clone",  "__clone", "clone3", "__clone3",
					    "_start", "start",	 "memcpy", "__memcpy_avx"};
	srand(7);
	for (int round = 0; round < 20; round++) {
		/* Few distinct addresses, so that most have several aliases. */
		size_t n = 50 + (size_t)rand() % 1450, spread = 1 + n / (1 + (size_t)rand() % 8);
		for (size_t i = 0; i < n; i++) {
			struct ref *r = &refs[i];
			r->addr = 0x1000 + 16 * ((size_t)rand() % spread);
			r->size = rand() % 3 ? 16 * (1 + (uint64_t)(rand() % 4)) : 0;
			r->global = rand() & 1;
			snprintf(r->name, sizeof(r->name), "%s%s", stems[rand() % 8],
				 rand() % 2 ? "" : "_x");
		}
		check_against(refs, n);
	}
}
END_TEST

/* Orders a naive quicksort (or a median-of-three one) handles in quadratic time. */
START_TEST(adversarial_orders_stay_fast_and_correct)
{
	enum { N = 200000 };
	static struct ref refs[N];
	for (int kind = 0; kind < 5; kind++) {
		for (size_t i = 0; i < N; i++) {
			uint64_t k = kind == 0	 ? i			       /* sorted */
				     : kind == 1 ? N - i		       /* reversed */
				     : kind == 2 ? 7			       /* all equal */
				     : kind == 3 ? (i < N / 2 ? i : N - i)     /* organ pipe */
						 : (i % 2 ? i : N - i) % 1000; /* saw, ties */
			refs[i].addr = 0x1000 + 16 * k;
			refs[i].size = 16;
			refs[i].global = true;
			snprintf(refs[i].name, sizeof(refs[i].name), "f%zu", i);
		}
		struct sym_table t;
		sym_table_init(&t);
		for (size_t i = 0; i < N; i++)
			ck_assert_int_eq(sym_table_add(&t, refs[i].addr, 16, refs[i].name, true),
					 0);
		sym_table_finish(&t); /* quadratic would take minutes: the test's timeout */
		for (size_t i = 1; i < t.nsyms; i++)
			ck_assert(t.syms[i - 1].addr < t.syms[i].addr);
		ck_assert_uint_ge(t.nsyms, 1);
		/* Among equal names' lengths, byte order decides: "f0" < "f1" ... */
		if (kind == 2)
			ck_assert_str_eq(sym_table_name(&t, &t.syms[0]), "f0");
		sym_table_free(&t);
	}
}
END_TEST

START_TEST(lookups_respect_sizes_and_gaps)
{
	static const struct ref refs[] = {
	    {0x2000, 0x20, "b", true},	 {0x1000, 0x10, "a", true},	  {0x3000, 0, "asm", false},
	    {0x1000, 0x10, "__a", true}, {0x1000, 0, "a_sizeless", true},
	};
	struct sym_table t;
	sym_table_init(&t);
	for (size_t i = 0; i < sizeof(refs) / sizeof(refs[0]); i++)
		sym_table_add(&t, refs[i].addr, refs[i].size, refs[i].name, refs[i].global);
	sym_table_add(&t, 0, 8, "at_zero", true);	      /* ignored */
	sym_table_add(&t, 0x4000, 8, "", true);		      /* ignored */
	sym_table_add(&t, 0x5000, 8, "versioned@@V_2", true); /* suffix dropped */
	sym_table_finish(&t);
	ck_assert_uint_eq(t.nsyms, 4);
	ck_assert_ptr_null(sym_table_find(&t, 0xfff));
	ck_assert_str_eq(sym_table_name(&t, sym_table_find(&t, 0x100f)), "a");
	ck_assert_ptr_null(sym_table_find(&t, 0x1010)); /* past a's size: a gap */
	ck_assert_str_eq(sym_table_name(&t, sym_table_find(&t, 0x201f)), "b");
	ck_assert_str_eq(sym_table_name(&t, sym_table_find(&t, 0x3fff)), "asm"); /* sizeless */
	ck_assert_str_eq(sym_table_name(&t, sym_table_find(&t, 0x5004)), "versioned");
	sym_table_free(&t);
}
END_TEST

/* Searching a file in place (sym_elf_scan_find, a short process's few lookups) names
 * every address as the table built from the same file does: libc (its debug file when
 * installed: locals and aliases galore) and Python's binary, 3000 addresses each, spread
 * over their text and on every symbol's first and last byte. */
static void scan_matches_table(const char *path)
{
	struct sym_table t;
	sym_table_init(&t);
	if (sym_elf_read_symbols(path, &t) != 0)
		return; /* not on this machine */
	sym_table_finish(&t);
	struct sym_elf_scan *sc;
	ck_assert_int_eq(sym_elf_scan_open(path, &sc), 0);
	ck_assert_uint_gt(t.nsyms, 100);
	uint64_t lo = t.syms[0].addr, hi = t.syms[t.nsyms - 1].addr + 64;
	int differ = 0, named = 0;
	for (int i = 0; i < 3000; i++) {
		uint64_t v;
		if (i % 3 == 0)
			v = lo + (uint64_t)i * (hi - lo) / 3000;
		else {
			const struct sym_entry *e = &t.syms[((size_t)i * 7919) % t.nsyms];
			v = i % 3 == 1 ? e->addr : e->addr + (e->size ? e->size - 1 : 0);
		}
		const struct sym_entry *e = sym_table_find(&t, v);
		char name[1024];
		uint64_t size;
		bool found = sym_elf_scan_find(sc, v, name, sizeof(name), &size);
		if (found != (e != NULL) ||
		    (e && (strcmp(name, sym_table_name(&t, e)) != 0 || size != e->size))) {
			if (differ++ < 5)
				fprintf(stderr, "%s 0x%llx: table %s, scan %s\n", path,
					(unsigned long long)v, e ? sym_table_name(&t, e) : "-",
					found ? name : "-");
		}
		named += found;
	}
	ck_assert_msg(differ == 0, "%s: %d of 3000 addresses named otherwise", path, differ);
	ck_assert_int_gt(named, 1000);
	/* All of them in one pass (sym_elf_scan_find_many): the same answers. */
	uint64_t *v = malloc(3000 * sizeof(*v));
	struct sym_elf_hit *hits = malloc(3000 * sizeof(*hits));
	size_t nv = 0;
	for (uint64_t a = lo; a < hi && nv < 3000; a += (hi - lo) / 2999 + 1)
		v[nv++] = a;
	sym_elf_scan_find_many(sc, v, nv, hits);
	int many_differ = 0;
	for (size_t i = 0; i < nv; i++) {
		char name[1024];
		uint64_t size;
		bool found = sym_elf_scan_find(sc, v[i], name, sizeof(name), &size);
		many_differ += found != (hits[i].name != NULL) ||
			       (found && (hits[i].len != strlen(name) ||
					  strncmp(hits[i].name, name, hits[i].len) != 0 ||
					  hits[i].size != size));
	}
	ck_assert_msg(many_differ == 0, "%s: one pass named %d of %zu addresses otherwise", path,
		      many_differ, nv);
	free(v);
	free(hits);
	sym_elf_scan_close(sc);
	sym_table_free(&t);
}

START_TEST(searching_in_place_names_as_the_table_does)
{
	struct sym_elf_info info;
	ck_assert_int_eq(sym_elf_read_info("/lib/x86_64-linux-gnu/libc.so.6", &info), 0);
	char dbg[256];
	snprintf(dbg, sizeof(dbg), "/usr/lib/debug/.build-id/%.2s/%s.debug", info.build_id,
		 info.build_id + 2);
	scan_matches_table(dbg); /* libc6-dbg: scripts/install-deps */
	scan_matches_table("/lib/x86_64-linux-gnu/libc.so.6");
	scan_matches_table("/usr/bin/python3.11");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sym_table");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, one_entry_per_address_with_the_preferred_alias);
	tcase_add_test(tc, adversarial_orders_stay_fast_and_correct);
	tcase_add_test(tc, lookups_respect_sizes_and_gaps);
	tcase_add_test(tc, searching_in_place_names_as_the_table_does);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
