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
 * with sigwait for the SIGUSR2 it raises. Each line is deterministic.
 * usage: sigblock_threads SECONDS
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
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

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
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

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
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
	return 0;
}
