/*
 * sigblock_threads.c - a program whose threads block every signal (the design where one
 * thread waits for the process's signals), asking libc what is pending and waiting for
 * signals on full sets, while its threads burn CPU: what it sees must be what it sees
 * alone (no profiler's signal pending, taken, or ending a wait).
 *
 * main blocks every signal, starts two threads that burn CPU for SECONDS and then ask
 * sigpending, sigtimedwait (full set, no wait), a signalfd on a full set (non-blocking
 * read) and sigsuspend (empty mask: woken by the SIGUSR1 main sends it after 100 ms);
 * then main waits with sigwaitinfo on a full set for the SIGALRM alarm(1) sends, and
 * with sigwait for the SIGUSR2 it raises. Each thread reports its mask through
 * pthread_sigmask and sigprocmask, after blocking everything, after unblocking SIGPROF
 * and SIGUSR1, and after setting a full mask again; main then starts itself with `mask`
 * through posix_spawn, system, popen (without the profiler: env -u LD_PRELOAD) and
 * fork+execv, and each child prints the mask it started with. Each line is
 * deterministic.
 * usage: sigblock_threads SECONDS | sigblock_threads mask HOW
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double seconds;
static volatile uint64_t sink;
static volatile sig_atomic_t usr1_seen;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static __attribute__((noinline)) void blocked_burn(double s)
{
	double end = cpu_now() + s;
	uint64_t x = 1;
	while (cpu_now() < end)
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	sink += x;
}

static void on_usr1(int sig)
{
	(void)sig;
	usr1_seen = 1;
}

static void describe_pending(char *buf, size_t len)
{
	sigset_t p;
	sigpending(&p);
	size_t n = (size_t)snprintf(buf, len, "pending:");
	for (int s = 1; s < 65 && n < len; s++)
		if (sigismember(&p, s) == 1)
			n += (size_t)snprintf(buf + n, len - n, " %d", s);
}

static void mask_hex(char *buf, size_t len, const sigset_t *m)
{
	unsigned long long bits = 0;
	for (int s = 1; s < 65; s++)
		if (sigismember(m, s) == 1)
			bits |= 1ULL << (s - 1);
	snprintf(buf, len, "%016llx", bits);
}

/* The mask as both calls report it, one line. */
static void print_masks(const char *who, const char *when)
{
	sigset_t a, b;
	sigemptyset(&a);
	sigemptyset(&b);
	int ra = pthread_sigmask(SIG_BLOCK, NULL, &a);
	int rb = sigprocmask(SIG_SETMASK, NULL, &b);
	char ha[32], hb[32];
	mask_hex(ha, sizeof(ha), &a);
	mask_hex(hb, sizeof(hb), &b);
	pthread_mutex_lock(&out);
	printf("%s: mask %s: pthread_sigmask %d %s, sigprocmask %d %s\n", who, when, ra, ha, rb,
	       hb);
	pthread_mutex_unlock(&out);
}

static void mask_steps(const char *who)
{
	print_masks(who, "as started");
	sigset_t two, all;
	sigemptyset(&two);
	sigaddset(&two, SIGPROF);
	sigaddset(&two, SIGUSR1);
	sigset_t old;
	pthread_sigmask(SIG_UNBLOCK, &two, &old);
	char h[32];
	mask_hex(h, sizeof(h), &old);
	print_masks(who, "SIGPROF and SIGUSR1 unblocked");
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	mask_hex(h, sizeof(h), &old);
	pthread_mutex_lock(&out);
	printf("%s: sigprocmask SIG_SETMASK old %s\n", who, h);
	pthread_mutex_unlock(&out);
	print_masks(who, "all blocked again");
}

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	char who[32];
	snprintf(who, sizeof(who), "worker %d", id);
	mask_steps(who);
	blocked_burn(seconds);
	char pend[256];
	describe_pending(pend, sizeof(pend));
	sigset_t all;
	sigfillset(&all);
	struct timespec zero = {0, 0};
	int got = sigtimedwait(&all, NULL, &zero);
	int got_errno = errno;
	int fd = signalfd(-1, &all, SFD_NONBLOCK | SFD_CLOEXEC);
	struct signalfd_siginfo si;
	ssize_t r = fd >= 0 ? read(fd, &si, sizeof(si)) : -2;
	int r_errno = errno;
	if (fd >= 0)
		close(fd);
	pthread_mutex_lock(&out);
	printf("worker %d: %s\n", id, pend);
	printf("worker %d: sigtimedwait %d %s\n", id, got, got < 0 ? strerror(got_errno) : "");
	printf("worker %d: signalfd read %zd %s\n", id, r,
	       r < 0 ? strerror(r_errno) : "(a signal)");
	pthread_mutex_unlock(&out);
	return NULL;
}

static void *suspender(void *arg)
{
	(void)arg;
	blocked_burn(seconds / 2);
	sigset_t none;
	sigemptyset(&none);
	int rc = sigsuspend(&none); /* SIGUSR1, sent by main, ends it */
	pthread_mutex_lock(&out);
	printf("suspender: sigsuspend %d, woken by SIGUSR1: %d\n", rc, (int)usr1_seen);
	pthread_mutex_unlock(&out);
	return NULL;
}

/* A child started with the parent's mask: the mask it starts with. */
static int child_mask(const char *how)
{
	sigset_t m;
	sigemptyset(&m);
	sigprocmask(SIG_SETMASK, NULL, &m);
	char h[32];
	mask_hex(h, sizeof(h), &m);
	printf("child %s: mask %s\n", how, h);
	return 0;
}

static void start_children(const char *self)
{
	char cmd[8192];
	extern char **environ;
	pid_t pid;
	char *argv_spawn[] = {(char *)self, "mask", "posix_spawn", NULL};
	if (posix_spawn(&pid, self, NULL, NULL, argv_spawn, environ) == 0)
		waitpid(pid, NULL, 0);
	snprintf(cmd, sizeof(cmd), "'%s' mask system", self);
	fflush(stdout);
	if (system(cmd) != 0)
		printf("system failed\n");
	snprintf(cmd, sizeof(cmd), "exec env -u LD_PRELOAD '%s' mask popen-unprofiled", self);
	FILE *p = popen(cmd, "r");
	if (p) {
		char line[256];
		while (fgets(line, sizeof(line), p))
			fputs(line, stdout);
		pclose(p);
	}
	pid = fork();
	if (pid == 0) {
		char *argv_exec[] = {(char *)self, "mask", "fork-execv", NULL};
		execv(self, argv_exec);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 2 && strcmp(argv[1], "mask") == 0)
		return child_mask(argv[2]);
	seconds = argc > 1 ? atof(argv[1]) : 1.0;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_t w[2], s;
	for (int i = 0; i < 2; i++)
		pthread_create(&w[i], NULL, worker, (void *)(intptr_t)i);
	pthread_create(&s, NULL, suspender, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(w[i], NULL);
	pthread_kill(s, SIGUSR1);
	pthread_join(s, NULL);
	/* SIGALRM in 50 ms (alarm's second would only slow the test). */
	struct itimerval it = {{0, 0}, {0, 50000}};
	setitimer(ITIMER_REAL, &it, NULL);
	siginfo_t info;
	int sig = sigwaitinfo(&all, &info);
	printf("main: sigwaitinfo %d (SIGALRM %d)\n", sig, SIGALRM);
	raise(SIGUSR2);
	int got = 0;
	int rc = sigwait(&all, &got);
	printf("main: sigwait %d -> %d (SIGUSR2 %d)\n", rc, got, SIGUSR2);
	char pend[256];
	describe_pending(pend, sizeof(pend));
	printf("main: %s\n", pend);
	print_masks("main", "at the end");
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		start_children(self);
	}
	return 0;
}
