/*
 * test_hijack.c - safe-point redirects from a CPU-time signal (agent/hijack.c).
 *
 * A thread-CPU timer at 1 kHz interrupts a deterministic computation; the handler
 * unwinds with DWARF, as the sampler does, and offers each sample to hijack_try. The
 * redirected function must run after the handler returned, with every signal blocked,
 * be able to create a thread, and leave the computation exactly as it was (every
 * result compared with one computed before, errno and the signal mask kept). Samples whose stack
 * holds a libc frame below the application's (a qsort comparator) or that did not unwind completely
 * must never redirect. A leaf right after the system call of one of libc's plain
 * wrappers, called straight from the application (read(2) in a loop), redirects while
 * the process never had a second thread, and never after; a call outside that list
 * (getppid) never does.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "agent/hijack.h"
#include "agent/modules.h"
#include "agent/stack_bounds.h"
#include "agent/unwind.h"
#include "check_run.h"

#define TEST_SIGNAL SIGPROF

static uintptr_t stack_hi;
static _Atomic int redirects_seen;  /* by the redirected function */
static _Atomic int in_handler_runs; /* ... that ran while the handler had not returned */
static _Atomic int unmasked_runs;   /* ... that ran with some signal deliverable */
static volatile sig_atomic_t handler_active;
static _Atomic int threads_made;
static _Atomic int threads_ran;
static int rearm_until;
/* The system-call tests: a redirect creates its thread only when its sample was in
 * libc, so that an earlier one in the loop's own code (a safe point too) leaves the
 * process single-threaded. */
static bool threads_only_from_libc;
static volatile sig_atomic_t redirect_was_libc;
static timer_t timer;

static void *thread_body(void *arg)
{
	atomic_fetch_add(&threads_ran, 1);
	return arg;
}

/* The redirected function: normal context on the interrupted thread. */
static void on_safe_point(void)
{
	if (handler_active)
		atomic_fetch_add(&in_handler_runs, 1);
	sigset_t cur;
	sigprocmask(SIG_BLOCK, NULL, &cur);
	if (!sigismember(&cur, TEST_SIGNAL) || !sigismember(&cur, SIGUSR1) ||
	    !sigismember(&cur, SIGTERM))
		atomic_fetch_add(&unmasked_runs, 1);
	errno = EIO; /* must not leak into the interrupted code */
	if (threads_only_from_libc && !redirect_was_libc) {
		if (atomic_fetch_add(&redirects_seen, 1) + 1 < rearm_until)
			hijack_arm();
		return;
	}
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, thread_body, NULL) == 0)
		atomic_fetch_add(&threads_made, 1);
	pthread_attr_destroy(&attr);
	if (atomic_fetch_add(&redirects_seen, 1) + 1 < rearm_until)
		hijack_arm();
}

static uintptr_t pcs[UNWIND_MAX_DEPTH];
static _Atomic int samples;
static uintptr_t libc_lo, libc_hi;	    /* libc's code */
static _Atomic int armed_libc_samples; /* samples with their leaf in libc, while armed */
static _Atomic int libc_redirects;     /* redirects of such samples */

static int find_libc(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (!info->dlpi_name || !strstr(info->dlpi_name, "libc.so"))
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			libc_lo = info->dlpi_addr + ph->p_vaddr;
			libc_hi = libc_lo + ph->p_memsz;
		}
	}
	return 1;
}

static void handler(int signo, siginfo_t *si, void *ucv)
{
	(void)signo;
	int saved = errno;
	handler_active = 1;
	const ucontext_t *uc = ucv;
	struct unwind_regs regs = {
	    .pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP],
	    .sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP],
	    .fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP],
	    .stack_hi = stack_hi,
	};
	uint32_t n = unwind_dwarf(&regs, pcs, UNWIND_MAX_DEPTH);
	atomic_fetch_add_explicit(&samples, 1, memory_order_relaxed);
	bool in_libc = pcs[0] >= libc_lo && pcs[0] < libc_hi;
	if (in_libc && hijack_armed())
		atomic_fetch_add_explicit(&armed_libc_samples, 1, memory_order_relaxed);
	redirect_was_libc = in_libc;
	if (hijack_try(ucv, si, pcs, n) && in_libc)
		atomic_fetch_add_explicit(&libc_redirects, 1, memory_order_relaxed);
	handler_active = 0;
	errno = saved;
}

static void setup(void)
{
	modules_init();
	ck_assert_int_gt(modules_refresh(), 3);
	struct stack_range r;
	ck_assert(stack_bounds_self(true, 0, &r));
	stack_hi = r.hi;
	dl_iterate_phdr(find_libc, NULL);
	ck_assert(libc_hi > libc_lo);
	ck_assert_int_eq(hijack_init(on_safe_point, NULL, NULL), 0);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(TEST_SIGNAL, &sa, NULL), 0);
	struct sigevent sev;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = TEST_SIGNAL;
	ck_assert_int_eq(timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer), 0);
	struct itimerspec its = {{0, 1000000}, {0, 1000000}};
	ck_assert_int_eq(timer_settime(timer, 0, &its, NULL), 0);
}

static double cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Keeps integer and vector registers live across the loop: a clobbered one changes the
 * result. */
__attribute__((noinline)) static double compute(unsigned seed, unsigned long *hash)
{
	double a = seed, b = 1.0, c = 0.5, d = 0.25;
	unsigned long h = seed * 0x9e3779b97f4a7c15UL, g = ~h;
	for (int i = 1; i < 200000; i++) {
		a = a * 0.999999 + 1.0 / i;
		b = b + a * 1e-7;
		c = c * 1.0000001 - d * 1e-8;
		d = d + c * 1e-9;
		h = (h ^ (unsigned long)i) * 0x100000001b3UL;
		g = (g + h) ^ (g >> 7);
	}
	*hash = h ^ g;
	return a + b + c + d;
}

/* Runs compute until cpu_budget seconds of CPU or stop() says so; returns how many
 * results differed from the reference (or found errno changed). */
static int run_checked(double cpu_budget, int (*stop)(void))
{
	unsigned long ref_hash[8];
	double ref[8];
	for (unsigned s = 0; s < 8; s++)
		ref[s] = compute(s, &ref_hash[s]);
	int bad = 0;
	sigset_t mask0, mask;
	sigprocmask(SIG_BLOCK, NULL, &mask0);
	double until = cpu_seconds() + cpu_budget;
	for (unsigned s = 0; cpu_seconds() < until && !(stop && stop()); s = (s + 1) % 8) {
		errno = 4242;
		unsigned long h;
		double v = compute(s, &h);
		if (v != ref[s] || h != ref_hash[s] || errno != 4242)
			bad++;
		sigprocmask(SIG_BLOCK, NULL, &mask);
		if (sigismember(&mask, SIGUSR1) != sigismember(&mask0, SIGUSR1) ||
		    sigismember(&mask, TEST_SIGNAL) != sigismember(&mask0, TEST_SIGNAL))
			bad++;
	}
	return bad;
}

static int enough_redirects(void)
{
	return atomic_load(&redirects_seen) >= rearm_until;
}

START_TEST(redirect_runs_outside_the_handler_and_resumes_exactly)
{
	setup();
	rearm_until = 40;
	ck_assert(hijack_arm());
	int bad = run_checked(20.0, enough_redirects);
	struct hijack_stats st;
	hijack_get_stats(&st);
	ck_assert_int_eq(bad, 0);
	ck_assert_msg(atomic_load(&redirects_seen) == rearm_until,
		      "%d redirects in %d samples (%llu refused)", atomic_load(&redirects_seen),
		      atomic_load(&samples), (unsigned long long)st.refused);
	ck_assert_uint_eq(st.redirects, (uint64_t)rearm_until);
	ck_assert_int_eq(atomic_load(&in_handler_runs), 0);
	ck_assert_int_eq(atomic_load(&unmasked_runs), 0);
	ck_assert_int_eq(atomic_load(&threads_made), rearm_until);
	for (int i = 0; i < 2000 && atomic_load(&threads_ran) < rearm_until; i++)
		usleep(1000);
	ck_assert_int_eq(atomic_load(&threads_ran), rearm_until);
	/* Still armed-then-disarmed state is consistent: no redirect after the last. */
	ck_assert(!hijack_armed());
}
END_TEST

static volatile unsigned long cmp_sink;

/* A comparator that burns CPU: samples land in application code called by libc. */
static int slow_cmp(const void *a, const void *b)
{
	unsigned long x = *(const unsigned *)a, y = *(const unsigned *)b;
	for (int i = 0; i < 2000; i++)
		cmp_sink += x * i + y;
	return (x > y) - (x < y);
}

START_TEST(no_redirect_below_a_libc_frame)
{
	setup();
	rearm_until = 1;
	ck_assert(hijack_arm());
	/* Refilled by memcpy, not by a loop here: application code outside qsort is a
	 * safe point (a sample in such a fill loop redirected about one run in ten). */
	unsigned v[4096], orig[4096];
	for (unsigned i = 0; i < 4096; i++)
		orig[i] = (i * 2654435761u) >> 7;
	double until = cpu_seconds() + 1.0;
	while (cpu_seconds() < until) {
		memcpy(v, orig, sizeof(v));
		qsort(v, 4096, sizeof(v[0]), slow_cmp);
	}
	struct hijack_stats st;
	hijack_get_stats(&st);
	ck_assert_int_eq(atomic_load(&redirects_seen), 0);
	/* 1 s of CPU at 1 kHz, checked at the kernel's 250 Hz tick: >= ~100 samples. */
	ck_assert_msg(st.refused >= 100, "only %llu samples refused",
		      (unsigned long long)st.refused);
	ck_assert(hijack_armed());
	/* The same process redirects at once outside qsort: the refusals were about the
	 * stack, not a broken set-up. */
	ck_assert_int_eq(run_checked(10.0, enough_redirects), 0);
	ck_assert_int_eq(atomic_load(&redirects_seen), 1);
}
END_TEST

START_TEST(no_redirect_when_disarmed_or_walk_incomplete)
{
	setup();
	rearm_until = 1;
	ck_assert_int_eq(run_checked(0.3, NULL), 0);
	ck_assert_int_eq(atomic_load(&redirects_seen), 0);
	/* Armed, but a walk that ended in [incomplete] or [truncated] is no safe point. */
	ck_assert(hijack_arm());
	ucontext_t uc;
	memset(&uc, 0, sizeof(uc));
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	uintptr_t incomplete[3] = {(uintptr_t)compute, (uintptr_t)compute + 1, PC_INCOMPLETE};
	uintptr_t truncated[3] = {(uintptr_t)compute, (uintptr_t)compute + 1, PC_TRUNCATED};
	ck_assert(!hijack_try(&uc, &si, incomplete, 3));
	ck_assert(!hijack_try(&uc, &si, truncated, 3));
	ck_assert(!hijack_try(&uc, &si, incomplete, 1));
	ck_assert(hijack_armed());
	hijack_disarm();
	ck_assert_int_eq(run_checked(0.3, NULL), 0);
	ck_assert_int_eq(atomic_load(&redirects_seen), 0);
}
END_TEST

static char zero_buf[4u << 20];

static int libc_redirected(void)
{
	return atomic_load(&libc_redirects) > 0;
}

/* read(2)s from /dev/zero (or, getppid: calls getppid) until rearm_until redirects,
 * stop() or cpu_budget seconds of CPU: the thread's CPU goes to the system calls, its
 * samples arrive as they return. Returns how many reads came back short or with errno
 * changed (a kernel that checks CPU timers at the tick queues the signal for the
 * return: a read is not cut short). */
static int call_loop(double cpu_budget, int (*stop)(void), bool getppid_calls)
{
	/* libc's read itself, called from this program's code: in an ASan build a call to
	 * read enters the sanitizer's interceptor first, and a system call returning into
	 * libasan is rightly no safe point (only a wrapper called straight from the
	 * program is). Without ASan this is the function read names. */
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(libc);
	ssize_t (*libc_read)(int, void *, size_t) =
	    (ssize_t(*)(int, void *, size_t))dlsym(libc, "read");
	ck_assert_ptr_nonnull(libc_read);
	dlclose(libc);
	int fd = open("/dev/zero", O_RDONLY);
	ck_assert_int_ge(fd, 0);
	pid_t parent = getppid();
	int bad = 0;
	double until = cpu_seconds() + cpu_budget;
	while (cpu_seconds() < until && atomic_load(&redirects_seen) < rearm_until &&
	       !(stop && stop())) {
		errno = 4242;
		if (getppid_calls) {
			for (int i = 0; i < 1000; i++)
				bad += getppid() != parent;
			continue;
		}
		ssize_t got = libc_read(fd, zero_buf, sizeof(zero_buf));
		bad += got != (ssize_t)sizeof(zero_buf) || errno != 4242;
	}
	/* Not close(): one of the listed wrappers, where a sample as it returns would be a
	 * redirect in libc after the loop under test (seen, rarely, on a loaded machine). */
	syscall(SYS_close, fd);
	return bad;
}

START_TEST(redirect_as_a_system_call_returns)
{
	setup();
	ck_assert(__libc_single_threaded);
	/* A sample in the loop's own code may come first (a safe point too): re-armed,
	 * without a thread, until one lands in libc. */
	rearm_until = 1000;
	threads_only_from_libc = true;
	ck_assert(hijack_arm());
	ck_assert_int_eq(call_loop(10.0, libc_redirected, false), 0);
	ck_assert_msg(atomic_load(&libc_redirects) == 1, "%d redirects, %d of them in libc, in %d samples",
		      atomic_load(&redirects_seen), atomic_load(&libc_redirects),
		      atomic_load(&samples));
	ck_assert_int_eq(atomic_load(&threads_made), 1);
	ck_assert_int_eq(atomic_load(&in_handler_runs), 0);
	ck_assert_int_eq(atomic_load(&unmasked_runs), 0);
	struct hijack_stats st;
	hijack_get_stats(&st);
	ck_assert_uint_eq(st.syscall_redirects, 1); /* every libc redirect was one */
}
END_TEST

START_TEST(no_redirect_at_a_system_call_once_a_thread_existed)
{
	setup();
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, thread_body, NULL), 0);
	pthread_join(t, NULL);
	ck_assert(!__libc_single_threaded);
	/* A sample in the loop's own code still redirects: re-armed each time, so that
	 * every libc sample meets an armed redirect. */
	rearm_until = 1000;
	ck_assert(hijack_arm());
	ck_assert_int_eq(call_loop(1.0, NULL, false), 0);
	ck_assert_int_eq(atomic_load(&libc_redirects), 0);
	struct hijack_stats st;
	hijack_get_stats(&st);
	ck_assert_uint_eq(st.syscall_redirects, 0);
	/* 1 s of CPU, checked at the kernel's 250 Hz tick. */
	ck_assert_msg(atomic_load(&armed_libc_samples) >= 100, "only %d armed samples in libc",
		      atomic_load(&armed_libc_samples));
}
END_TEST

/* getppid is a system call libc wraps, but not one of the listed I/O wrappers. */
START_TEST(no_redirect_at_a_system_call_outside_the_list)
{
	setup();
	ck_assert(__libc_single_threaded);
	rearm_until = 1000;
	threads_only_from_libc = true;
	ck_assert(hijack_arm());
	ck_assert_int_eq(call_loop(1.0, NULL, true), 0);
	ck_assert_int_eq(atomic_load(&libc_redirects), 0);
	ck_assert(__libc_single_threaded);
	ck_assert_msg(atomic_load(&armed_libc_samples) >= 100, "only %d armed samples in libc",
		      atomic_load(&armed_libc_samples));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hijack");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, redirect_runs_outside_the_handler_and_resumes_exactly);
	tcase_add_test(tc, no_redirect_below_a_libc_frame);
	tcase_add_test(tc, no_redirect_when_disarmed_or_walk_incomplete);
	tcase_add_test(tc, redirect_as_a_system_call_returns);
	tcase_add_test(tc, no_redirect_at_a_system_call_once_a_thread_existed);
	tcase_add_test(tc, no_redirect_at_a_system_call_outside_the_list);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
