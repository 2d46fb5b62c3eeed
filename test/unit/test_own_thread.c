/*
 * test_own_thread.c - unit tests of common/own_thread.c: the stacks and the creation of the
 * profiler's own threads.
 *
 * What the profiler relies on: a thread of ours runs on the mapping we made, so its
 * pthread_t (glibc's descriptor, at the top of the thread's stack) lies in that mapping
 * and can never be the handle of an application thread that ended, even right after an
 * application thread's stack went back to glibc's cache; the thread starts with every
 * signal blocked while its creator's mask is left as it was; a stack in use is refused
 * to a second thread (-EBUSY) and serves again once released; a failed creation
 * releases it.
 */
#include "common/own_thread.h"

#include <check.h>

#include "test/unit/check_run.h"
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#define STACK_BYTES ((size_t)1 << 20)

struct seen {
	uintptr_t local; /* address of a local of the thread's first frame */
	sigset_t mask;	 /* the thread's signal mask as it starts */
};

static void *record(void *arg)
{
	struct seen *s = arg;
	int local = 0;
	s->local = (uintptr_t)&local;
	pthread_sigmask(SIG_SETMASK, NULL, &s->mask);
	return NULL;
}

static void *end_at_once(void *arg)
{
	return arg;
}

static bool in_mapping(const struct own_stack *s, uintptr_t a)
{
	return a >= (uintptr_t)s->base && a < (uintptr_t)s->base + s->bytes;
}

START_TEST(test_thread_runs_on_our_mapping_with_its_descriptor_there)
{
	/* An application thread ends and is joined: its stack (and descriptor) go to
	 * glibc's cache, where a default-attribute thread would find them. */
	pthread_t app;
	ck_assert_int_eq(pthread_create(&app, NULL, end_at_once, NULL), 0);
	ck_assert_int_eq(pthread_join(app, NULL), 0);
	struct own_stack s = {0};
	struct seen seen;
	pthread_t t;
	ck_assert_int_eq(own_thread_create(&s, STACK_BYTES, pthread_create, &t, record, &seen), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_ptr_nonnull(s.base);
	ck_assert_uint_ge(s.bytes, STACK_BYTES);
	ck_assert_msg(in_mapping(&s, seen.local), "the thread's frame is not on our stack");
	ck_assert_msg(in_mapping(&s, (uintptr_t)t), "pthread_t %#lx is not in our mapping",
		      (unsigned long)t);
	ck_assert(!pthread_equal(t, app));
	own_thread_stack_release(&s);
}
END_TEST

START_TEST(test_thread_starts_with_every_signal_blocked_and_the_creator_keeps_its_mask)
{
	sigset_t mine, after;
	sigemptyset(&mine);
	sigaddset(&mine, SIGUSR2);
	pthread_sigmask(SIG_SETMASK, &mine, NULL);
	struct own_stack s = {0};
	struct seen seen;
	pthread_t t;
	ck_assert_int_eq(own_thread_create(&s, STACK_BYTES, pthread_create, &t, record, &seen), 0);
	pthread_join(t, NULL);
	pthread_sigmask(SIG_SETMASK, NULL, &after);
	const int sigs[] = {SIGPROF, SIGTERM, SIGINT, SIGUSR1, SIGALRM, SIGRTMIN + 4, SIGCHLD};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		ck_assert_msg(sigismember(&seen.mask, sigs[i]), "signal %d not blocked", sigs[i]);
		ck_assert_msg(!sigismember(&after, sigs[i]), "creator's mask changed (%d)",
			      sigs[i]);
	}
	ck_assert(sigismember(&after, SIGUSR2));
	sigemptyset(&mine);
	pthread_sigmask(SIG_SETMASK, &mine, NULL);
	own_thread_stack_release(&s);
}
END_TEST

START_TEST(test_a_stack_in_use_is_refused_and_serves_again_once_released)
{
	struct own_stack s = {0};
	pthread_attr_t a, b;
	pthread_attr_init(&a);
	pthread_attr_init(&b);
	ck_assert_int_eq(own_thread_stack_attr(&s, &a, STACK_BYTES), 0);
	void *base = s.base;
	ck_assert(s.in_use);
	ck_assert_int_eq(own_thread_stack_attr(&s, &b, STACK_BYTES), -EBUSY);
	own_thread_stack_release(&s);
	ck_assert(!s.in_use);
	ck_assert_int_eq(own_thread_stack_attr(&s, &b, STACK_BYTES), 0);
	ck_assert_ptr_eq(s.base, base); /* the same mapping, not a new one */
	own_thread_stack_release(&s);
	/* A fork child's copy: free, the same mapping. */
	s.in_use = true;
	own_thread_stack_after_fork(&s);
	ck_assert(!s.in_use);
	ck_assert_ptr_eq(s.base, base);
	pthread_attr_destroy(&a);
	pthread_attr_destroy(&b);
}
END_TEST

static int refuse(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	(void)t, (void)attr, (void)fn, (void)arg;
	return EAGAIN;
}

START_TEST(test_a_failed_creation_returns_its_error_and_frees_the_stack)
{
	struct own_stack s = {0};
	pthread_t t;
	ck_assert_int_eq(own_thread_create(&s, STACK_BYTES, refuse, &t, end_at_once, NULL),
			 -EAGAIN);
	ck_assert(!s.in_use);
	struct seen seen;
	ck_assert_int_eq(own_thread_create(&s, STACK_BYTES, pthread_create, &t, record, &seen), 0);
	pthread_join(t, NULL);
	ck_assert(in_mapping(&s, seen.local));
	own_thread_stack_release(&s);
}
END_TEST

static void *report_self(void *arg)
{
	*(bool *)arg = own_thread_is_self();
	return NULL;
}

/* The entry points and the sampler leave our threads alone from their first
 * instruction: ours say so, an application thread (and the main thread) do not. */
START_TEST(test_our_threads_know_they_are_ours_and_no_other_thread_does)
{
	struct own_stack s = {0};
	bool ours = false, app = true;
	pthread_t t;
	ck_assert_int_eq(own_thread_create(&s, STACK_BYTES, pthread_create, &t, report_self, &ours),
			 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert(ours);
	ck_assert_int_eq(pthread_create(&t, NULL, report_self, &app), 0);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert(!app);
	ck_assert(!own_thread_is_self());
}
END_TEST

static Suite *own_stack_suite(void)
{
	Suite *s = suite_create("own_stack");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_thread_runs_on_our_mapping_with_its_descriptor_there);
	tcase_add_test(tc,
		       test_thread_starts_with_every_signal_blocked_and_the_creator_keeps_its_mask);
	tcase_add_test(tc, test_a_stack_in_use_is_refused_and_serves_again_once_released);
	tcase_add_test(tc, test_a_failed_creation_returns_its_error_and_frees_the_stack);
	tcase_add_test(tc, test_our_threads_know_they_are_ours_and_no_other_thread_does);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(own_stack_suite());
}
