/*
 * wall_hooks.c - the wall profile's hooks on blocking calls (see wall_hooks.h).
 *
 * The hooks in this file are async-signal-safe in what they add to the call: each calls
 * the function the application called (orig.*), in the context the application called
 * it from, then only lock-free, allocation-free code of ours (clock_gettime through the
 * vDSO, the thread's account, sampler_caller_*). Every hook is a function of its own
 * with a frame pointer, so that HOOK_CALLER_REGS reads its caller's state exactly.
 * Install, notify and the service run in normal context.
 */
#include "agent/wall/wall_hooks.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/sample/sampler.h"
#include "common/clock.h"
#include "common/fork_child.h"

/* The process's functions: what the hooks call. */
static struct {
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *,
		       const sigset_t *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*nanosleep)(const struct timespec *, struct timespec *);
	int (*clock_nanosleep)(clockid_t, int, const struct timespec *, struct timespec *);
	int (*usleep)(useconds_t);
	unsigned (*sleep)(unsigned);
	pid_t (*waitpid)(pid_t, int *, int);
	pid_t (*wait)(int *);
	int (*sem_wait)(sem_t *);
	int (*sem_timedwait)(sem_t *, const struct timespec *);
	int (*sem_clockwait)(sem_t *, clockid_t, const struct timespec *);
	int (*pthread_join)(pthread_t, void **);
	/* The fortified variants that _FORTIFY_SOURCE (the distributions' default) makes
	 * of read, recv, recvfrom, poll and ppoll when the buffer's size is known. */
	ssize_t (*__read_chk)(int, void *, size_t, size_t);
	ssize_t (*__recv_chk)(int, void *, size_t, size_t, int);
	ssize_t (*__recvfrom_chk)(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
	int (*__poll_chk)(struct pollfd *, nfds_t, int, size_t);
	int (*__ppoll_chk)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *,
			   size_t);
} orig;

/* async-signal-safe */
static inline uint64_t now_ns(void)
{
	return clock_now_ns(CLOCK_MONOTONIC);
}

/* async-signal-safe */
bool wall_hooks_record(uint64_t charge_ns, enum wall_state state, const struct unwind_regs *caller)
{
	struct sampler_caller c;
	if (!sampler_caller_begin(caller, &c))
		return false;
	const uint64_t values[2] = {1, charge_ns};
	sampler_caller_record_tagged(&c, PROFILE_WALL, values,
				     PC_WALL_STATE_BASE + (uintptr_t)state);
	sampler_caller_end(&c);
	wall_clock_count_sample(true);
	return true;
}

/* async-signal-safe. The body of every hook: the call, timed when this thread's account
 * takes it; errno as the call left it. */
#define WAIT_HOOK(type, state, call)                                                               \
	do {                                                                                       \
		if (!wall_clock_on() || own_thread_is_self())                                      \
			return (call);                                                             \
		uint64_t t0_ = now_ns();                                                           \
		struct wall_account *wa_ = WALL_WAIT_BEGIN(t0_, (state));                          \
		if (!wa_)                                                                          \
			return (call);                                                             \
		type rc_ = (call);                                                                 \
		int e_ = errno;                                                                    \
		uint64_t f_ = WALL_WAIT_CLOSE(wa_, t0_);                                           \
		WALL_WAIT_END(wa_, t0_, f_, now_ns(), (state));                                    \
		errno = e_;                                                                        \
		return rc_;                                                                        \
	} while (0)

/* Each hook: async-signal-safe in what it adds (see the top of this file). */
#define HOOK static __attribute__((noinline))

HOOK ssize_t hook_read(int fd, void *b, size_t n)
{
	WAIT_HOOK(ssize_t, WALL_READ, orig.read(fd, b, n));
}
HOOK ssize_t hook_readv(int fd, const struct iovec *v, int n)
{
	WAIT_HOOK(ssize_t, WALL_READV, orig.readv(fd, v, n));
}
HOOK ssize_t hook_recv(int fd, void *b, size_t n, int f)
{
	WAIT_HOOK(ssize_t, WALL_RECV, orig.recv(fd, b, n, f));
}
HOOK ssize_t hook_recvfrom(int fd, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l)
{
	WAIT_HOOK(ssize_t, WALL_RECVFROM, orig.recvfrom(fd, b, n, f, a, l));
}
HOOK ssize_t hook_recvmsg(int fd, struct msghdr *m, int f)
{
	WAIT_HOOK(ssize_t, WALL_RECVMSG, orig.recvmsg(fd, m, f));
}
HOOK ssize_t hook_write(int fd, const void *b, size_t n)
{
	WAIT_HOOK(ssize_t, WALL_WRITE, orig.write(fd, b, n));
}
HOOK ssize_t hook_writev(int fd, const struct iovec *v, int n)
{
	WAIT_HOOK(ssize_t, WALL_WRITEV, orig.writev(fd, v, n));
}
HOOK ssize_t hook_send(int fd, const void *b, size_t n, int f)
{
	WAIT_HOOK(ssize_t, WALL_SEND, orig.send(fd, b, n, f));
}
HOOK ssize_t hook_sendto(int fd, const void *b, size_t n, int f, const struct sockaddr *a,
			 socklen_t l)
{
	WAIT_HOOK(ssize_t, WALL_SENDTO, orig.sendto(fd, b, n, f, a, l));
}
HOOK ssize_t hook_sendmsg(int fd, const struct msghdr *m, int f)
{
	WAIT_HOOK(ssize_t, WALL_SENDMSG, orig.sendmsg(fd, m, f));
}
HOOK int hook_accept(int fd, struct sockaddr *a, socklen_t *l)
{
	WAIT_HOOK(int, WALL_ACCEPT, orig.accept(fd, a, l));
}
HOOK int hook_accept4(int fd, struct sockaddr *a, socklen_t *l, int f)
{
	WAIT_HOOK(int, WALL_ACCEPT4, orig.accept4(fd, a, l, f));
}
HOOK int hook_connect(int fd, const struct sockaddr *a, socklen_t l)
{
	WAIT_HOOK(int, WALL_CONNECT, orig.connect(fd, a, l));
}
HOOK int hook_poll(struct pollfd *p, nfds_t n, int t)
{
	WAIT_HOOK(int, WALL_POLL, orig.poll(p, n, t));
}
HOOK int hook_ppoll(struct pollfd *p, nfds_t n, const struct timespec *t, const sigset_t *s)
{
	WAIT_HOOK(int, WALL_PPOLL, orig.ppoll(p, n, t, s));
}
HOOK int hook_select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
	WAIT_HOOK(int, WALL_SELECT, orig.select(n, r, w, e, t));
}
HOOK int hook_pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,
		      const sigset_t *s)
{
	WAIT_HOOK(int, WALL_PSELECT, orig.pselect(n, r, w, e, t, s));
}
HOOK int hook_epoll_wait(int fd, struct epoll_event *ev, int n, int t)
{
	WAIT_HOOK(int, WALL_EPOLL_WAIT, orig.epoll_wait(fd, ev, n, t));
}
HOOK int hook_epoll_pwait(int fd, struct epoll_event *ev, int n, int t, const sigset_t *s)
{
	WAIT_HOOK(int, WALL_EPOLL_PWAIT, orig.epoll_pwait(fd, ev, n, t, s));
}
HOOK int hook_nanosleep(const struct timespec *req, struct timespec *rem)
{
	WAIT_HOOK(int, WALL_NANOSLEEP, orig.nanosleep(req, rem));
}
HOOK int hook_clock_nanosleep(clockid_t c, int f, const struct timespec *req, struct timespec *rem)
{
	WAIT_HOOK(int, WALL_CLOCK_NANOSLEEP, orig.clock_nanosleep(c, f, req, rem));
}
HOOK int hook_usleep(useconds_t us)
{
	WAIT_HOOK(int, WALL_USLEEP, orig.usleep(us));
}
HOOK unsigned hook_sleep(unsigned s)
{
	WAIT_HOOK(unsigned, WALL_SLEEP, orig.sleep(s));
}
HOOK pid_t hook_waitpid(pid_t p, int *st, int o)
{
	WAIT_HOOK(pid_t, WALL_WAITPID, orig.waitpid(p, st, o));
}
HOOK pid_t hook_wait(int *st)
{
	WAIT_HOOK(pid_t, WALL_WAIT, orig.wait(st));
}
HOOK int hook_sem_wait(sem_t *s)
{
	WAIT_HOOK(int, WALL_SEM_WAIT, orig.sem_wait(s));
}
HOOK int hook_sem_timedwait(sem_t *s, const struct timespec *t)
{
	WAIT_HOOK(int, WALL_SEM_TIMEDWAIT, orig.sem_timedwait(s, t));
}
HOOK int hook_sem_clockwait(sem_t *s, clockid_t c, const struct timespec *t)
{
	WAIT_HOOK(int, WALL_SEM_CLOCKWAIT, orig.sem_clockwait(s, c, t));
}
HOOK int hook_pthread_join(pthread_t t, void **r)
{
	WAIT_HOOK(int, WALL_PTHREAD_JOIN, orig.pthread_join(t, r));
}

#define ENTRY(name)                                                                                \
	{                                                                                          \
#name, (void *)hook_##name, (void **)&orig.name                                    \
	}
static struct got_patch_entry table[] = {
    ENTRY(read),	  ENTRY(readv),	       ENTRY(recv),
    ENTRY(recvfrom),	  ENTRY(recvmsg),      ENTRY(write),
    ENTRY(writev),	  ENTRY(send),	       ENTRY(sendto),
    ENTRY(sendmsg),	  ENTRY(accept),       ENTRY(accept4),
    ENTRY(connect),	  ENTRY(poll),	       ENTRY(ppoll),
    ENTRY(select),	  ENTRY(pselect),      ENTRY(epoll_wait),
    ENTRY(epoll_pwait),	  ENTRY(nanosleep),    ENTRY(clock_nanosleep),
    ENTRY(usleep),	  ENTRY(sleep),	       ENTRY(waitpid),
    ENTRY(wait),	  ENTRY(sem_wait),     ENTRY(sem_timedwait),
    ENTRY(sem_clockwait), ENTRY(pthread_join),
};
#define TABLE_N (sizeof(table) / sizeof(table[0]))

/* Read by every fork child's handler (installed): on the page it touches anyway. */
FORK_CHILD_DATA static struct hook_set set;

int wall_hooks_install(void)
{
	return hook_set_install(&set, table, TABLE_N);
}

FORK_CHILD_PATH bool wall_hooks_installed(void)
{
	return hook_set_installed(&set);
}

void wall_hooks_notify(void)
{
	hook_set_notify(&set);
}

bool wall_hooks_rescan_wanted(void)
{
	return hook_set_rescan_wanted(&set);
}

uint64_t wall_hooks_service(uint64_t now_ns)
{
	return hook_set_service(&set, now_ns);
}
