/*
 * test_dl_guard.c - fork() while another thread loads and unloads libraries.
 *
 * glibc's fork leaves the exit-handler lock as it was: a fork while dlclose runs a
 * library's __cxa_finalize gives a child that hangs in exit(). With the guard's fork
 * handlers, 500 children forked while a thread loads and unloads libdw (with libelf,
 * liblzma and libbz2) and zlib, as the uploader does every period, all exit (a child
 * that has not exited after 5 s is killed and counted). DL_GUARD_TEST_OFF=1 runs the
 * same without the handlers: 3 children hang within the 500, every run here.
 * dl_guard_wait_loader (the barrier of agent/alloc/got_patch.c) returns to a thread
 * that holds the guard.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_run.h"
#include "agent/symbolize/dw_api.h"
#include "common/asan.h"
#include "common/dl_guard.h"
#include "common/z_api.h"

#if DDPROF_ASAN
/* ASan build: no LeakSanitizer here. Each of the 500 children would run it at exit(),
 * stopping the world of a process whose loader thread fork did not copy: slow (a
 * minute for the suite) and at times past the 5 s a child is given. Visible: the
 * suites are built -fvisibility=hidden, and the shared runtime looks it up. */
__attribute__((visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "detect_leaks=0";
}
#endif

static atomic_bool stop;
static atomic_long cycles;

static void *loader(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		if (z_api_get() && dw_api_get())
			atomic_fetch_add(&cycles, 1);
		z_api_unload();
		dw_api_unload();
		usleep(300);
	}
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits for pid at most `secs`; kills it past that. Returns whether it exited 0. */
static bool reap(pid_t pid, double secs)
{
	double until = now_s() + secs;
	int status;
	while (now_s() < until) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return WIFEXITED(status) && WEXITSTATUS(status) == 0;
		usleep(200);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return false;
}

/* The barrier takes the loader's lock, not the guard: it returns to a thread that holds
 * the guard (the guard is not recursive: taking it here would never return). */
START_TEST(wait_loader_takes_no_guard)
{
	dl_guard_lock();
	dl_guard_wait_loader();
	dl_guard_unlock();
}
END_TEST

START_TEST(children_exit_while_a_library_is_unloaded)
{
	if (!getenv("DL_GUARD_TEST_OFF"))
		pthread_atfork(dl_guard_atfork_prepare, dl_guard_atfork_parent,
			       dl_guard_atfork_child);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, loader, NULL), 0);
	int hung = 0, n = 500;
	for (int i = 0; i < n && hung < 3; i++) {
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0)
			exit(0); /* runs the exit handlers: takes the exit-handler lock */
		hung += !reap(pid, 5.0);
	}
	atomic_store(&stop, true);
	pthread_join(t, NULL);
	ck_assert_msg(hung == 0, "%d children hung in exit (%ld load/unload cycles)", hung,
		      atomic_load(&cycles));
	ck_assert_int_gt(atomic_load(&cycles), 100);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dl_guard");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, wait_loader_takes_no_guard);
	tcase_add_test(tc, children_exit_while_a_library_is_unloaded);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
