/*
 * test_thread_start.c - the pool of thread start records (agent/sample/thread_start.c).
 *
 * Stress: 8 threads take and give back records 200k times each, writing their own id
 * into the record and checking it after a pause: a record handed to two holders at once
 * shows as an id changed under its holder. Also: more holders than slots fall back to
 * malloc and the slots serve again once given back; the stack size read for a thread
 * matches what glibc is asked for. Also built with ThreadSanitizer (make tsan).
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/sample/thread_start.h"
#include "common/asan.h"
#include "check_run.h"

#define STRESS_THREADS 8
/* Sanitized builds run the rounds ~10x slower: a tenth of them still races 8 threads. */
#if defined(DDPROF_TSAN) || DDPROF_ASAN
#define STRESS_ROUNDS 20000
#else
#define STRESS_ROUNDS 200000
#endif

static _Atomic long clashes, fallbacks;

static void *stress(void *arg)
{
	uintptr_t me = (uintptr_t)arg;
	for (int i = 0; i < STRESS_ROUNDS; i++) {
		struct thread_start *s = thread_start_alloc();
		ck_assert_ptr_nonnull(s);
		if (!thread_start_is_slot(s))
			atomic_fetch_add(&fallbacks, 1);
		s->arg = (void *)me;
		s->stack_size = me * 1000 + (size_t)(i & 255);
		if (i % 64 == 0)
			sched_yield();
		if (s->arg != (void *)me || s->stack_size != me * 1000 + (size_t)(i & 255))
			atomic_fetch_add(&clashes, 1);
		thread_start_release(s);
	}
	return NULL;
}

START_TEST(records_are_never_shared)
{
	pthread_t t[STRESS_THREADS];
	for (uintptr_t i = 0; i < STRESS_THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, stress, (void *)(i + 1)), 0);
	for (int i = 0; i < STRESS_THREADS; i++)
		pthread_join(t[i], NULL);
	ck_assert_int_eq(atomic_load(&clashes), 0);
	/* 8 holders at most at once, 64 slots: never a malloc. */
	ck_assert_int_eq(atomic_load(&fallbacks), 0);
}
END_TEST

START_TEST(more_holders_than_slots_fall_back_to_malloc)
{
	struct thread_start *held[THREAD_START_SLOTS + 6];
	size_t slots = 0;
	for (size_t i = 0; i < THREAD_START_SLOTS + 6; i++) {
		held[i] = thread_start_alloc();
		ck_assert_ptr_nonnull(held[i]);
		slots += thread_start_is_slot(held[i]);
		for (size_t k = 0; k < i; k++)
			ck_assert_ptr_ne(held[k], held[i]);
	}
	ck_assert_uint_eq(slots, THREAD_START_SLOTS);
	for (size_t i = 0; i < THREAD_START_SLOTS + 6; i++)
		thread_start_release(held[i]);
	struct thread_start *again = thread_start_alloc();
	ck_assert(thread_start_is_slot(again));
	thread_start_release(again);
}
END_TEST

START_TEST(a_fork_child_gets_every_record_back)
{
	struct thread_start *held[THREAD_START_SLOTS];
	for (size_t i = 0; i < THREAD_START_SLOTS; i++)
		held[i] = thread_start_alloc();
	pid_t pid = fork();
	if (pid == 0) {
		/* The parent's holders do not exist here. */
		thread_start_after_fork();
		size_t slots = 0;
		struct thread_start *mine[THREAD_START_SLOTS];
		for (size_t i = 0; i < THREAD_START_SLOTS; i++)
			slots += thread_start_is_slot(mine[i] = thread_start_alloc());
		_exit(slots == THREAD_START_SLOTS ? 0 : 1);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The parent's records are still its own. */
	struct thread_start *extra = thread_start_alloc();
	ck_assert(!thread_start_is_slot(extra));
	thread_start_release(extra);
	for (size_t i = 0; i < THREAD_START_SLOTS; i++)
		thread_start_release(held[i]);
}
END_TEST

START_TEST(stack_size_is_what_glibc_is_asked_for)
{
	pthread_attr_t def, attr;
	size_t want;
	ck_assert_int_eq(pthread_getattr_default_np(&def), 0);
	ck_assert_int_eq(pthread_attr_getstacksize(&def, &want), 0);
	pthread_attr_destroy(&def);
	ck_assert_uint_eq(thread_start_stack_size(NULL), want);
	pthread_attr_init(&attr);
	ck_assert_int_eq(pthread_attr_setstacksize(&attr, 3 << 20), 0);
	ck_assert_uint_eq(thread_start_stack_size(&attr), 3 << 20);
	pthread_attr_destroy(&attr);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("thread_start");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, records_are_never_shared);
	tcase_add_test(tc, more_holders_than_slots_fall_back_to_malloc);
	tcase_add_test(tc, a_fork_child_gets_every_record_back);
	tcase_add_test(tc, stack_size_is_what_glibc_is_asked_for);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
