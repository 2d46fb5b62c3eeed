/*
 * test_sandbox.c - what the application's seccomp filters leave the profiler
 * (agent/sample/sandbox.c): a filter installed by one thread covers it and the threads it
 * creates afterwards (sandbox_inherit), not the other threads; one for every thread
 * (TSYNC) covers all; the thread's id is cached before the filter, so the sampling
 * handler needs no gettid under it; skips are counted. A real filter is
 * installed in the last test, in a child process: strict mode, after which the child
 * still reads its cached id and its flags without a system call and exits 0.
 */
#include <check.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/sample/sampler.h"
#include "agent/sample/sandbox.h"
#include "agent/unwind/unwind.h"
#include "check_run.h"

static _Atomic int other_active = -1;

static void *other_thread(void *arg)
{
	(void)arg;
	atomic_store(&other_active, sandbox_thread_active());
	return NULL;
}

static int active_in_other_thread(void)
{
	pthread_t t;
	atomic_store(&other_active, -1);
	pthread_create(&t, NULL, other_thread, NULL);
	pthread_join(t, NULL);
	return atomic_load(&other_active);
}

START_TEST(a_thread_filter_covers_that_thread_only)
{
	ck_assert(!sandbox_any());
	ck_assert(!sandbox_thread_active());
	sandbox_enter_thread();
	ck_assert(sandbox_any());
	ck_assert(sandbox_thread_active());
	ck_assert(!sandbox_process_active());
	ck_assert_int_eq(active_in_other_thread(), 0);
}
END_TEST

START_TEST(a_tsync_filter_covers_every_thread)
{
	sandbox_enter_process();
	ck_assert(sandbox_process_active());
	ck_assert_int_eq(active_in_other_thread(), 1);
}
END_TEST

static void *inheriting_thread(void *arg)
{
	(void)arg;
	sandbox_inherit();
	atomic_store(&other_active, sandbox_thread_active());
	return NULL;
}

START_TEST(threads_created_under_a_filter_inherit_it)
{
	sandbox_enter_thread();
	pthread_t t;
	pthread_create(&t, NULL, inheriting_thread, NULL);
	pthread_join(t, NULL);
	ck_assert_int_eq(atomic_load(&other_active), 1);
	ck_assert_uint_eq(sandbox_skips(), 0);
	sandbox_count_skip();
	sandbox_count_skip();
	ck_assert_uint_eq(sandbox_skips(), 2);
}
END_TEST

START_TEST(strict_mode_child_runs_on_cached_state)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		pid_t tid = (pid_t)syscall(SYS_gettid);
		/* Before the filter, as agent_sandbox_enter does: the id cached. */
		(void)sampler_gettid();
		sandbox_enter_thread();
		if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0)
			syscall(SYS_exit, 4);
		/* Any system call but read, write, exit and sigreturn kills the child. */
		int ok = sandbox_thread_active() && sandbox_any() && sampler_gettid() == tid;
		syscall(SYS_exit, ok ? 0 : 3);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "strict-mode child: status 0x%x", st);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sandbox");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, a_thread_filter_covers_that_thread_only);
	tcase_add_test(tc, a_tsync_filter_covers_every_thread);
	tcase_add_test(tc, threads_created_under_a_filter_inherit_it);
	tcase_add_test(tc, strict_mode_child_runs_on_cached_state);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
