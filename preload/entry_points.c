/*
 * entry_points.c - libc's blocking calls, interposed to start the uploader thread late.
 *
 * Why: a process needs its uploader thread only once it has samples to upload, and most
 * short programs and most children of a pre-fork server never have any. The thread is
 * started from a context where the application itself called us, never from the
 * sampling handler: its pthread_create, dlopen, exit (preload.c), and here, the first
 * blocking libc call it makes after its first sample (a worker of a pre-fork server
 * forked from a single-threaded master, which never creates a thread or loads a
 * library, calls accept, poll or read for each request). A program that computes and
 * calls none of these uploads at its exit only.
 * The same calls map memory a profile asked for (agent/store/profiles.h) in a process whose
 * thread has not started. Cost when nothing is pending: two relaxed loads per call (the
 * uploader's; the agent is asked only on the cold path, entry_slow). The thread is
 * not started from inside one of the application's signal handlers (read and write are
 * async-signal-safe, and a handler may interrupt any lock), nor in a thread under a
 * seccomp filter we saw installed, nor in one of the profiler's own threads.
 * Each wrapper calls the next definition (RTLD_NEXT: another interposer's, or libc's),
 * resolved by a constructor of this file; a call before it resolves the function then.
 * Context: application threads, normal context or their signal handlers.
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "preload/next_def.h"
#include "preload/signal_wait.h"
#include "uploader/uploader.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

/* Normal context or an application's handler: the uploader thread, if this process
 * waits for one and has samples, and memory the active profile asked for, from here
 * when this call is a safe place for them (a mapping, a thread). */
static __attribute__((noinline, cold)) void entry_slow(void)
{
	if (!agent_may_work_here())
		return;
	int saved = errno;
	uploader_app_call();
	errno = saved;
}

static inline void entry_hook(void)
{
	if (__builtin_expect(uploader_app_call_wanted(), 0))
		entry_slow();
}

/* One wrapper: ret name(params), forwarding args; err is returned (errno ENOSYS) if the
 * next definition cannot be found. */
#define ENTRY(ret, name, err, params, args)                                                        \
	static ret(*next_##name) params;                                                           \
	DDPROF_EXPORT ret name params                                                              \
	{                                                                                          \
		entry_hook();                                                                      \
		ret(*f) params = (ret(*) params)next_def((void **)&next_##name, #name);            \
		if (!f) {                                                                          \
			errno = ENOSYS;                                                            \
			return err;                                                                \
		}                                                                                  \
		return f args;                                                                     \
	}

/* As ENTRY, for a wait given a temporary signal mask, its last parameter m
 * (preload/signal_wait.h: the sampling signal kept blocked where the thread blocks it). */
#define ENTRY_MASKED(ret, name, err, params, args)                                                 \
	static ret(*next_##name) params;                                                           \
	DDPROF_EXPORT ret name params                                                              \
	{                                                                                          \
		entry_hook();                                                                      \
		ret(*f) params = (ret(*) params)next_def((void **)&next_##name, #name);            \
		if (!f) {                                                                          \
			errno = ENOSYS;                                                            \
			return err;                                                                \
		}                                                                                  \
		sigset_t copy_;                                                                    \
		m = signal_wait_keep_blocked(m, &copy_);                                           \
		return f args;                                                                     \
	}

/* clang-format off */
ENTRY(ssize_t, read, -1, (int fd, void *buf, size_t n), (fd, buf, n))
ENTRY(ssize_t, write, -1, (int fd, const void *buf, size_t n), (fd, buf, n))
ENTRY(ssize_t, readv, -1, (int fd, const struct iovec *iov, int n), (fd, iov, n))
ENTRY(ssize_t, writev, -1, (int fd, const struct iovec *iov, int n), (fd, iov, n))
ENTRY(ssize_t, pread, -1, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off))
ENTRY(ssize_t, pread64, -1, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off))
ENTRY(ssize_t, pwrite, -1, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off))
ENTRY(ssize_t, pwrite64, -1, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off))
ENTRY(ssize_t, recv, -1, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags))
ENTRY(ssize_t, recvfrom, -1, (int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG a,
      socklen_t *alen), (fd, buf, n, flags, a, alen))
ENTRY(ssize_t, recvmsg, -1, (int fd, struct msghdr *m, int flags), (fd, m, flags))
ENTRY(ssize_t, send, -1, (int fd, const void *buf, size_t n, int flags), (fd, buf, n, flags))
ENTRY(ssize_t, sendto, -1, (int fd, const void *buf, size_t n, int flags,
      __CONST_SOCKADDR_ARG a, socklen_t alen), (fd, buf, n, flags, a, alen))
ENTRY(ssize_t, sendmsg, -1, (int fd, const struct msghdr *m, int flags), (fd, m, flags))
ENTRY(int, accept, -1, (int fd, __SOCKADDR_ARG a, socklen_t *alen), (fd, a, alen))
ENTRY(int, accept4, -1, (int fd, __SOCKADDR_ARG a, socklen_t *alen, int flags),
      (fd, a, alen, flags))
ENTRY(int, connect, -1, (int fd, __CONST_SOCKADDR_ARG a, socklen_t alen), (fd, a, alen))
ENTRY(int, poll, -1, (struct pollfd *fds, nfds_t n, int timeout), (fds, n, timeout))
ENTRY_MASKED(int, ppoll, -1, (struct pollfd *fds, nfds_t n, const struct timespec *t,
      const sigset_t *m), (fds, n, t, m))
ENTRY(int, select, -1, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t),
      (n, r, w, e, t))
ENTRY_MASKED(int, pselect, -1, (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,
      const sigset_t *m), (n, r, w, e, t, m))
ENTRY(int, epoll_wait, -1, (int fd, struct epoll_event *ev, int n, int timeout),
      (fd, ev, n, timeout))
ENTRY_MASKED(int, epoll_pwait, -1, (int fd, struct epoll_event *ev, int n, int timeout,
      const sigset_t *m), (fd, ev, n, timeout, m))
ENTRY(int, nanosleep, -1, (const struct timespec *req, struct timespec *rem), (req, rem))
ENTRY(int, clock_nanosleep, ENOSYS, (clockid_t c, int flags, const struct timespec *req,
      struct timespec *rem), (c, flags, req, rem))
ENTRY(int, usleep, -1, (useconds_t us), (us))
ENTRY(unsigned, sleep, 0, (unsigned s), (s))
ENTRY(pid_t, waitpid, -1, (pid_t pid, int *status, int options), (pid, status, options))
ENTRY(pid_t, wait4, -1, (pid_t pid, int *status, int options, struct rusage *ru),
      (pid, status, options, ru))
/* clang-format on */

/* Resolved by a constructor of its own, whatever the configuration (a disabled agent
 * still interposes these), rather than at a first call that might come from a signal
 * handler (dlsym is not async-signal-safe). */
__attribute__((constructor)) static void entry_points_resolve(void)
{
	static const struct {
		const char *name;
		void **slot;
	} fns[] = {
#define SLOT(n) {#n, (void **)&next_##n}
	    SLOT(read),
	    SLOT(write),
	    SLOT(readv),
	    SLOT(writev),
	    SLOT(pread),
	    SLOT(pread64),
	    SLOT(pwrite),
	    SLOT(pwrite64),
	    SLOT(recv),
	    SLOT(recvfrom),
	    SLOT(recvmsg),
	    SLOT(send),
	    SLOT(sendto),
	    SLOT(sendmsg),
	    SLOT(accept),
	    SLOT(accept4),
	    SLOT(connect),
	    SLOT(poll),
	    SLOT(ppoll),
	    SLOT(select),
	    SLOT(pselect),
	    SLOT(epoll_wait),
	    SLOT(epoll_pwait),
	    SLOT(nanosleep),
	    SLOT(clock_nanosleep),
	    SLOT(usleep),
	    SLOT(sleep),
	    SLOT(waitpid),
	    SLOT(wait4),
#undef SLOT
	};
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		next_def(fns[i].slot, fns[i].name);
}
