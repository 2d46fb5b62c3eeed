/*
 * test_boot_cfi.c - the start-up modules' CFI list (agent/unwind/boot_cfi.h).
 *
 * The list covers the modules the program loaded at start-up (the executable's
 * DT_NEEDED closure: libc, ld.so, libcheck, ...) and gives rows for nearly all of
 * libc's code. A library dlopen'd before the list was made may be unloaded at any
 * time: it is left out, and a walk never reads it.
 */
#include <check.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/unwind/boot_cfi.h"
#include "agent/unwind/cfi_table.h"
#include "check_run.h"

static const char *churn_lib(void)
{
	static char path[4096];
	const char *dir = getenv("DDPROF_BUILD_DIR");
	snprintf(path, sizeof(path), "%s/workloads/libchurn.so", dir ? dir : "build");
	return path;
}

struct seg {
	uintptr_t lo, hi;
};

static int libc_exec(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct seg *s = arg;
	uintptr_t pc = (uintptr_t)&getpid;
	for (size_t i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && pc >= lo &&
		    pc < lo + ph->p_memsz) {
			s->lo = lo;
			s->hi = lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

/* Every pc of libc's code at a 61-byte step has a row here when the built table has a
 * usable one there (cfi_lookup's own suite compares the rows themselves). */
START_TEST(covers_the_start_up_modules)
{
	ck_assert_int_ge(boot_cfi_init(), 5); /* this test, libcheck, libc, ld.so, the vdso */
	ck_assert(boot_cfi_covers_roots());
	uint32_t kept, left_out;
	boot_cfi_get_counts(&kept, &left_out);
	ck_assert_uint_eq(left_out, 0);
	struct seg libc = {0, 0};
	dl_iterate_phdr(libc_exec, &libc);
	ck_assert_uint_gt(libc.hi, libc.lo);
	uint32_t asked = 0, rows = 0;
	for (uintptr_t pc = libc.lo; pc < libc.hi; pc += 61) {
		struct cfi_row r;
		asked++;
		rows += boot_cfi_find(pc, &r);
	}
	/* libc's CFI covers nearly all of its code (the rest: padding between
	 * functions, a few hand-written stubs). */
	ck_assert_msg(rows >= asked * 9 / 10, "%u rows for %u pcs of libc", rows, asked);
	struct cfi_row r;
	ck_assert(boot_cfi_find((uintptr_t)&churn_lib + 4, &r));      /* this test's code */
	ck_assert(boot_cfi_find((uintptr_t)&srunner_create + 4, &r)); /* libcheck's */
	ck_assert(!boot_cfi_find(16, &r)); /* the zero page is nobody's */
}
END_TEST

/* A library an earlier constructor dlopen'd can be unloaded behind our back: left out. */
START_TEST(a_library_loaded_before_is_left_out)
{
	void *h = dlopen(churn_lib(), RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h, "dlopen %s: %s", churn_lib(), dlerror());
	void *fn = dlsym(h, "churn_burn");
	ck_assert_ptr_nonnull(fn);
	ck_assert_int_ge(boot_cfi_init(), 5);
	uint32_t kept, left_out;
	boot_cfi_get_counts(&kept, &left_out);
	ck_assert_uint_eq(left_out, 1);
	struct cfi_row r;
	ck_assert(!boot_cfi_find((uintptr_t)fn + 8, &r));
	ck_assert(boot_cfi_find((uintptr_t)&getpid, &r)); /* the others are kept */
	ck_assert(boot_cfi_covers_roots());
	dlclose(h);
}
END_TEST

static Suite *boot_cfi_suite(void)
{
	Suite *s = suite_create("boot_cfi");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, covers_the_start_up_modules);
	tcase_add_test(tc, a_library_loaded_before_is_left_out);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(boot_cfi_suite());
}
