/*
 * test_mask_view.c - unit tests of agent/sample/mask_view.c: which kernels keep the view,
 * a start-up mask taken into it, the real block around a child's start and an exec (a
 * pending signal taken), and the per-thread bit. SIGUSR1 stands for the sampling signal.
 */
#include "agent/sample/mask_view.h"

#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/utsname.h>

#include "test/unit/check_run.h"

static bool kernel_blocks(int sig)
{
	sigset_t m;
	sigemptyset(&m);
	pthread_sigmask(SIG_BLOCK, NULL, &m);
	return sigismember(&m, sig) == 1;
}

static bool pending(int sig)
{
	sigset_t p;
	sigemptyset(&p);
	sigpending(&p);
	return sigismember(&p, sig) == 1;
}

static bool this_kernel_allows(void)
{
	struct utsname u;
	return uname(&u) == 0 && mask_view_kernel_allows(u.release);
}

START_TEST(test_only_kernels_that_raise_cpu_timer_signals_after_system_calls)
{
	ck_assert(mask_view_kernel_allows("5.10.0-26-amd64"));
	ck_assert(mask_view_kernel_allows("6.1.0-13-cloud-amd64"));
	ck_assert(mask_view_kernel_allows("6.18.44-fc-v1272"));
	ck_assert(mask_view_kernel_allows("10.0"));
	ck_assert(!mask_view_kernel_allows("5.9.16"));
	ck_assert(!mask_view_kernel_allows("5.4.0-150-generic"));
	ck_assert(!mask_view_kernel_allows("4.19.0"));
	ck_assert(!mask_view_kernel_allows("3.10.0-1160.el7.x86_64"));
	ck_assert(!mask_view_kernel_allows("6"));
	ck_assert(!mask_view_kernel_allows("6."));
	ck_assert(!mask_view_kernel_allows(""));
	ck_assert(!mask_view_kernel_allows("linux"));
	ck_assert(!mask_view_kernel_allows(NULL));
}
END_TEST

START_TEST(test_a_signal_blocked_at_start_up_is_blocked_in_the_view_only)
{
	if (!this_kernel_allows())
		return;
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &one, NULL);
	mask_view_start(SIGUSR1);
	ck_assert(mask_view_active());
	ck_assert_msg(mask_view_blocked(), "the inherited block is the program's");
	ck_assert_msg(!kernel_blocks(SIGUSR1), "and no longer the kernel's");
	mask_view_reset();
	ck_assert(!mask_view_active());
}
END_TEST

START_TEST(test_an_unblocked_signal_stays_so)
{
	if (!this_kernel_allows())
		return;
	mask_view_start(SIGUSR1);
	ck_assert(!mask_view_blocked());
	ck_assert(!kernel_blocks(SIGUSR1));
	ck_assert_msg(!mask_view_hold(), "nothing to hold when the program does not block it");
	ck_assert(!kernel_blocks(SIGUSR1));
}
END_TEST

START_TEST(test_hold_blocks_for_real_and_let_go_delivers_what_came)
{
	if (!this_kernel_allows())
		return;
	mask_view_start(SIGUSR1);
	signal(SIGUSR1, SIG_IGN);
	mask_view_set_blocked(true);
	ck_assert(!kernel_blocks(SIGUSR1));
	bool held = mask_view_hold();
	ck_assert(held);
	ck_assert(kernel_blocks(SIGUSR1));
	mask_view_let_go(held);
	ck_assert(!kernel_blocks(SIGUSR1));
	ck_assert_msg(mask_view_blocked(), "the view is not changed by a hold");
}
END_TEST

static volatile sig_atomic_t delivered;
static void count(int sig)
{
	(void)sig;
	delivered++;
}

START_TEST(test_hold_for_exec_takes_a_pending_signal)
{
	if (!this_kernel_allows())
		return;
	mask_view_start(SIGUSR1);
	signal(SIGUSR1, count);
	mask_view_set_blocked(true);
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, SIGUSR1);
	/* Pending while blocked, as a timer's raised between the hold's block and its drain. */
	pthread_sigmask(SIG_BLOCK, &one, NULL);
	raise(SIGUSR1);
	ck_assert(pending(SIGUSR1));
	bool held = mask_view_hold_for_exec();
	ck_assert(held);
	ck_assert_msg(!pending(SIGUSR1), "an exec now would hand the new program a pending signal");
	ck_assert(kernel_blocks(SIGUSR1));
	mask_view_let_go(held);
	ck_assert(!kernel_blocks(SIGUSR1));
	ck_assert_int_eq(delivered, 0);
	/* Without a pending one the drain returns at once, and a plain hold keeps what comes. */
	held = mask_view_hold();
	raise(SIGUSR1);
	ck_assert_int_eq(delivered, 0);
	mask_view_let_go(held);
	ck_assert_int_eq(delivered, 1);
}
END_TEST

static void *thread_bit(void *arg)
{
	(void)arg;
	return (void *)(long)mask_view_blocked();
}

START_TEST(test_the_bit_is_the_thread_s_own)
{
	mask_view_set_blocked(true);
	pthread_t t;
	void *r;
	pthread_create(&t, NULL, thread_bit, NULL);
	pthread_join(t, &r);
	ck_assert_msg(r == NULL, "a thread's bit is its own (thread_start.h carries it over)");
	ck_assert(mask_view_blocked());
	mask_view_set_blocked(false);
	ck_assert(!mask_view_blocked());
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mask_view");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_only_kernels_that_raise_cpu_timer_signals_after_system_calls);
	tcase_add_test(tc, test_a_signal_blocked_at_start_up_is_blocked_in_the_view_only);
	tcase_add_test(tc, test_an_unblocked_signal_stays_so);
	tcase_add_test(tc, test_hold_blocks_for_real_and_let_go_delivers_what_came);
	tcase_add_test(tc, test_hold_for_exec_takes_a_pending_signal);
	tcase_add_test(tc, test_the_bit_is_the_thread_s_own);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
