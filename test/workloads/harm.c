/*
 * harm.c - programs that a profiler injected into them must not change: each mode does
 * something an agent could break, and prints what it saw.
 *
 * usage: harm MODE [ARGS]
 *  strict SECONDS       computes, polls once (a profiler may start a thread then), enters
 *                       seccomp strict mode, computes again, writes "strict ok" and ends
 *                       with the exit system call (the only way strict mode allows).
 *  allowlist N SECONDS  forks N children one after another; each installs an allow-list
 *                       seccomp filter (OpenSSH's privilege-separation shape: everything
 *                       not listed kills the process), computes SECONDS, writes a line
 *                       and exits; prints "children N ok K signaled S (sig list)".
 *  sigdfl SECONDS       forks a child that resets every signal to SIG_DFL (daemon hygiene
 *                       before exec) and computes SECONDS; prints "child exit E signal S".
 *  sigprof HZ SECONDS   installs its own SIGPROF handler and setitimer(ITIMER_PROF) at HZ,
 *                       computes SECONDS; prints "sigprof N cpu_seconds C" (N: signals its
 *                       handler got) and "handler_seen H" (what sigaction reads back).
 *  rawsig SECONDS       computes SECONDS/2 polling between batches (a profiler starts its
 *                       thread), then installs a SIGPROF handler with the rt_sigaction
 *                       system call (not libc) and computes SECONDS/2 more; prints
 *                       "rawsig early E late L": timer signals (SI_TIMER) its handler got
 *                       in the first and the second half of that second part.
 *  unshare SECONDS [P]  computes SECONDS (P=1: polling between batches, so that a
 *                       profiler starts its thread), then unshare(CLONE_NEWUSER); prints
 *                       "unshare rc R errno E threads T" (T: threads after the call).
 *  probe SECONDS        computes with polls, makes libseccomp's probe calls (strict mode
 *                       with a flag: EINVAL; a TSYNC filter without a program: EFAULT),
 *                       computes SECONDS more with polls; prints "probe E1 E2 threads T".
 *  status               prints "status S threads T" (ddprof_status(), or 1 without the
 *                       agent, and the process's threads).
 *  rawfork SECONDS      computes SECONDS polling between batches (a profiler starts its
 *                       thread), then makes a child with _Fork() and one with the clone
 *                       system call (neither runs pthread_atfork handlers), each of which
 *                       calls exit(0); prints "rawfork fork_ms F clone_ms C status S T":
 *                       how long each child took from its creation to its reaping.
 *  stalejoin SECONDS    starts a joinable thread (8 MiB stack) that ends at once and is
 *                       not joined, computes SECONDS, forks; the child dlopens a library
 *                       (a profiler may start a thread then), and joins the parent's
 *                       ended thread with a 2 s deadline, as a library destructor joining
 *                       its own thread does; prints "stalejoin rc R ms M threads T" (R:
 *                       the join's result, 0 at once when no thread took the ended one's
 *                       descriptor; T: the child's threads after the dlopen).
 *  endings SECONDS      three children that end with _exit: a vfork child at once, a fork
 *                       child from its SIGUSR1 handler after computing SECONDS, and a
 *                       fork child after computing SECONDS; prints "endings status A B C
 *                       pids P Q R ms X Y Z" (wait statuses, pids, creation to reaping).
 *  deaths SECONDS       three children: one reads SIGTERM's action, computes SECONDS
 *                       (polling: a profiler starts its thread) and raises SIGTERM; one
 *                       ignores SIGHUP and raises it; one sets SIGTERM to a handler and
 *                       back to SIG_DFL, computes and raises SIGTERM; prints "deaths
 *                       status A B C pids P Q R dfl D caught K" (D: 1 when the first
 *                       read SIG_DFL with no flags; K: 1 when the kernel said it caught
 *                       SIGTERM).
 * Every mode's compute loop is harm_burn. Prints "cpu_seconds C" last (process CPU).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double thread_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double process_cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t harm_burn(uint64_t x)
{
	for (int i = 0; i < 20000; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}

/* Computes for SECONDS of this thread's CPU; poll_each: a zero-timeout poll between
 * batches. */
static void compute(double seconds, int poll_each)
{
	double end = thread_cpu() + seconds;
	uint64_t x = 1;
	while (thread_cpu() < end) {
		for (int i = 0; i < 8; i++)
			x = harm_burn(x);
		if (poll_each)
			poll(NULL, 0, 0);
	}
	sink = x;
}

static void say(const char *s)
{
	ssize_t n = write(1, s, strlen(s));
	(void)n;
}

static int mode_strict(double seconds)
{
	/* Strict mode allows no clock read: the second half is a batch count measured
	 * in the first. */
	compute(seconds / 2, 1);
	uint64_t x = 1, batches = 0;
	double t1 = thread_cpu(), t2;
	while ((t2 = thread_cpu()) - t1 < 0.05)
		x = harm_burn(x), batches++;
	batches = (uint64_t)((double)batches * (seconds / 2) / (t2 - t1));
	fflush(stdout);
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) {
		printf("strict unavailable %d\n", errno);
		return 3;
	}
	for (uint64_t i = 0; i < batches; i++)
		x = harm_burn(x);
	sink = x;
	say("strict ok\n");
	syscall(SYS_exit, 0);
	return 0;
}

#define ALLOW(name)                                                                                \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_##name, 0, 1),                                    \
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

static int install_allowlist(void)
{
	struct sock_filter f[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	    ALLOW(read),
	    ALLOW(write),
	    ALLOW(brk),
	    ALLOW(mmap),
	    ALLOW(munmap),
	    ALLOW(futex),
	    ALLOW(clock_gettime),
	    ALLOW(rt_sigprocmask),
	    ALLOW(rt_sigreturn),
	    ALLOW(getpid),
	    ALLOW(close),
	    ALLOW(exit),
	    ALLOW(exit_group),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

static int mode_allowlist(int n, double seconds)
{
	compute(0.3, 1);
	int ok = 0, signaled = 0;
	char sigs[256] = "";
	for (int i = 0; i < n; i++) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid < 0)
			return 3;
		if (pid == 0) {
			if (install_allowlist() != 0)
				_exit(5);
			compute(seconds, 0);
			say("child done\n");
			exit(0);
		}
		int st;
		waitpid(pid, &st, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
			ok++;
		if (WIFSIGNALED(st)) {
			signaled++;
			size_t l = strlen(sigs);
			snprintf(sigs + l, sizeof(sigs) - l, "%s%d", l ? "," : "", WTERMSIG(st));
		}
	}
	printf("children %d ok %d signaled %d (%s)\n", n, ok, signaled, sigs);
	return 0;
}

static int mode_sigdfl(double seconds)
{
	compute(0.2, 1);
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return 3;
	if (pid == 0) {
		for (int s = 1; s < NSIG; s++)
			if (s != SIGKILL && s != SIGSTOP)
				signal(s, SIG_DFL);
		compute(seconds, 0);
		exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	printf("child exit %d signal %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
	       WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	return 0;
}

static volatile long app_sigprof;

static void on_sigprof(int sig)
{
	(void)sig;
	app_sigprof++;
}

static int mode_sigprof(int hz, double seconds)
{
	struct sigaction sa, back;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigprof;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGPROF, &sa, NULL) != 0)
		return 3;
	sigaction(SIGPROF, NULL, &back);
	struct itimerval it = {{0, 1000000 / hz}, {0, 1000000 / hz}};
	if (setitimer(ITIMER_PROF, &it, NULL) != 0)
		return 4;
	compute(seconds, 1);
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_PROF, &off, NULL);
	printf("sigprof %ld handler_seen %d\n", app_sigprof, back.sa_handler == on_sigprof);
	return 0;
}

/* The rt_sigaction system call's own struct, and a restorer of our own: what a runtime
 * that bypasses libc (Go's) does. */
struct kernel_sigaction {
	void *handler;
	unsigned long flags;
	void (*restorer)(void);
	uint64_t mask;
};
void harm_restore_rt(void);
__asm__(".text\n"
	".globl harm_restore_rt\n"
	"harm_restore_rt:\n"
	"mov $15, %rax\n" /* rt_sigreturn */
	"syscall\n");

static volatile int raw_phase;
static volatile long raw_timer_signals[2];

static void on_raw(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (si->si_code == SI_TIMER)
		raw_timer_signals[raw_phase]++;
}

static int mode_rawsig(double seconds)
{
	compute(seconds / 2, 1);
	struct kernel_sigaction k = {(void *)on_raw, SA_SIGINFO | SA_RESTART | 0x04000000,
				     harm_restore_rt, 0};
	if (syscall(SYS_rt_sigaction, SIGPROF, &k, NULL, 8) != 0)
		return 3;
	compute(seconds / 4, 1);
	raw_phase = 1;
	compute(seconds / 4, 1);
	printf("rawsig early %ld late %ld\n", raw_timer_signals[0], raw_timer_signals[1]);
	return 0;
}

static int count_threads(void);

static int mode_unshare(double seconds, int polls)
{
	compute(seconds, polls);
	int rc = unshare(CLONE_NEWUSER);
	int err = rc ? errno : 0;
	printf("unshare rc %d errno %d threads %d\n", rc, err, count_threads());
	return 0;
}

static int mode_probe(double seconds)
{
	compute(0.3, 1);
	long r1 = syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, 1, NULL);
	int e1 = r1 ? errno : 0;
	long r2 = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, NULL);
	int e2 = r2 ? errno : 0;
	compute(seconds, 1);
	printf("probe %d %d threads %d\n", e1, e2, count_threads());
	return 0;
}

static int count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static int mode_status(void)
{
	compute(0.2, 1);
	int (*status)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ddprof_status");
	printf("status %d threads %d\n", status ? status() : 1, count_threads());
	return 0;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

extern pid_t _Fork(void);

static int mode_rawfork(double seconds)
{
	compute(seconds, 1);
	fflush(stdout);
	double ms[2];
	int st[2];
	for (int i = 0; i < 2; i++) {
		double t0 = now_ms();
		pid_t pid = i == 0 ? _Fork() : (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
		if (pid < 0)
			return 3;
		if (pid == 0)
			exit(0);
		waitpid(pid, &st[i], 0);
		ms[i] = now_ms() - t0;
	}
	printf("rawfork fork_ms %.1f clone_ms %.1f status %d %d\n", ms[0], ms[1], st[0], st[1]);
	return 0;
}

static void exit_from_handler(int sig)
{
	(void)sig;
	_exit(5);
}

/* Three children that end with _exit: a vfork child at once (it shares our memory), a
 * fork child from its SIGUSR1 handler after computing, and a fork child that computes
 * and calls it itself. */
static int mode_endings(double seconds)
{
	fflush(stdout);
	int st[3] = {-1, -1, -1};
	pid_t pids[3];
	double ms[3];
	for (int i = 0; i < 3; i++) {
		double t0 = now_ms();
		pid_t pid = i == 0 ? vfork() : fork();
		if (pid < 0)
			return 3;
		if (pid == 0) {
			if (i == 0)
				_exit(3);
			compute(seconds, 0);
			if (i == 1) {
				signal(SIGUSR1, exit_from_handler);
				raise(SIGUSR1);
			}
			_exit(7);
		}
		pids[i] = pid;
		waitpid(pid, &st[i], 0);
		ms[i] = now_ms() - t0;
	}
	printf("endings status %d %d %d pids %d %d %d ms %.1f %.1f %.1f\n", st[0], st[1], st[2],
	       (int)pids[0], (int)pids[1], (int)pids[2], ms[0], ms[1], ms[2]);
	return 0;
}

static void ignore_it(int sig)
{
	(void)sig;
}

/* Three children that meet SIGTERM or SIGHUP: one that reads SIGTERM's action (SIG_DFL),
 * computes and raises it; one that ignores SIGHUP and raises it (it lives on); one that
 * sets a SIGTERM handler, sets SIG_DFL back, computes and raises SIGTERM. */
static int mode_deaths(double seconds)
{
	fflush(stdout);
	int st[3] = {-1, -1, -1};
	pid_t pids[3];
	int dfl_seen = -1;
	int pipefd[2];
	if (pipe(pipefd) != 0)
		return 3;
	for (int i = 0; i < 3; i++) {
		pid_t pid = fork();
		if (pid < 0)
			return 3;
		if (pid == 0) {
			if (i == 0) {
				struct sigaction old;
				char seen[2] = {sigaction(SIGTERM, NULL, &old) == 0 &&
							old.sa_handler == SIG_DFL &&
							old.sa_flags == 0
						    ? '1'
						    : '0',
						'0'};
				/* Whether the kernel says SIGTERM is caught (SigCgt, bit 14). */
				FILE *st = fopen("/proc/self/status", "r");
				char line[256];
				while (st && fgets(line, sizeof(line), st))
					if (!strncmp(line, "SigCgt:", 7))
						seen[1] =
						    strtoull(line + 7, NULL, 16) & (1ULL << 14)
							? '1'
							: '0';
				if (st)
					fclose(st);
				if (write(pipefd[1], seen, 2) != 2)
					_exit(4);
				compute(seconds, 1);
				raise(SIGTERM);
			} else if (i == 1) {
				signal(SIGHUP, SIG_IGN);
				raise(SIGHUP);
				_exit(0);
			} else {
				signal(SIGTERM, ignore_it);
				signal(SIGTERM, SIG_DFL);
				compute(seconds, 1);
				raise(SIGTERM);
			}
			_exit(5); /* not reached: the signal's default action ends it */
		}
		pids[i] = pid;
		waitpid(pid, &st[i], 0);
	}
	char c[2] = {'?', '?'};
	int caught = -1;
	if (read(pipefd[0], c, 2) == 2) {
		dfl_seen = c[0] == '1';
		caught = c[1] == '1';
	}
	printf("deaths status %d %d %d pids %d %d %d dfl %d caught %d\n", st[0], st[1], st[2],
	       (int)pids[0], (int)pids[1], (int)pids[2], dfl_seen, caught);
	return 0;
}

static void *end_at_once(void *arg)
{
	return arg;
}

static int mode_stalejoin(double seconds)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 8u << 20);
	pthread_t ended;
	if (pthread_create(&ended, &attr, end_at_once, NULL) != 0)
		return 3;
	pthread_attr_destroy(&attr);
	compute(seconds, 1); /* the thread has long ended (its tid cleared by the kernel) */
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return 3;
	if (pid == 0) {
		void *h = dlopen("libutil.so.1", RTLD_NOW);
		int threads = count_threads();
		double t0 = now_ms();
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 2;
		int rc = pthread_timedjoin_np(ended, NULL, &dl);
		printf("stalejoin rc %d ms %.1f threads %d dlopen %s\n", rc, now_ms() - t0, threads,
		       h ? "ok" : "failed");
		fflush(stdout);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	return st == 0 ? 0 : 4;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: harm MODE [ARGS]\n");
		return 2;
	}
	const char *m = argv[1];
	double a2 = argc > 2 ? atof(argv[2]) : 0, a3 = argc > 3 ? atof(argv[3]) : 0;
	int rc;
	if (!strcmp(m, "strict"))
		return mode_strict(a2);
	else if (!strcmp(m, "allowlist"))
		rc = mode_allowlist((int)a2, a3);
	else if (!strcmp(m, "sigdfl"))
		rc = mode_sigdfl(a2);
	else if (!strcmp(m, "sigprof"))
		rc = mode_sigprof((int)a2, a3);
	else if (!strcmp(m, "rawsig"))
		rc = mode_rawsig(a2);
	else if (!strcmp(m, "unshare"))
		rc = mode_unshare(a2, (int)a3);
	else if (!strcmp(m, "probe"))
		rc = mode_probe(a2);
	else if (!strcmp(m, "rawfork"))
		rc = mode_rawfork(a2);
	else if (!strcmp(m, "deaths"))
		rc = mode_deaths(a2);
	else if (!strcmp(m, "endings"))
		rc = mode_endings(a2);
	else if (!strcmp(m, "stalejoin"))
		rc = mode_stalejoin(a2);
	else if (!strcmp(m, "status"))
		rc = mode_status();
	else
		return 2;
	printf("cpu_seconds %.6f\n", process_cpu());
	return rc;
}
