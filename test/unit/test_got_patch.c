/*
 * test_got_patch.c - unit tests of agent/alloc/got_patch.c: GOT slots of the loaded
 * modules pointed at counting hooks, and put back.
 *
 * The hooks count each call by the module its return address is in (the libraries
 * under test, libstdc++), then call the original got_patch_apply stored. Libraries
 * (test/workloads): liballoc_lazy.so (lazy binding, partial RELRO), liballoc_now.so
 * (full RELRO), liballoc_late.so (full RELRO, malloc through a JUMP_SLOT, loaded after
 * a first patch), libcxx_caller.so (operator new and delete), liballoc_slowreloc.so
 * (long to relocate: loaded in a loop during walks), libctor_apply.so (patches from
 * its constructor); alloc_nopie (a non-PIE program, run as a child). This program is the module
 * holding got_patch's code, which is never patched: its own calls are never counted. Every test
 * restores the slots (the fixture's teardown too) and unloads what it loaded, forked by Check or
 * not. The module reader on synthetic images: test_got_image.c.
 */
#include "test/unit/got_patch_fixture.h"

/* ---------------------------------------------------------------- real libraries */

START_TEST(calls_from_lazy_and_full_relro_libraries_are_counted_exactly)
{
	struct lib lazy = load("liballoc_lazy.so"), now = load("liballoc_now.so");
	int rl = track((void *)lazy.run), rn = track((void *)now.run);
	/* Before: the lazy library's PLT slots hold their stubs, in the library itself. */
	struct got_image_slot sl[64];
	struct got_image d;
	size_t stubs = 0, n = slots_of((void *)lazy.run, sl, 64, &d);
	for (size_t i = 0; i < n; i++)
		stubs += sl[i].jump_slot &&
			 module_of((void *)slot_value(sl[i].addr)).dlpi_addr == d.base;
	ck_assert_uint_eq(stubs, F_N - 1); /* all but malloc (its GLOB_DAT slot) */
	struct got_patch_stats before = stats_now();
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	for (int f = 0; f < F_N; f++)
		ck_assert_msg(orig[f] && orig[f] == dlsym(RTLD_DEFAULT, fn_names[f]),
			      "%s: original %p", fn_names[f], orig[f]);
	struct got_patch_stats after = stats_now();
	ck_assert_uint_ge(after.skipped_self - before.skipped_self, 1);
	ck_assert_uint_eq(after.skipped_vdso - before.skipped_vdso, 1);
	ck_assert_uint_eq(after.skipped_loader - before.skipped_loader, 1);
	ck_assert_uint_eq(after.failed_dynamic - before.failed_dynamic, 0);
	ck_assert_uint_eq(after.failed_reloc - before.failed_reloc, 0);

	/* The full-RELRO library's slots: hooks, on pages read-only again. */
	n = slots_of((void *)now.run, sl, 64, &d);
	ck_assert_uint_eq(n, F_N); /* malloc: one slot, shared by its PLT calls and pointer */
	for (size_t i = 0; i < n; i++) {
		char perms[5];
		perms_of(sl[i].addr, perms);
		ck_assert_msg(strcmp(perms, "r--p") == 0, "%s's slot on a %s page",
			      fn_names[sl[i].entry], perms);
		ck_assert_msg(slot_value(sl[i].addr) == (uintptr_t)table[sl[i].entry].replacement,
			      "%s's slot not patched", fn_names[sl[i].entry]);
	}

	uint64_t k = reallocs_per_reallocarray();
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	ck_assert_int_eq(now.run(ROUNDS), 0);
	expect_run_counts(rl, ROUNDS, 1, k, "lazy library");
	expect_run_counts(rn, ROUNDS, 1, k, "full-RELRO library");
	ck_assert_int_eq(lazy.via_pointer(ROUNDS), 0);
	ck_assert_uint_eq(count_of(rl, F_MALLOC), 2 * ROUNDS);
	/* This program is never patched: its own calls are not counted. */
	int rs = track((void *)&setup);
	void *(*volatile m)(size_t) = malloc;
	free(m(16));
	ck_assert_uint_eq(count_of(rs, F_MALLOC), 0);

	int restored = got_patch_restore();
	ck_assert_int_ge(restored, 2 * F_N);
	for (size_t i = 0; i < n; i++) {
		char perms[5];
		perms_of(sl[i].addr, perms);
		ck_assert_str_eq(perms, "r--p");
		ck_assert_msg(slot_value(sl[i].addr) == (uintptr_t)orig[sl[i].entry],
			      "%s's slot not restored", fn_names[sl[i].entry]);
	}
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	ck_assert_int_eq(now.run(ROUNDS), 0);
	ck_assert_int_eq(lazy.via_pointer(ROUNDS), 0);
	expect_run_counts(rn, ROUNDS, 1, k, "full-RELRO library after restore");
	ck_assert_uint_eq(count_of(rl, F_MALLOC), 2 * ROUNDS);
	ck_assert_uint_eq(count_of(rl, F_FREE), 8 * ROUNDS + ROUNDS);
	dlclose(lazy.handle);
	dlclose(now.handle);
}
END_TEST

START_TEST(library_loaded_later_is_patched_by_the_next_apply_only)
{
	struct lib lazy = load("liballoc_lazy.so");
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	uint64_t k = reallocs_per_reallocarray();
	struct lib late = load("liballoc_late.so");
	ck_assert_ptr_null(late.via_pointer); /* built PLT-only */
	int r = track((void *)late.run);
	ck_assert_int_eq(late.run(ROUNDS), 0);
	/* Not patched: only libc's own realloc calls, from its reallocarray. */
	expect_run_counts(r, ROUNDS, 0, k, "late library before apply");

	struct got_image_slot sl[64];
	struct got_image d;
	size_t n = slots_of((void *)late.run, sl, 64, &d);
	ck_assert_uint_eq(n, F_N);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(sl[i].jump_slot, true);
	struct got_patch_stats s0 = stats_now();
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s1 = stats_now();
	ck_assert_uint_eq(s1.walks - s0.walks, 1);
	ck_assert_uint_eq(s1.slots_patched - s0.slots_patched, n);
	ck_assert_uint_eq(s1.modules_patched - s0.modules_patched, 1);
	ck_assert_uint_ge(s1.modules_unchanged - s0.modules_unchanged, 3); /* libc, lazy, check */
	ck_assert_int_eq(late.run(ROUNDS), 0);
	expect_run_counts(r, ROUNDS, 1, 2 * k, "late library after apply"); /* both runs' libc */

	/* Nothing loaded since: returns at once, patches nothing. */
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s2 = stats_now();
	ck_assert_uint_eq(s2.quick - s1.quick, 1);
	ck_assert_uint_eq(s2.walks - s1.walks, 0);
	ck_assert_uint_eq(s2.slots_patched - s1.slots_patched, 0);
	ck_assert_int_ge(got_patch_restore(), 2 * F_N);
	dlclose(late.handle);
	dlclose(lazy.handle);
}
END_TEST

/* An unload makes the next walk check every module: the unloaded one's records are
 * dropped (restoring them would write into unmapped memory), the library loaded again
 * is patched again, and the modules that stayed are found intact. */
START_TEST(unloaded_library_is_forgotten_and_its_reload_patched)
{
	struct lib lazy = load("liballoc_lazy.so");
	struct got_patch_stats sb = stats_now();
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s0 = stats_now();
	uint64_t first_walk = s0.slots_patched - sb.slots_patched;
	struct lib late = load("liballoc_late.so");
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s1 = stats_now();
	ck_assert_uint_eq(s1.slots_patched - s0.slots_patched, F_N);
	ck_assert_int_eq(dlclose(late.handle), 0);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s2 = stats_now();
	ck_assert_uint_eq(s2.walks - s1.walks, 1);
	ck_assert_uint_eq(s2.slots_patched - s1.slots_patched, 0);
	ck_assert_uint_eq(s2.slots_already - s1.slots_already, 0); /* intact: not re-read */

	late = load("liballoc_late.so");
	int r = track((void *)late.run);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s3 = stats_now();
	ck_assert_uint_eq(s3.slots_patched - s2.slots_patched, F_N);
	uint64_t k = reallocs_per_reallocarray();
	ck_assert_int_eq(late.run(ROUNDS), 0);
	expect_run_counts(r, ROUNDS, 1, k, "reloaded library");
	ck_assert_int_eq(dlclose(late.handle), 0);
	/* The reload's records are dropped by this walk; restore touches only the rest. */
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	int restored = got_patch_restore();
	ck_assert_msg((uint64_t)restored == first_walk,
		      "restored %d slots, the first walk patched %llu", restored,
		      (unsigned long long)first_walk);
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	dlclose(lazy.handle);
}
END_TEST

START_TEST(cxx_new_and_delete_are_seen_through_libstdcxx)
{
	void *h = dlopen(lib_path("libcxx_caller.so"), RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h, "dlopen: %s", dlerror());
	int (*run)(int) = (int (*)(int))dlsym(h, "cxx_caller_run");
	ck_assert_ptr_nonnull(run);
	void *znwm = dlsym(h, "_Znwm"); /* libstdc++'s, a dependency of the library */
	ck_assert_ptr_nonnull(znwm);
	/* Whose operator new the library's calls reach: its _Znwm slot, bound (RTLD_NOW). */
	static const char *const znwm_name[] = {"_Znwm"};
	struct got_image d;
	struct got_image_slot sl[4];
	struct dl_phdr_info info = module_of((void *)run);
	ck_assert_int_eq(got_image_parse(info.dlpi_addr, info.dlpi_phdr, info.dlpi_phnum, &d), 0);
	size_t bad;
	ck_assert_uint_eq(got_image_find_slots(&d, znwm_name, 1, sl, 4, &bad), 1);
	void *bound = (void *)slot_value(sl[0].addr);
	bool libstdcxx = module_of(bound).dlpi_addr == module_of(znwm).dlpi_addr;
	Dl_info di = {0};
	dladdr(bound, &di);
	/* libstdc++'s code, and the library's: operator delete tail-calls free, which
	 * then returns to the library (that has no slot for free: the calls reach the hook
	 * through libstdc++'s). */
	int r = track(znwm), rc = track((void *)run);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	ck_assert_int_eq(run(ROUNDS), 0);
	if (libstdcxx) {
		/* new, new[] and nothrow new call malloc; aligned new aligned_alloc; the four
		 * deletes (sized, array, aligned) free. */
		for (int f = 0; f < F_N; f++) {
			uint64_t want = f == F_MALLOC	       ? 3 * ROUNDS
					: f == F_ALIGNED_ALLOC ? ROUNDS
					: f == F_FREE	       ? 4 * ROUNDS
							       : 0;
			uint64_t got = count_of(r, f) + count_of(rc, f);
			ck_assert_msg(got == want, "%s: %llu calls, expected %llu", fn_names[f],
				      (unsigned long long)got, (unsigned long long)want);
		}
	} else {
		/* Another module defines operator new (ASan's runtime): it serves it without
		 * a call through a patched slot, and libstdc++'s new is never called. */
		fprintf(stderr, "operator new is %s's, not libstdc++'s\n", di.dli_fname);
	}
	ck_assert_int_gt(got_patch_restore(), 0);
	uint64_t after = count_of(r, F_MALLOC);
	ck_assert_int_eq(run(ROUNDS), 0);
	ck_assert_uint_eq(count_of(r, F_MALLOC), after);
	dlclose(h);
}
END_TEST

/* A non-PIE program with a canonical PLT entry for malloc (alloc_nopie.c, patched
 * through got_patch.c in a library of its own): the hooks call malloc, not the entry,
 * and its calls through the PLT, the taken address and libc's strdup are all counted.
 * On glibc 2.36 dlsym answers with the entry: the correction is exercised. */
START_TEST(canonical_plt_entry_of_a_non_pie_program_is_not_the_original)
{
	char cmd[4200], out[1024] = "";
	snprintf(cmd, sizeof(cmd), "%s 2>&1", lib_path("alloc_nopie"));
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	int status = pclose(p);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "alloc_nopie failed: %s", out);
	ck_assert_msg(strstr(out, "originals_past_plt 1,"),
		      "dlsym did not answer with the canonical entry: %s", out);
}
END_TEST

START_TEST(bad_tables_are_refused_and_max_tables_at_a_time)
{
	ck_assert_int_eq(got_patch_apply(NULL, 1), -EINVAL);
	ck_assert_int_eq(got_patch_apply(table, 0), -EINVAL);
	ck_assert_int_eq(got_patch_apply(table, GOT_PATCH_MAX_SYMBOLS + 1), -EINVAL);
	void *none = NULL;
	struct got_patch_entry nameless[] = {{"", (void *)hook_malloc, &none}};
	ck_assert_int_eq(got_patch_apply(nameless, 1), -EINVAL);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	/* The same table with another size, and one table more than GOT_PATCH_MAX_TABLES. */
	ck_assert_int_eq(got_patch_apply(table, F_N - 1), -EBUSY);
	_Static_assert(GOT_PATCH_MAX_TABLES == 3, "the tables below: one per hook set");
	void *none2 = NULL, *none3 = NULL, *none4 = NULL;
	struct got_patch_entry second[] = {
	    {"ddprof_test_no_such_function_2", (void *)hook_malloc, &none2}};
	struct got_patch_entry third[] = {
	    {"ddprof_test_no_such_function_3", (void *)hook_malloc, &none3}};
	struct got_patch_entry fourth[] = {
	    {"ddprof_test_no_such_function_4", (void *)hook_malloc, &none4}};
	ck_assert_int_eq(got_patch_apply(second, 1), 0);
	ck_assert_int_eq(got_patch_apply(third, 1), 0);
	ck_assert_int_eq(got_patch_apply(fourth, 1), -EBUSY);
	ck_assert_int_gt(got_patch_restore(), 0);
	struct got_patch_entry missing[] = {
	    {"ddprof_test_no_such_function", (void *)hook_malloc, &none}};
	/* A name nobody defines: counted, nothing patched. */
	struct got_patch_stats s0 = stats_now();
	ck_assert_int_eq(got_patch_apply(missing, 1), 0);
	struct got_patch_stats s1 = stats_now();
	ck_assert_ptr_null(none);
	ck_assert_uint_eq(s1.failed_symbol - s0.failed_symbol, 1);
	ck_assert_uint_eq(s1.slots_patched - s0.slots_patched, 0);
	ck_assert_int_eq(got_patch_restore(), 0);
}
END_TEST

static Suite *got_patch_suite(void)
{
	Suite *s = suite_create("got_patch");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, calls_from_lazy_and_full_relro_libraries_are_counted_exactly);
	tcase_add_test(tc, library_loaded_later_is_patched_by_the_next_apply_only);
	tcase_add_test(tc, unloaded_library_is_forgotten_and_its_reload_patched);
	tcase_add_test(tc, cxx_new_and_delete_are_seen_through_libstdcxx);
	tcase_add_test(tc, canonical_plt_entry_of_a_non_pie_program_is_not_the_original);
	tcase_add_test(tc, bad_tables_are_refused_and_max_tables_at_a_time);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(got_patch_suite());
}
