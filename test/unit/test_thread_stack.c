/*
 * test_thread_stack.c - unit tests of uploader/thread_stack.c: the uploader thread runs
 * on our mapping, with a guard page below it; a fork child sees that mapping zero-filled
 * (MADV_WIPEONFORK: nothing of it copied) and reuses it for its own thread; a second
 * thread in one process gets a stack of its own.
 */
#include "uploader/thread_stack.h"

#include <check.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/unit/check_run.h"

#define MARK 0x5a

/* A thread started on thread_stack_apply's stack, waiting to be released. */
struct seen {
	pthread_attr_t attr;
	void *addr; /* the stack given to it */
	size_t size;
	uintptr_t local; /* address of 256 bytes of the thread's stack it filled with MARK */
	volatile uint8_t *marked; /* the same, read while the thread waits */
	sem_t filled, release;
	pthread_t thread;
};

static void *run(void *arg)
{
	struct seen *s = arg;
	volatile uint8_t buf[256];
	memset((void *)buf, MARK, sizeof(buf));
	s->local = (uintptr_t)&buf[0];
	sem_post(&s->filled);
	while (sem_wait(&s->release) != 0)
		;
	return (void *)(uintptr_t)buf[0];
}

static void start(struct seen *s)
{
	pthread_attr_init(&s->attr);
	thread_stack_apply(&s->attr);
	ck_assert_int_eq(pthread_attr_getstack(&s->attr, &s->addr, &s->size), 0);
	ck_assert_ptr_nonnull(s->addr); /* ours, not glibc's default */
	sem_init(&s->filled, 0, 0);
	sem_init(&s->release, 0, 0);
	ck_assert_int_eq(pthread_create(&s->thread, &s->attr, run, s), 0);
	while (sem_wait(&s->filled) != 0)
		;
	s->marked = (volatile uint8_t *)s->local;
}

/* The child's wait status. */
static int child_status(pid_t pid)
{
	int status = 0;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

static void finish(struct seen *s)
{
	sem_post(&s->release);
	ck_assert_int_eq(pthread_join(s->thread, NULL), 0);
	pthread_attr_destroy(&s->attr);
}

START_TEST(test_thread_runs_on_our_stack)
{
	struct seen s = {0};
	start(&s);
	ck_assert_uint_ge(s.size, 1u << 20);
	ck_assert_msg(s.local >= (uintptr_t)s.addr && s.local < (uintptr_t)s.addr + s.size,
		      "the thread's local variable %#lx is not in the given stack [%p, +%zu)",
		      (unsigned long)s.local, s.addr, s.size);
	finish(&s);
}
END_TEST

START_TEST(test_fork_child_sees_the_stack_wiped_and_reuses_it)
{
	struct seen s = {0};
	start(&s);
	ck_assert_int_eq(s.marked[0], MARK);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int bad = 0;
		for (int i = 0; i < 256; i++)
			bad |= s.marked[i] != 0;
		pthread_attr_t again;
		pthread_attr_init(&again);
		thread_stack_apply(&again);
		void *a2 = NULL;
		size_t s2 = 0;
		pthread_attr_getstack(&again, &a2, &s2);
		_exit((bad ? 1 : 0) | (a2 != s.addr ? 2 : 0));
	}
	int status = child_status(pid);
	ck_assert(WIFEXITED(status));
	ck_assert_msg((WEXITSTATUS(status) & 1) == 0, "the child saw the parent's stack bytes");
	ck_assert_msg((WEXITSTATUS(status) & 2) == 0, "the child did not reuse the mapping");
	ck_assert_int_eq(s.marked[0], MARK); /* the parent's copy is untouched */
	finish(&s);
}
END_TEST

START_TEST(test_guard_page_below_the_stack)
{
	struct seen s = {0};
	start(&s);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		*((volatile uint8_t *)s.addr - 1) = 1; /* an overflow */
		_exit(0);
	}
	int status = child_status(pid);
	ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
		      "writing below the stack did not fault");
	finish(&s);
}
END_TEST

START_TEST(test_second_thread_in_one_process_gets_a_new_stack)
{
	struct seen s1 = {0}, s2 = {0};
	start(&s1);
	start(&s2);
	ck_assert_ptr_ne(s1.addr, s2.addr);
	ck_assert_int_eq(s1.marked[0], MARK); /* the first stack was not reused */
	finish(&s1);
	finish(&s2);
}
END_TEST

static Suite *thread_stack_suite(void)
{
	Suite *s = suite_create("thread_stack");
	TCase *tc = tcase_create("thread_stack");
	tcase_add_test(tc, test_thread_runs_on_our_stack);
	tcase_add_test(tc, test_fork_child_sees_the_stack_wiped_and_reuses_it);
	tcase_add_test(tc, test_guard_page_below_the_stack);
	tcase_add_test(tc, test_second_thread_in_one_process_gets_a_new_stack);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(thread_stack_suite());
}
