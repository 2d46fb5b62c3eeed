/*
 * mask_view.c - the sampling signal's place in the mask the application set (see
 * mask_view.h).
 *
 * async-signal-safe: everything here runs in any thread, signal handlers included (the
 * interposed pthread_sigmask is async-signal-safe): one initial-exec TLS flag, raw
 * system calls, no libc call but on the start-up path.
 */
#include "agent/sample/mask_view.h"

#include <stdatomic.h>
#include <stdint.h>
#include <sys/utsname.h>
#include <time.h>

#include "common/raw_syscall.h"

/* Written at start-up (and by tests), read everywhere after: the constructor's
 * ordering (agent_running's release/acquire) publishes it. */
static _Atomic bool active;
static int view_signo;
static __thread bool tls_blocked __attribute__((tls_model("initial-exec")));

static unsigned number(const char **p)
{
	unsigned v = 0;
	while (**p >= '0' && **p <= '9' && v < 100000)
		v = v * 10 + (unsigned)(*(*p)++ - '0');
	return v;
}

bool mask_view_kernel_allows(const char *release)
{
	/* posix CPU timers handled in task work (x86 selects it from 5.10): the timer's
	 * signal is sent on the way back to user space, once the system call that was
	 * running has returned, so it never interrupts one (no EINTR, no short read). */
	const char *p = release;
	if (!p || *p < '0' || *p > '9')
		return false;
	unsigned major = number(&p);
	if (*p != '.')
		return false;
	p++;
	if (*p < '0' || *p > '9')
		return false;
	unsigned minor = number(&p);
	return major > 5 || (major == 5 && minor >= 10);
}

static uint64_t bit(void)
{
	return 1ULL << (view_signo - 1);
}

void mask_view_start(int signo)
{
	if (signo <= 0 || signo > 64)
		return;
	struct utsname u;
	if (raw_syscall(SYS_uname, (long)&u, 0, 0, 0) != 0 || !mask_view_kernel_allows(u.release))
		return;
	view_signo = signo;
	uint64_t cur = 0;
	if (raw_syscall(SYS_rt_sigprocmask, SIG_BLOCK, 0, (long)&cur, sizeof(cur)) != 0)
		return;
	if (cur & bit()) {
		/* Inherited blocked (a parent that blocked everything, then exec'd): blocked
		 * in the program's view, unblocked in the kernel. */
		tls_blocked = true;
		uint64_t one = bit();
		raw_syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&one, 0, sizeof(one));
	}
	atomic_store_explicit(&active, true, memory_order_relaxed);
}

void mask_view_reset(void)
{
	atomic_store_explicit(&active, false, memory_order_relaxed);
	tls_blocked = false;
}

/* async-signal-safe */
bool mask_view_active(void)
{
	return atomic_load_explicit(&active, memory_order_relaxed);
}

/* async-signal-safe */
int mask_view_signal(void)
{
	return mask_view_active() ? view_signo : 0;
}

/* async-signal-safe */
bool mask_view_blocked(void)
{
	return tls_blocked;
}

/* async-signal-safe */
void mask_view_set_blocked(bool blocked)
{
	/* Written only when it changes: after a fork the page may still be shared. */
	if (tls_blocked != blocked)
		tls_blocked = blocked;
}

/* async-signal-safe */
bool mask_view_hold(void)
{
	if (!mask_view_active() || !tls_blocked)
		return false;
	uint64_t one = bit();
	return raw_syscall(SYS_rt_sigprocmask, SIG_BLOCK, (long)&one, 0, sizeof(one)) == 0;
}

/* async-signal-safe */
bool mask_view_hold_for_exec(void)
{
	if (!mask_view_hold())
		return false;
	/* Pending signals survive exec: take the one the timer may have raised before it
	 * was blocked. (One raised in the few instructions between here and the system
	 * call stays pending; a profiled program handles it as it starts.) */
	uint64_t one = bit();
	struct timespec zero = {0, 0};
	for (int i = 0; i < 4; i++)
		if (raw_syscall(SYS_rt_sigtimedwait, (long)&one, 0, (long)&zero, sizeof(one)) < 0)
			break;
	return true;
}

/* async-signal-safe */
void mask_view_let_go(bool held)
{
	if (!held)
		return;
	uint64_t one = bit();
	raw_syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, (long)&one, 0, sizeof(one));
}
