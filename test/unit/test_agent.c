/*
 * test_agent.c - the agent's front door (agent/agent.c), driven the way preload/ drives
 * it: the agent runs only once started, and then arms the calling thread's timer; a
 * thread that goes through agent_thread_new/begin/end has a timer for its life and
 * none after; a thread created under a seccomp filter gets none, and the skip is
 * counted; the fork steps, in preload.c's order, leave the child one timer (its own
 * thread's) and the parent its own; agent_sigaction reads back what it set.
 * Each test runs in a process of its own (Check's fork mode): the agent is per process.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent.h"
#include "check_run.h"
#include "common/config.h"

static int start_agent(void)
{
	struct config cfg;
	config_defaults(&cfg);
	int signo = agent_init(&cfg);
	ck_assert_msg(signo > 0, "agent_init: expected a signal number, got %d", signo);
	agent_start();
	return signo;
}

static uint64_t live_timers(void)
{
	struct agent_diagnostics d;
	agent_get_diagnostics(&d);
	return d.live_timers;
}

START_TEST(test_agent_runs_only_once_started)
{
	struct config cfg;
	config_defaults(&cfg);
	struct agent_diagnostics d;
	ck_assert(!agent_running());
	int signo = agent_init(&cfg);
	ck_assert_msg(signo > 0, "agent_init: expected a signal number, got %d", signo);
	ck_assert_msg(!agent_running(), "the agent runs before agent_start");
	agent_get_diagnostics(&d);
	ck_assert_msg(d.signal == 0, "diagnostics of an agent not started: signal %d", d.signal);
	agent_start();
	ck_assert(agent_running());
	ck_assert_ptr_nonnull(agent_profiles());
	agent_get_diagnostics(&d);
	ck_assert_int_eq(d.signal, signo);
	ck_assert_msg(d.live_timers == 1, "expected the calling thread's timer, saw %llu",
		      (unsigned long long)d.live_timers);
	ck_assert(agent_may_work_here());
}
END_TEST

/* A thread started the way preload.c's trampoline starts one. */
struct observed {
	_Atomic uint64_t timers_inside; /* live timers while it ran */
	_Atomic bool may_work;		/* agent_may_work_here() in it */
	_Atomic int ran;
};

static void *body(void *arg)
{
	struct observed *o = arg;
	atomic_store(&o->timers_inside, live_timers());
	atomic_store(&o->may_work, agent_may_work_here());
	atomic_store(&o->ran, 1);
	return NULL;
}

static void *trampoline(void *p)
{
	struct thread_start start;
	agent_thread_begin(p, &start);
	void *ret = start.fn(start.arg);
	agent_thread_end(NULL);
	return ret;
}

static void run_thread(struct observed *o)
{
	struct thread_start *s = agent_thread_new(body, o, NULL);
	ck_assert_ptr_nonnull(s);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, trampoline, s), 0);
	pthread_join(t, NULL);
	ck_assert_int_eq(atomic_load(&o->ran), 1);
}

START_TEST(test_a_new_thread_has_a_timer_for_its_life)
{
	start_agent();
	struct observed o = {0};
	run_thread(&o);
	ck_assert_msg(atomic_load(&o.timers_inside) == 2,
		      "expected 2 live timers while the thread ran, saw %llu",
		      (unsigned long long)atomic_load(&o.timers_inside));
	ck_assert(atomic_load(&o.may_work));
	ck_assert_msg(live_timers() == 1, "expected its timer deleted at its end, %llu live",
		      (unsigned long long)live_timers());
}
END_TEST

START_TEST(test_a_thread_created_under_a_filter_gets_no_timer)
{
	start_agent();
	struct sandbox_state before = agent_sandbox_save();
	agent_sandbox_enter(false);
	ck_assert(!agent_may_work_here());
	struct agent_diagnostics d;
	agent_get_diagnostics(&d);
	uint64_t skips = d.sandbox_skips;
	struct observed o = {0};
	run_thread(&o);
	ck_assert_msg(atomic_load(&o.timers_inside) == 1,
		      "expected no timer for a thread created under a filter, %llu live",
		      (unsigned long long)atomic_load(&o.timers_inside));
	ck_assert_msg(!atomic_load(&o.may_work), "the filter's thread may work for us");
	agent_get_diagnostics(&d);
	ck_assert_msg(d.sandbox_skips == skips + 1, "expected one skip counted, saw %llu",
		      (unsigned long long)(d.sandbox_skips - skips));
	agent_sandbox_restore(before); /* the filter was refused */
	ck_assert(agent_may_work_here());
}
END_TEST

static _Atomic int release_sleeper;

static void *sleeper(void *arg)
{
	(void)arg;
	while (!atomic_load(&release_sleeper))
		usleep(1000);
	return NULL;
}

START_TEST(test_fork_steps_leave_the_child_its_own_timer)
{
	start_agent();
	pthread_t t;
	struct thread_start *s = agent_thread_new(sleeper, NULL, NULL);
	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(pthread_create(&t, NULL, trampoline, s), 0);
	while (live_timers() < 2)
		usleep(1000);
	/* preload.c's handlers, without the uploader's and the fork guard's steps. */
	agent_atfork_prepare_first();
	agent_atfork_prepare();
	pid_t pid = fork();
	if (pid == 0) {
		agent_atfork_child(pthread_create);
		agent_atfork_child_last();
		_exit(live_timers() == 1 && agent_running() ? 0 : 1);
	}
	agent_atfork_parent();
	agent_atfork_parent_last();
	ck_assert_int_gt(pid, 0);
	int status = 0;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "expected the child to run with one timer, its thread's (status %#x)",
		      status);
	ck_assert_msg(live_timers() == 2, "the parent lost a timer at the fork: %llu live",
		      (unsigned long long)live_timers());
	atomic_store(&release_sleeper, 1);
	pthread_join(t, NULL);
}
END_TEST

static void on_usr1(int sig)
{
	(void)sig;
}

START_TEST(test_agent_sigaction_reads_back_what_it_set)
{
	start_agent();
	struct sigaction act, old;
	memset(&act, 0, sizeof(act));
	act.sa_handler = on_usr1;
	sigemptyset(&act.sa_mask);
	act.sa_flags = SA_RESTART;
	ck_assert_int_eq(agent_sigaction(SIGUSR1, &act, NULL), 0);
	ck_assert_int_eq(agent_sigaction(SIGUSR1, NULL, &old), 0);
	ck_assert(old.sa_handler == on_usr1);
	ck_assert(old.sa_flags & SA_RESTART);
}
END_TEST

static Suite *agent_suite(void)
{
	Suite *s = suite_create("agent");
	TCase *tc = tcase_create("front_door");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_agent_runs_only_once_started);
	tcase_add_test(tc, test_a_new_thread_has_a_timer_for_its_life);
	tcase_add_test(tc, test_a_thread_created_under_a_filter_gets_no_timer);
	tcase_add_test(tc, test_fork_steps_leave_the_child_its_own_timer);
	tcase_add_test(tc, test_agent_sigaction_reads_back_what_it_set);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(agent_suite());
}
