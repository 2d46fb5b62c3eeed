/*
 * test_boot_cfi.c - the start-up modules' CFI list (agent/boot_cfi.h).
 *
 * The list covers what dl_iterate_phdr reports at start-up, gives the rows the built
 * tables give, and is never read once boot_cfi_disable returned: a library of the list
 * unloaded right after, while other threads look its pcs up in a loop, costs no fault.
 * A fork child can disable it even if the parent was in the middle of doing so.
 */
#include <check.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/boot_cfi.h"
#include "agent/cfi_table.h"
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
	ck_assert_int_ge(boot_cfi_init(), 4); /* this test, libc, ld.so, the vdso, ... */
	ck_assert(boot_cfi_covers_roots());
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
	ck_assert(boot_cfi_find((uintptr_t)&churn_lib + 4, &r)); /* this test's code */
	ck_assert(!boot_cfi_find(16, &r)); /* the zero page is nobody's */
	boot_cfi_disable();
	ck_assert(!boot_cfi_find((uintptr_t)&getpid, &r));
	ck_assert(!boot_cfi_covers_roots());
	boot_cfi_disable(); /* idempotent */
}
END_TEST

static _Atomic bool stop_readers;
static uintptr_t churn_pc;
static _Atomic uint64_t found_rows, found_after;
static _Atomic bool disabled_seen;

static void *reader(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop_readers)) {
		struct cfi_row r;
		bool after = atomic_load(&disabled_seen);
		if (boot_cfi_find(churn_pc, &r))
			atomic_fetch_add(after ? &found_after : &found_rows, 1);
	}
	return NULL;
}

/* The race boot_cfi_disable closes: readers decode the library's .eh_frame while the
 * application unloads it. Without the grace wait a reader inside a lookup when the
 * library goes reads unmapped memory (SIGSEGV). */
START_TEST(disable_then_dlclose_while_readers_look_up)
{
	for (int round = 0; round < 20; round++) {
		void *h = dlopen(churn_lib(), RTLD_NOW | RTLD_LOCAL);
		ck_assert_msg(h, "dlopen %s: %s", churn_lib(), dlerror());
		void *fn = dlsym(h, "churn_burn");
		ck_assert_ptr_nonnull(fn);
		churn_pc = (uintptr_t)fn + 8;
		ck_assert_int_ge(boot_cfi_init(), 5); /* the library is in the list */
		atomic_store(&stop_readers, false);
		atomic_store(&disabled_seen, false);
		atomic_store(&found_rows, 0);
		atomic_store(&found_after, 0);
		pthread_t t[3];
		for (int i = 0; i < 3; i++)
			pthread_create(&t[i], NULL, reader, NULL);
		while (atomic_load(&found_rows) < 100)
			sched_yield();
		boot_cfi_disable();
		atomic_store(&disabled_seen, true);
		dlclose(h);
		struct timespec nap = {0, 2000000};
		nanosleep(&nap, NULL); /* readers keep asking for the unloaded pcs */
		atomic_store(&stop_readers, true);
		for (int i = 0; i < 3; i++)
			pthread_join(t[i], NULL);
		ck_assert_uint_eq(atomic_load(&found_after), 0);
	}
}
END_TEST

/* A fork child inherits the list and can still disable it at once. */
START_TEST(a_fork_child_can_disable)
{
	ck_assert_int_ge(boot_cfi_init(), 4);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		boot_cfi_atfork_child();
		struct cfi_row r;
		if (!boot_cfi_find((uintptr_t)&getpid, &r))
			_exit(1);
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		boot_cfi_disable();
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
		_exit(boot_cfi_find((uintptr_t)&getpid, &r) ? 2 : ms > 50 ? 3 : 0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
	struct cfi_row r;
	ck_assert(boot_cfi_find((uintptr_t)&getpid, &r)); /* the parent's is untouched */
}
END_TEST

static Suite *boot_cfi_suite(void)
{
	Suite *s = suite_create("boot_cfi");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, covers_the_start_up_modules);
	tcase_add_test(tc, disable_then_dlclose_while_readers_look_up);
	tcase_add_test(tc, a_fork_child_can_disable);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(boot_cfi_suite());
}
