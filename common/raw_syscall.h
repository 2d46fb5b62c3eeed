/*
 * raw_syscall.h - system calls made inline, without libc's wrappers.
 *
 * Owns: raw_syscall() and raw_syscall6(), nothing else. Our code uses them instead of
 * libc's syscall(), which the preload layer interposes (preload/sandbox_guard.c), and
 * on the fork child's common path: a new process pays a first-touch fault for each page
 * of libc's code it runs, and libc's syscall(), timer_create() and errno each sit on a
 * page the child would otherwise not touch. Returns the kernel's answer: >= 0, or a
 * negative errno; errno is left alone. x86-64 only, as the rest of the agent (its CFI
 * tables and signal frames). Context: any, including signal handlers.
 */
#ifndef DDPROF_COMMON_RAW_SYSCALL_H
#define DDPROF_COMMON_RAW_SYSCALL_H

#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
/* async-signal-safe */
static inline long raw_syscall(long nr, long a1, long a2, long a3, long a4)
{
	long ret;
	register long r10 __asm__("r10") = a4; /* the kernel's fourth argument register */
	/* The syscall instruction clobbers rcx (return address) and r11 (flags). */
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

/* async-signal-safe. The same with six arguments. */
static inline long raw_syscall6(long nr, long a1, long a2, long a3, long a4, long a5, long a6)
{
	long ret;
	register long r10 __asm__("r10") = a4;
	register long r8 __asm__("r8") = a5;
	register long r9 __asm__("r9") = a6;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}

/* async-signal-safe. The calling thread's signal mask, as pthread_sigmask (the kernel's
 * 64 signals: the first word of a sigset_t), without the interposed pthread_sigmask
 * (preload/signal_mask.c: it keeps the sampling signal out of the kernel's mask).
 * Returns 0 or a negative errno. */
static inline long raw_sigmask(int how, const void *set, void *old)
{
	return raw_syscall(SYS_rt_sigprocmask, how, (long)set, (long)old, 8);
}
#else
#error "libddprof supports x86-64 only"
#endif

#endif
