/*
 * test_app_signals.c - the application's signal dispositions (agent/sample/app_signals.c).
 *
 * A stand-in sampler owns SIGPROF here: signals from a POSIX timer (SI_TIMER) are "ours"
 * and counted, any other is given to the application's action, as the real sampler
 * does. Checked: the application reads back what it set, its handler gets its own
 * signals with its mask, SIG_IGN and SIG_DFL (the default action terminates, with the
 * signal's number) apply to its signals and never to ours, SA_RESETHAND is one-shot;
 * other signals' handlers run through the dispatcher with the kernel's siginfo and are
 * seen as "in a handler", also after a siglongjmp out of one; a replacement behind
 * libc's back is noticed. Stress: threads swap a handler while signals arrive (under
 * ThreadSanitizer, make tsan, while other threads read it instead). Each test runs in its own
 * process (Check's fork mode): dispositions do not leak between tests.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/sample/app_signals.h"
#include "check_run.h"

static _Atomic int ours;

static void stand_in_sampler(int sig, siginfo_t *si, void *uc)
{
	if (si->si_code == SI_TIMER) {
		atomic_fetch_add(&ours, 1);
		return;
	}
	app_signals_deliver(sig, si, uc);
}

static _Atomic int app_calls;
static _Atomic int app_saw_usr1_blocked;
static _Atomic int app_saw_in_handler;

static void app_handler(int sig)
{
	(void)sig;
	sigset_t cur;
	pthread_sigmask(SIG_SETMASK, NULL, &cur);
	if (sigismember(&cur, SIGUSR1) == 1)
		atomic_fetch_add(&app_saw_usr1_blocked, 1);
	if (app_signals_in_handler())
		atomic_fetch_add(&app_saw_in_handler, 1);
	atomic_fetch_add(&app_calls, 1);
}

static void install_sampler(void)
{
	ck_assert_int_eq(app_signals_install_sampling(SIGPROF, stand_in_sampler), 0);
}

/* A POSIX timer sending SIGPROF to this process every ms of wall time, n times. */
static void our_timer_fires(int n)
{
	timer_t t;
	struct sigevent sev;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGPROF;
	ck_assert_int_eq(timer_create(CLOCK_MONOTONIC, &sev, &t), 0);
	struct itimerspec its = {{0, 1000000}, {0, 1000000}};
	ck_assert_int_eq(timer_settime(t, 0, &its, NULL), 0);
	while (atomic_load(&ours) < n) {
		struct timespec nap = {0, 200000};
		nanosleep(&nap, NULL);
	}
	timer_delete(t);
}

START_TEST(sampling_signal_action_is_virtual)
{
	install_sampler();
	struct sigaction act, back, old;
	memset(&act, 0, sizeof(act));
	act.sa_handler = app_handler;
	sigemptyset(&act.sa_mask);
	sigaddset(&act.sa_mask, SIGUSR1);
	act.sa_flags = SA_RESTART;
	ck_assert_int_eq(app_signals_sigaction(SIGPROF, &act, &old), 0);
	ck_assert_msg(old.sa_handler == SIG_DFL, "the action before ours was SIG_DFL");
	ck_assert_int_eq(app_signals_sigaction(SIGPROF, NULL, &back), 0);
	ck_assert_msg(back.sa_handler == app_handler, "read back: not the application's handler");
	ck_assert_int_eq(back.sa_flags & (SA_RESTART | SA_SIGINFO | SA_RESETHAND), SA_RESTART);
	ck_assert_int_eq(sigismember(&back.sa_mask, SIGUSR1), 1);
	ck_assert(app_signals_sampling_intact());
	/* Ours never reach it; its own do, with its mask. */
	our_timer_fires(5);
	ck_assert_int_eq(atomic_load(&app_calls), 0);
	kill(getpid(), SIGPROF);
	kill(getpid(), SIGPROF);
	ck_assert_int_eq(atomic_load(&app_calls), 2);
	ck_assert_int_eq(atomic_load(&app_saw_usr1_blocked), 2);
	ck_assert_int_eq(atomic_load(&app_saw_in_handler), 2);
	ck_assert_uint_eq(app_signals_forwarded(), 2);
	ck_assert(!app_signals_in_handler());
}
END_TEST

START_TEST(sig_dfl_terminates_on_the_apps_signal_only)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		install_sampler();
		our_timer_fires(20); /* SIG_DFL: ours must not kill */
		raise(SIGPROF);	     /* the application's: the default action */
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGPROF,
		      "expected death by SIGPROF from raise(), got status 0x%x", st);
}
END_TEST

/* A watched signal (app_signals_watch_deaths): read back as the untouched SIG_DFL, the
 * death hook runs (once, in the dying thread) before the process dies of the signal;
 * set back to SIG_DFL by the application after a handler of its own, still watched; an
 * inherited SIG_IGN (nohup) is left alone. Each in a child, whose wait status tells. */
static _Atomic int deaths_seen;
static int death_pipe = -1;
static void on_death(int sig)
{
	atomic_fetch_add(&deaths_seen, 1);
	char c = (char)sig;
	if (write(death_pipe, &c, 1) != 1)
		_exit(9);
}

static int child_status(int how, int *hook_sig)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[0]);
		death_pipe = p[1];
		/* Check's runner may have handlers of its own for these. */
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		if (how == 2)
			signal(SIGHUP, SIG_IGN); /* inherited, as from nohup */
		install_sampler();
		static const int sigs[] = {SIGTERM, SIGHUP};
		app_signals_watch_deaths(sigs, 2, on_death);
		struct sigaction back;
		if (app_signals_sigaction(SIGTERM, NULL, &back) != 0 ||
		    back.sa_handler != SIG_DFL || back.sa_flags != 0)
			_exit(7); /* not the untouched default */
		if (how == 1) {
			struct sigaction h = {.sa_handler = app_handler},
					 d = {.sa_handler = SIG_DFL};
			app_signals_sigaction(SIGTERM, &h, NULL);
			app_signals_sigaction(SIGTERM, &d, NULL);
		}
		raise(how == 2 ? SIGHUP : SIGTERM);
		_exit(0);
	}
	close(p[1]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	char c = 0;
	*hook_sig = read(p[0], &c, 1) == 1 ? c : 0;
	close(p[0]);
	return st;
}

START_TEST(watched_default_actions_call_the_death_hook_then_kill)
{
	int hook_sig;
	int st = child_status(0, &hook_sig);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "status 0x%x", st);
	ck_assert_int_eq(hook_sig, SIGTERM);
	st = child_status(1, &hook_sig);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "set back: status 0x%x", st);
	ck_assert_int_eq(hook_sig, SIGTERM);
	st = child_status(2, &hook_sig);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "SIG_IGN: status 0x%x", st);
	ck_assert_int_eq(hook_sig, 0);
}
END_TEST

START_TEST(sig_ign_drops_the_apps_signals)
{
	install_sampler();
	struct sigaction act;
	memset(&act, 0, sizeof(act));
	act.sa_handler = SIG_IGN;
	ck_assert_int_eq(app_signals_sigaction(SIGPROF, &act, NULL), 0);
	kill(getpid(), SIGPROF);
	our_timer_fires(3);
	ck_assert_uint_eq(app_signals_forwarded(), 0);
}
END_TEST

START_TEST(resethand_is_one_shot)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		install_sampler();
		struct sigaction act, back;
		memset(&act, 0, sizeof(act));
		act.sa_handler = app_handler;
		act.sa_flags = SA_RESETHAND;
		app_signals_sigaction(SIGPROF, &act, NULL);
		raise(SIGPROF);
		app_signals_sigaction(SIGPROF, NULL, &back);
		if (atomic_load(&app_calls) != 1 || back.sa_handler != SIG_DFL)
			_exit(3);
		raise(SIGPROF);
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGPROF,
		      "expected the second SIGPROF to terminate, got status 0x%x", st);
}
END_TEST

static _Atomic int info_pid, info_code;

static void app_info_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	atomic_store(&info_pid, si->si_pid);
	atomic_store(&info_code, si->si_code);
	if (app_signals_in_handler())
		atomic_fetch_add(&app_saw_in_handler, 1);
}

START_TEST(other_handlers_run_through_the_dispatcher)
{
	install_sampler();
	struct sigaction act, back, kernel;
	memset(&act, 0, sizeof(act));
	act.sa_sigaction = app_info_handler;
	act.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&act.sa_mask);
	sigaddset(&act.sa_mask, SIGUSR2);
	ck_assert_int_eq(app_signals_sigaction(SIGUSR1, &act, NULL), 0);
	ck_assert_int_eq(app_signals_sigaction(SIGUSR1, NULL, &back), 0);
	ck_assert_msg(back.sa_sigaction == app_info_handler, "read back another handler");
	ck_assert_int_eq(back.sa_flags & (SA_SIGINFO | SA_RESTART), SA_SIGINFO | SA_RESTART);
	ck_assert_int_eq(sigismember(&back.sa_mask, SIGUSR2), 1);
	/* The kernel holds the dispatcher, with the application's mask. */
	ck_assert_int_eq(sigaction(SIGUSR1, NULL, &kernel), 0);
	ck_assert_msg(kernel.sa_sigaction != app_info_handler, "the kernel holds the app's own");
	ck_assert_int_eq(sigismember(&kernel.sa_mask, SIGUSR2), 1);
	kill(getpid(), SIGUSR1);
	ck_assert_int_eq(atomic_load(&info_pid), getpid());
	ck_assert_int_eq(atomic_load(&info_code), SI_USER);
	ck_assert_int_eq(atomic_load(&app_saw_in_handler), 1);
	/* SIG_DFL goes to the kernel as it is. */
	memset(&act, 0, sizeof(act));
	act.sa_handler = SIG_IGN;
	struct sigaction prev;
	ck_assert_int_eq(app_signals_sigaction(SIGUSR1, &act, &prev), 0);
	ck_assert_msg(prev.sa_sigaction == app_info_handler, "old action: not the app's handler");
	ck_assert_int_eq(sigaction(SIGUSR1, NULL, &kernel), 0);
	ck_assert_msg(kernel.sa_handler == SIG_IGN, "the kernel does not hold SIG_IGN");
}
END_TEST

static sigjmp_buf jump;

static void jumping_handler(int sig)
{
	(void)sig;
	siglongjmp(jump, 1);
}

START_TEST(siglongjmp_out_of_a_handler_leaves_it)
{
	install_sampler();
	struct sigaction act;
	memset(&act, 0, sizeof(act));
	act.sa_handler = jumping_handler;
	ck_assert_int_eq(app_signals_sigaction(SIGUSR1, &act, NULL), 0);
	if (sigsetjmp(jump, 1) == 0) {
		kill(getpid(), SIGUSR1);
		ck_abort_msg("the handler did not jump");
	}
	ck_assert_msg(!app_signals_in_handler(), "still in a handler after siglongjmp");
}
END_TEST

START_TEST(replacement_behind_libc_is_noticed)
{
	install_sampler();
	ck_assert(app_signals_sampling_intact());
	struct sigaction act;
	memset(&act, 0, sizeof(act));
	act.sa_handler = app_handler;
	ck_assert_int_eq(sigaction(SIGPROF, &act, NULL), 0); /* libc's, not ours */
	ck_assert(!app_signals_sampling_intact());
	/* The application now reads the kernel's truth. */
	struct sigaction back;
	ck_assert_int_eq(app_signals_sigaction(SIGPROF, NULL, &back), 0);
	ck_assert_msg(back.sa_handler == app_handler, "read back: not what the kernel holds");
}
END_TEST

/* SA_SIGINFO with SIG_IGN or SIG_DFL (HotSpot sets it on every action) is SIG_IGN or
 * SIG_DFL: the kernel goes by the handler value, and so must we. */
START_TEST(siginfo_flag_with_sig_ign_is_still_sig_ign)
{
	install_sampler();
	struct sigaction act, kernel;
	memset(&act, 0, sizeof(act));
	act.sa_handler = SIG_IGN;
	act.sa_flags = SA_SIGINFO;
	ck_assert_int_eq(app_signals_sigaction(SIGUSR1, &act, NULL), 0);
	ck_assert_int_eq(sigaction(SIGUSR1, NULL, &kernel), 0);
	ck_assert_msg(kernel.sa_handler == SIG_IGN, "the kernel does not hold SIG_IGN");
	raise(SIGUSR1); /* ignored: the test goes on */
	ck_assert_int_eq(app_signals_sigaction(SIGPROF, &act, NULL), 0);
	raise(SIGPROF); /* the virtual action: ignored too */
	ck_assert_uint_eq(app_signals_forwarded(), 0);
}
END_TEST

/* A one-shot handler reset by the kernel reads back as SIG_DFL without the SA_SIGINFO
 * the dispatcher was installed with, and restoring what was read keeps SIG_DFL. */
START_TEST(one_shot_handler_reads_back_as_the_apps_sig_dfl)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		install_sampler();
		struct sigaction act, saved;
		memset(&act, 0, sizeof(act));
		act.sa_handler = app_handler;
		act.sa_flags = SA_RESETHAND | SA_NODEFER;
		app_signals_sigaction(SIGUSR1, &act, NULL);
		raise(SIGUSR1);
		app_signals_sigaction(SIGUSR1, NULL, &saved);
		if (saved.sa_handler != SIG_DFL || (saved.sa_flags & SA_SIGINFO))
			_exit(3);
		app_signals_sigaction(SIGUSR1, &saved, NULL);
		raise(SIGUSR1); /* the default action */
		_exit(0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGUSR1,
		      "expected death by SIGUSR1, got status 0x%x", st);
}
END_TEST

/* A vfork child shares our memory: its signal() before exec must not write the
 * parent's table (it is passed to the kernel, for the child alone). */
START_TEST(vfork_child_leaves_the_parents_table_alone)
{
	install_sampler();
	struct sigaction act, back;
	memset(&act, 0, sizeof(act));
	act.sa_handler = app_handler;
	ck_assert_int_eq(app_signals_sigaction(SIGUSR1, &act, NULL), 0);
	pid_t pid = vfork();
	if (pid == 0) {
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		app_signals_sigaction(SIGUSR1, &dfl, NULL);
		_exit(0);
	}
	ck_assert_int_gt(pid, 0);
	waitpid(pid, NULL, 0);
	ck_assert_int_eq(app_signals_sigaction(SIGUSR1, NULL, &back), 0);
	ck_assert_msg(back.sa_handler == app_handler, "the vfork child changed our action");
	raise(SIGUSR1);
	ck_assert_int_eq(atomic_load(&app_calls), 1);
}
END_TEST

/* The table's lock held by a thread at a fork is taken over in the child. */
static _Atomic int holding;

static void *hold_lock_forever(void *arg)
{
	(void)arg;
	struct sigaction act;
	memset(&act, 0, sizeof(act));
	act.sa_handler = app_handler;
	/* Many writes: the fork below lands inside one often enough. */
	for (;;) {
		atomic_store(&holding, 1);
		app_signals_sigaction(SIGUSR2, &act, NULL);
	}
	return NULL;
}

START_TEST(fork_child_takes_over_a_lock_held_at_the_fork)
{
	install_sampler();
	pthread_t t;
	pthread_create(&t, NULL, hold_lock_forever, NULL);
	while (!atomic_load(&holding))
		;
	for (int i = 0; i < 200; i++) {
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			app_signals_after_fork_child(getpid());
			struct sigaction act;
			memset(&act, 0, sizeof(act));
			act.sa_handler = SIG_IGN;
			alarm(5); /* a hang dies of SIGALRM */
			app_signals_sigaction(SIGUSR2, &act, NULL);
			_exit(0);
		}
		int st;
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "fork %d: the child's sigaction hung or died (status 0x%x)", i, st);
	}
}
END_TEST

#ifdef DDPROF_TSAN
#define STRESS_SWAPS 2000
#else
#define STRESS_SWAPS 20000
#endif

static _Atomic int stress_a, stress_b, stress_done;

static void handler_a(int sig)
{
	(void)sig;
	atomic_fetch_add(&stress_a, 1);
}

static void handler_b(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	atomic_fetch_add(&stress_b, 1);
}

static void *swapper(void *arg)
{
	(void)arg;
	for (int i = 0; i < STRESS_SWAPS; i++) {
		struct sigaction act, old;
		memset(&act, 0, sizeof(act));
		if (i & 1) {
			act.sa_sigaction = handler_b;
			act.sa_flags = SA_SIGINFO;
		} else {
			act.sa_handler = handler_a;
		}
		ck_assert_int_eq(app_signals_sigaction(SIGUSR1, &act, &old), 0);
		ck_assert_msg(old.sa_handler == handler_a || old.sa_sigaction == handler_b ||
				  old.sa_handler == SIG_DFL,
			      "old action is neither handler");
	}
	return NULL;
}

/* Under ThreadSanitizer (which delivers signals at its own points, and does not see
 * the raw sigprocmask of our writers) the senders are readers instead: the table's
 * concurrent reads and writes are what it checks. */
__attribute__((unused)) static void *reader(void *arg)
{
	(void)arg;
	while (!atomic_load(&stress_done)) {
		struct sigaction cur;
		ck_assert_int_eq(app_signals_sigaction(SIGUSR1, NULL, &cur), 0);
		ck_assert_msg(cur.sa_handler == handler_a || cur.sa_sigaction == handler_b,
			      "read a torn action");
	}
	return NULL;
}

__attribute__((unused)) static void *sender(void *arg)
{
	pthread_t target = *(pthread_t *)arg;
	/* A signal every 20 us or so: a storm, yet the target still gets to run (under
	 * ThreadSanitizer, which delivers signals at its own points, a tight loop starves
	 * it). */
	struct timespec nap = {0, 20000};
	while (!atomic_load(&stress_done)) {
		pthread_kill(target, SIGUSR1);
		nanosleep(&nap, NULL);
	}
	return NULL;
}

START_TEST(handler_swaps_under_signals)
{
	install_sampler();
	struct sigaction act;
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler_a;
	ck_assert_int_eq(app_signals_sigaction(SIGUSR1, &act, NULL), 0);
	pthread_t self = pthread_self(), s[2], w;
	for (int i = 0; i < 2; i++)
#ifdef DDPROF_TSAN
		pthread_create(&s[i], NULL, reader, NULL);
#else
		pthread_create(&s[i], NULL, sender, &self);
#endif
	pthread_create(&w, NULL, swapper, NULL);
	swapper(NULL);
	pthread_join(w, NULL);
	atomic_store(&stress_done, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(s[i], NULL);
#ifndef DDPROF_TSAN
	/* Every signal ran one of the two handlers: a torn action would have crashed or
	 * run neither. */
	ck_assert_int_gt(atomic_load(&stress_a) + atomic_load(&stress_b), 0);
#endif
}
END_TEST

int main(void)
{
	Suite *s = suite_create("app_signals");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
#ifdef DDPROF_TSAN
	/* Under ThreadSanitizer, which intercepts signals and their dispositions itself,
	 * only the concurrent use of the table is checked: the behaviour tests are for
	 * the plain build. */
	tcase_add_test(tc, handler_swaps_under_signals);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
#endif
	tcase_add_test(tc, sampling_signal_action_is_virtual);
	tcase_add_test(tc, sig_dfl_terminates_on_the_apps_signal_only);
	tcase_add_test(tc, watched_default_actions_call_the_death_hook_then_kill);
	tcase_add_test(tc, sig_ign_drops_the_apps_signals);
	tcase_add_test(tc, resethand_is_one_shot);
	tcase_add_test(tc, other_handlers_run_through_the_dispatcher);
	tcase_add_test(tc, siglongjmp_out_of_a_handler_leaves_it);
	tcase_add_test(tc, replacement_behind_libc_is_noticed);
	tcase_add_test(tc, handler_swaps_under_signals);
	tcase_add_test(tc, siginfo_flag_with_sig_ign_is_still_sig_ign);
	tcase_add_test(tc, one_shot_handler_reads_back_as_the_apps_sig_dfl);
	tcase_add_test(tc, vfork_child_leaves_the_parents_table_alone);
	tcase_add_test(tc, fork_child_takes_over_a_lock_held_at_the_fork);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
