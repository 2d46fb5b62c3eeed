/*
 * wall_threads.c - threads that run and wait in known ways, for the wall-clock profile's
 * integration tests (test/integration/tests_wall.py).
 *
 *   wall_threads states [seconds=3]
 *       four threads for the given time: burn_cpu spins, sleep_loop sleeps in
 *       nanosleep (20 ms at a time), read_pipe blocks in one read on a pipe, wait_cond
 *       in pthread_cond_wait; then the main thread releases and joins them. Prints per
 *       thread "thread <name> <tid> <lifetime ns>" (CLOCK_MONOTONIC from its first
 *       instruction to its last).
 *   wall_threads eintr [seconds=3]
 *       five threads call poll, epoll_wait, nanosleep, select and read (a socket with a
 *       receive timeout) with 1-2 ms timeouts in a loop, counting each call and each
 *       EINTR. Prints "calls_<call> N" and "eintr_<call> N".
 *   wall_threads longjmp
 *       a thread blocked in read on a pipe is interrupted by a signal whose handler
 *       siglongjmps out of the read (as programs with alarm-based timeouts do), then
 *       sleeps in nanosleep (20 ms at a time) for 1 s in after_jump. Prints
 *       "thread after_jump <tid> <ns it slept after the jump>".
 *   wall_threads nested
 *       a thread blocked 1 s in read on a pipe (read_pipe) receives a signal whose
 *       handler sleeps 100 ms in nanosleep and returns (SA_RESTART: the read goes
 *       on). Prints "thread read_pipe <tid> <lifetime ns>".
 *   wall_threads idle <threads> [seconds=3]
 *       the given number of threads wait in pthread_cond_wait (woken every 100 ms)
 *       while one thread burns CPU; prints the process's CPU time.
 *   wall_threads fork
 *       four threads wait in pthread_cond_wait while a fifth (forker) forks; the child
 *       (forker's copy, its only thread) starts and joins a thread that does nothing
 *       (the child's first pthread_create starts its uploader), sleeps 2.5 s in one
 *       nanosleep in child_sleep, then starts four threads that sleep 50 ms each in nanosleep
 *       (child_worker; they may take the stacks of the parent's threads) and exits.
 *       The child prints "child <pid> <tid> <ns slept in child_sleep> <ns its workers
 *       slept>"; the parent waits for it, then releases its threads.
 * Every mode ends with the wall counters of ddprof_get_diagnostics when the agent is
 * there. Lines are "name value".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_diag.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void print_wall_diagnostics(void)
{
	struct ddprof_diagnostics d;
	if (!agent_diagnostics(&d))
		return;
	printf("diag_wall_hooks_installed %llu\ndiag_wall_wait_samples %llu\n"
	       "diag_wall_running_samples %llu\n",
	       (unsigned long long)d.wall_hooks_installed, (unsigned long long)d.wall_wait_samples,
	       (unsigned long long)d.wall_running_samples);
}

static atomic_bool stop;

/* ---------------------------------------------------------------- states */

struct life {
	const char *name;
	pid_t tid;
	uint64_t start, end;
};

static int pipefd[2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool released;
static volatile uint64_t sink;

static __attribute__((noinline)) void burn_cpu(void)
{
	uint64_t x = 1;
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		for (int i = 0; i < 10000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	sink = x;
}

static __attribute__((noinline)) void sleep_loop(void)
{
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static __attribute__((noinline)) void read_pipe(void)
{
	char c;
	while (read(pipefd[0], &c, 1) < 0 && errno == EINTR)
		;
}

static __attribute__((noinline)) void wait_cond(void)
{
	pthread_mutex_lock(&mu);
	while (!released)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}

static void *state_main(void *arg)
{
	struct life *l = arg;
	l->start = now_ns();
	l->tid = (pid_t)syscall(SYS_gettid);
	if (!strcmp(l->name, "burn_cpu"))
		burn_cpu();
	else if (!strcmp(l->name, "sleep_loop"))
		sleep_loop();
	else if (!strcmp(l->name, "read_pipe"))
		read_pipe();
	else
		wait_cond();
	l->end = now_ns();
	return NULL;
}

static int run_states(double seconds)
{
	static struct life lives[4] = {{.name = "burn_cpu"},
				       {.name = "sleep_loop"},
				       {.name = "read_pipe"},
				       {.name = "wait_cond"}};
	pthread_t t[4];
	if (pipe(pipefd) != 0)
		return 1;
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, state_main, &lives[i]);
	struct timespec d = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &d, &d) == EINTR)
		;
	atomic_store(&stop, true);
	char c = 'x';
	if (write(pipefd[1], &c, 1) != 1)
		return 1;
	pthread_mutex_lock(&mu);
	released = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 4; i++)
		printf("thread %s %d %llu\n", lives[i].name, lives[i].tid,
		       (unsigned long long)(lives[i].end - lives[i].start));
	return 0;
}

/* ---------------------------------------------------------------- eintr */

enum call { C_POLL, C_EPOLL, C_NANOSLEEP, C_SELECT, C_READ, C_COUNT };
static const char *const call_names[C_COUNT] = {"poll", "epoll_wait", "nanosleep", "select",
						"read"};
static _Atomic uint64_t calls[C_COUNT], eintrs[C_COUNT];

static void *eintr_main(void *arg)
{
	enum call c = (enum call)(uintptr_t)arg;
	int p[2], ep = -1, sv[2] = {-1, -1};
	if (pipe(p) != 0)
		return NULL;
	if (c == C_EPOLL) {
		ep = epoll_create1(0);
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = p[0]};
		epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev);
	}
	if (c == C_READ) {
		socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
		struct timeval tv = {0, 2000};
		setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		int rc = 0;
		switch (c) {
		case C_POLL: {
			struct pollfd pfd = {.fd = p[0], .events = POLLIN};
			rc = poll(&pfd, 1, 2);
			break;
		}
		case C_EPOLL: {
			struct epoll_event ev;
			rc = epoll_wait(ep, &ev, 1, 2);
			break;
		}
		case C_NANOSLEEP: {
			struct timespec ts = {0, 1000 * 1000};
			rc = nanosleep(&ts, NULL);
			break;
		}
		case C_SELECT: {
			fd_set r;
			FD_ZERO(&r);
			FD_SET(p[0], &r);
			struct timeval tv = {0, 2000};
			rc = select(p[0] + 1, &r, NULL, NULL, &tv);
			break;
		}
		default: {
			char b;
			rc = (int)read(sv[0], &b, 1);
			if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				rc = 0;
			break;
		}
		}
		atomic_fetch_add(&calls[c], 1);
		if (rc < 0 && errno == EINTR)
			atomic_fetch_add(&eintrs[c], 1);
	}
	return NULL;
}

static int run_eintr(double seconds)
{
	pthread_t t[C_COUNT];
	for (int i = 0; i < C_COUNT; i++)
		pthread_create(&t[i], NULL, eintr_main, (void *)(uintptr_t)i);
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
	while (now_ns() < end) {
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	atomic_store(&stop, true);
	for (int i = 0; i < C_COUNT; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < C_COUNT; i++)
		printf("calls_%s %llu\neintr_%s %llu\n", call_names[i],
		       (unsigned long long)calls[i], call_names[i], (unsigned long long)eintrs[i]);
	return 0;
}

/* ---------------------------------------------------------------- longjmp */

static sigjmp_buf jump_env;
static atomic_int jumper_tid;

static void jump_handler(int sig)
{
	(void)sig;
	siglongjmp(jump_env, 1);
}

static __attribute__((noinline)) uint64_t after_jump(void)
{
	uint64_t t0 = now_ns();
	while (now_ns() - t0 < 1000000000ULL) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return now_ns() - t0;
}

static void *jumper_main(void *arg)
{
	(void)arg;
	atomic_store(&jumper_tid, (int)syscall(SYS_gettid));
	if (sigsetjmp(jump_env, 1) == 0) {
		char c;
		for (;;)
			if (read(pipefd[0], &c, 1) >= 0 || errno != EINTR)
				break;
		return NULL; /* not reached: the handler jumps out of the read */
	}
	uint64_t slept = after_jump();
	printf("thread after_jump %d %llu\n", atomic_load(&jumper_tid), (unsigned long long)slept);
	return NULL;
}

static int run_longjmp(void)
{
	struct sigaction sa = {.sa_handler = jump_handler};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	if (pipe(pipefd) != 0)
		return 1;
	pthread_t t;
	pthread_create(&t, NULL, jumper_main, NULL);
	struct timespec ts = {0, 200 * 1000 * 1000};
	nanosleep(&ts, NULL);
	pthread_kill(t, SIGUSR1);
	pthread_join(t, NULL);
	return 0;
}

/* ---------------------------------------------------------------- nested */

static void sleepy_handler(int sig)
{
	(void)sig;
	struct timespec ts = {0, 100 * 1000 * 1000};
	nanosleep(&ts, NULL);
}

static int run_nested(void)
{
	struct sigaction sa = {.sa_handler = sleepy_handler, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR2, &sa, NULL);
	if (pipe(pipefd) != 0)
		return 1;
	static struct life l = {.name = "read_pipe"};
	pthread_t t;
	pthread_create(&t, NULL, state_main, &l);
	struct timespec ts = {0, 300 * 1000 * 1000};
	nanosleep(&ts, NULL);
	pthread_kill(t, SIGUSR2);
	ts.tv_nsec = 700 * 1000 * 1000;
	nanosleep(&ts, NULL);
	char c = 'x';
	if (write(pipefd[1], &c, 1) != 1)
		return 1;
	pthread_join(t, NULL);
	printf("thread %s %d %llu\n", l.name, l.tid, (unsigned long long)(l.end - l.start));
	return 0;
}

/* ---------------------------------------------------------------- idle */

static __attribute__((noinline)) void idle_wait(void)
{
	pthread_mutex_lock(&mu);
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&cv, &mu, &ts);
	}
	pthread_mutex_unlock(&mu);
}

static void *idle_main(void *arg)
{
	(void)arg;
	idle_wait();
	return NULL;
}

static void *burn_main(void *arg)
{
	(void)arg;
	burn_cpu();
	return NULL;
}

static int run_idle(int n, double seconds)
{
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 64 * 1024);
	pthread_t *t = calloc((size_t)n + 1, sizeof(*t));
	if (!t)
		return 1;
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], &a, idle_main, NULL) != 0)
			return 1;
	pthread_create(&t[n], NULL, burn_main, NULL);
	struct timespec d = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &d, &d) == EINTR)
		;
	atomic_store(&stop, true);
	pthread_mutex_lock(&mu);
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (int i = 0; i <= n; i++)
		pthread_join(t[i], NULL);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("cpu_seconds %.6f\n", (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
					 (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	free(t);
	return 0;
}

static __attribute__((noinline)) uint64_t child_sleep(void)
{
	uint64_t t0 = now_ns();
	struct timespec ts = {2, 500 * 1000 * 1000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	return now_ns() - t0;
}

static __attribute__((noinline)) void *child_worker(void *arg)
{
	uint64_t t0 = now_ns();
	struct timespec ts = {0, 50 * 1000 * 1000};
	nanosleep(&ts, NULL);
	*(uint64_t *)arg = now_ns() - t0;
	return NULL;
}

static void *child_worker_nothing(void *arg)
{
	return arg;
}

static void *forker_main(void *arg)
{
	(void)arg;
	pid_t pid = fork();
	if (pid == 0) {
		uint64_t nothing = 0;
		pthread_t starter;
		pthread_create(&starter, NULL, child_worker_nothing, &nothing);
		pthread_join(starter, NULL);
		uint64_t slept = child_sleep();
		pthread_t t[4];
		uint64_t ns[4] = {0}, workers = 0;
		for (int i = 0; i < 4; i++)
			pthread_create(&t[i], NULL, child_worker, &ns[i]);
		for (int i = 0; i < 4; i++) {
			pthread_join(t[i], NULL);
			workers += ns[i];
		}
		printf("child %d %ld %llu %llu\n", (int)getpid(), (long)syscall(SYS_gettid),
		       (unsigned long long)slept, (unsigned long long)workers);
		print_wall_diagnostics();
		fflush(stdout);
		exit(0);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	return (void *)(intptr_t)(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1);
}

static int run_fork(void)
{
	pthread_t waiters[4], forker;
	static struct life lives[4];
	for (int i = 0; i < 4; i++) {
		lives[i].name = "wait_cond";
		pthread_create(&waiters[i], NULL, state_main, &lives[i]);
	}
	struct timespec ts = {0, 100 * 1000 * 1000};
	nanosleep(&ts, NULL); /* the waiters are in their waits */
	fflush(stdout);
	void *rc = NULL;
	pthread_create(&forker, NULL, forker_main, NULL);
	pthread_join(forker, &rc);
	pthread_mutex_lock(&mu);
	released = true;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (int i = 0; i < 4; i++)
		pthread_join(waiters[i], NULL);
	return (int)(intptr_t)rc;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "states";
	int rc;
	if (!strcmp(mode, "states"))
		rc = run_states(argc > 2 ? atof(argv[2]) : 3.0);
	else if (!strcmp(mode, "eintr"))
		rc = run_eintr(argc > 2 ? atof(argv[2]) : 3.0);
	else if (!strcmp(mode, "longjmp"))
		rc = run_longjmp();
	else if (!strcmp(mode, "nested"))
		rc = run_nested();
	else if (!strcmp(mode, "idle"))
		rc = run_idle(argc > 2 ? atoi(argv[2]) : 10, argc > 3 ? atof(argv[3]) : 3.0);
	else if (!strcmp(mode, "fork"))
		rc = run_fork();
	else {
		fprintf(stderr, "usage: wall_threads states|eintr|longjmp|nested|idle|fork ...\n");
		return 2;
	}
	print_wall_diagnostics();
	return rc;
}
