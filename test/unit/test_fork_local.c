/*
 * test_fork_local.c - unit tests of agent/sample/fork_local.c: the page a fork child does not
 * share with its parent.
 *
 * What the fork handlers rely on: blocks are zeroed, aligned, disjoint and bounded by
 * the page; a lock held on the page at fork is found unlocked (zero) in the child; and
 * the point of it all: a write in the parent right after fork, while the child lives,
 * takes no copy-on-write fault on the fork-local page, where it does on ordinary
 * memory (counted with getrusage's minor faults, not timed).
 */
#include "agent/sample/fork_local.h"

#include <check.h>

#include "common/asan.h"
#include "test/unit/check_run.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static long minor_faults(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

START_TEST(test_blocks_are_zeroed_aligned_disjoint_and_bounded)
{
	uint8_t *a = fork_local_alloc(40);
	uint8_t *b = fork_local_alloc(1);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq((uintptr_t)a % 64, 0);
	ck_assert_uint_eq((uintptr_t)b % 64, 0);
	ck_assert(b >= a + 40 || a >= b + 1);
	for (int i = 0; i < 40; i++)
		ck_assert_uint_eq(a[i], 0);
	/* The page is one page: it runs out, and then says so instead of overflowing. */
	size_t got = 0;
	while (fork_local_alloc(64))
		got++;
	ck_assert_uint_lt(got, 4096 / 64);
	ck_assert_ptr_null(fork_local_alloc(64));
	ck_assert_ptr_null(fork_local_alloc(8192));
}
END_TEST

/* The FORK_CHILD_DATA variables of the modules linked here (this suite links the core
 * library): one page, page-aligned, so a fork child copies one page for all of them. */
extern char __start_ddprof_fork_data[];
static char first_bss_byte; /* in .bss, which common/fork_child.ld starts on the next page */

START_TEST(test_fork_child_data_is_one_page)
{
	ck_assert_uint_gt(fork_child_data_bytes(), 0);
#if !DDPROF_ASAN
	/* ASan pads every variable of .data, which the page holds too, with a redzone:
	 * the section then spans ~14 pages; its alignment and .bss after it are still checked. */
	ck_assert_uint_le(fork_child_data_bytes(), 4096);
#endif
	ck_assert_uint_eq((uintptr_t)__start_ddprof_fork_data % 4096, 0);
	/* Nothing else shares the page: .bss (what the parent writes at any time) starts on
	 * the next one, so the parent's writes never copy the child's page. */
	ck_assert_uint_ge((uintptr_t)&first_bss_byte, (uintptr_t)__start_ddprof_fork_data + 4096);
}
END_TEST

START_TEST(test_a_lock_held_at_fork_is_free_in_the_child)
{
	pthread_mutex_t *m = fork_local_alloc(sizeof(*m));
	ck_assert_ptr_nonnull(m);
	pthread_mutex_init(m, NULL);
	uint64_t *stamp = fork_local_alloc(sizeof(*stamp));
	ck_assert_ptr_nonnull(stamp);
	*stamp = 0x1234;
	pthread_mutex_lock(m);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* Zero-filled at the same address: the lock is free, the stamp is gone. */
		int ok = *stamp == 0 && pthread_mutex_trylock(m) == 0;
		_exit(ok ? 0 : 1);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The parent's copy is untouched. */
	ck_assert_uint_eq(*stamp, 0x1234);
	ck_assert_int_eq(pthread_mutex_unlock(m), 0);
}
END_TEST

START_TEST(test_parent_writes_after_fork_take_no_copy_on_write_fault)
{
	volatile uint64_t *local = fork_local_alloc(sizeof(uint64_t));
	ck_assert_ptr_nonnull((void *)local);
	volatile uint64_t *plain =
	    mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne((void *)plain, MAP_FAILED);
	*local = 1;
	*plain = 1; /* both pages present and written before the fork */
	int go[2];
	ck_assert_int_eq(pipe(go), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char c;
		close(go[1]);
		(void)!read(go[0], &c, 1); /* alive until the parent has measured */
		_exit(0);
	}
	close(go[0]);
	/* The child holds the plain page: writing it copies it (one fault). */
	long f0 = minor_faults();
	*plain = 2;
	long f1 = minor_faults();
	*local = 2;
	long f2 = minor_faults();
	close(go[1]);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_ge(f1 - f0, 1); /* the control: fork did share ordinary memory */
	ck_assert_int_eq(f2 - f1, 0);
	ck_assert_uint_eq(*local, 2);
	munmap((void *)plain, 4096);
}
END_TEST

static Suite *fork_local_suite(void)
{
	Suite *s = suite_create("fork_local");
	TCase *tc = tcase_create("core");
	/* Each test in its own process (Check's default fork mode): the page is per
	 * process and the first test fills it on purpose. */
	tcase_add_test(tc, test_fork_child_data_is_one_page);
	tcase_add_test(tc, test_a_lock_held_at_fork_is_free_in_the_child);
	tcase_add_test(tc, test_parent_writes_after_fork_take_no_copy_on_write_fault);
	tcase_add_test(tc, test_blocks_are_zeroed_aligned_disjoint_and_bounded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(fork_local_suite());
}
