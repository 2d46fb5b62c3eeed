/*
 * sys_io.h - the few I/O system calls the profiler makes, with libc's semantics (-1
 * and errno on failure), made inline.
 *
 * Why not libc's read, write, poll...: the library exports wrappers of those names
 * (preload/entry_points.c) and the dynamic linker binds the library's own calls to its
 * own exports, so a call from here would run the application-facing wrapper, a layer
 * above. These are single system calls with nothing of libc's to add: they are not
 * cancellation points, which suits code that an application thread runs on our
 * behalf (a log line, an exit flush). x86-64, as raw_syscall.h.
 * Context: any thread, normal context (errno is set, as libc's would).
 */
#ifndef DDPROF_COMMON_SYS_IO_H
#define DDPROF_COMMON_SYS_IO_H

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include "common/raw_syscall.h"

/* libc's convention from the kernel's: -1 and errno, or the result. */
static inline long sys_result(long rc)
{
	if (rc < 0) {
		errno = (int)-rc;
		return -1;
	}
	return rc;
}

static inline ssize_t sys_read(int fd, void *buf, size_t n)
{
	return sys_result(raw_syscall(SYS_read, fd, (long)buf, (long)n, 0));
}

static inline ssize_t sys_write(int fd, const void *buf, size_t n)
{
	return sys_result(raw_syscall(SYS_write, fd, (long)buf, (long)n, 0));
}

static inline ssize_t sys_pread(int fd, void *buf, size_t n, off_t off)
{
	return sys_result(raw_syscall(SYS_pread64, fd, (long)buf, (long)n, (long)off));
}

static inline int sys_poll(struct pollfd *fds, nfds_t n, int timeout_ms)
{
	return (int)sys_result(raw_syscall(SYS_poll, (long)fds, (long)n, timeout_ms, 0));
}

static inline int sys_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	return (int)sys_result(raw_syscall(SYS_connect, fd, (long)sa, (long)len, 0));
}

static inline ssize_t sys_recv(int fd, void *buf, size_t n, int flags)
{
	return sys_result(raw_syscall6(SYS_recvfrom, fd, (long)buf, (long)n, flags, 0, 0));
}

static inline ssize_t sys_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	return sys_result(raw_syscall(SYS_sendmsg, fd, (long)msg, flags, 0));
}

static inline int sys_nanosleep(const struct timespec *req, struct timespec *rem)
{
	return (int)sys_result(raw_syscall(SYS_nanosleep, (long)req, (long)rem, 0, 0));
}

#endif
