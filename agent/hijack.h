/*
 * hijack.h - run a function in normal context on a thread interrupted by the sampling
 * signal, at a safe point (the technique of Go's asynchronous preemption).
 *
 * Why: a process needs an uploader thread only once it has samples to upload, and most
 * short programs (shell commands) and most children of a pre-fork server or a fork
 * storm never have one. Starting the thread in the constructor or the fork handler
 * costs each a pthread_create, malloc's set-up, and the copy-on-write faults of the
 * thread's malloc arena at every later fork (~0.3 ms of /bin/true's start-up, ~50 us
 * per fork on these VMs). The process starts it later instead, from normal context: at
 * exit, pthread_create or dlopen. A single-threaded compute program gives none of
 * those, only samples; the handler then redirects the thread through this module when
 * the sample shows a safe point. Before any unwind table exists, the walks that show
 * one read the start-up modules' CFI from memory (agent/boot_cfi.h).
 *
 * Safe point: the unwinder reached a root frame, and no frame but the outermost ones
 * (_start, __libc_start_main, start_thread, clone3, our thread start) lies in code that
 * may hold a lock pthread_create needs or that our function takes: libc, ld.so, the
 * vdso, the module that provides malloc, and our own library (hijack_init's own_code).
 * Interrupted there, the thread holds none of those locks, so calling pthread_create is
 * as safe as if the application had called it at that instruction. One exception, in a
 * process that never had a second thread: a leaf right after the syscall instruction of
 * one of libc's plain wrappers (read, write, poll...: agent/syscall_wrappers.h), called
 * straight from the application's code (a program whose CPU goes to system calls is
 * sampled only as they return).
 *
 * Redirect: the handler copies the kernel's signal frame (registers, signal mask, FPU
 * and vector state) to a private buffer and points the interrupted context at an
 * assembly entry on a private stack. After the handler returns, the thread runs the
 * function there, then calls rt_sigreturn on the copy: the kernel restores every
 * register and the mask exactly as they were at the interruption.
 *
 * Context: hijack_init in the constructor; hijack_arm/disarm in normal context;
 * hijack_armed and hijack_try in the signal handler (async-signal-safe); the function
 * runs in normal context on the interrupted thread, every signal blocked.
 */
#ifndef DDPROF_AGENT_HIJACK_H
#define DDPROF_AGENT_HIJACK_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * Normal context, start-up. fn: what a redirect runs (it must not log: the thread may
 * hold the application's stdio locks). own_code: an address in the caller's library,
 * whose frames are unsafe too (NULL: none). malloc_addr: malloc as the process resolves
 * it (dlsym(RTLD_DEFAULT)). Maps the private stack and records the unsafe code ranges
 * of the modules loaded now. Returns 0, or -errno when redirects are unavailable: no
 * memory, a shadow stack (a redirect would break it), or an executable that defines
 * malloc itself (every stack passes through it).
 */
int hijack_init(void (*fn)(void), const void *own_code, const void *malloc_addr);

/* Normal context: the next sample at a safe point redirects. False when unavailable. */
bool hijack_arm(void);
void hijack_disarm(void);

/* async-signal-safe */
bool hijack_armed(void);

/*
 * async-signal-safe. ucv/si: the handler's arguments; pcs[0..n): the interrupted
 * thread's stack as unwind_dwarf wrote it (leaf first). When armed and the stack is a
 * safe point, disarms, rewrites ucv for the redirect and returns true.
 */
bool hijack_try(void *ucv, const siginfo_t *si, const uintptr_t *pcs, uint32_t n);

struct hijack_stats {
	uint64_t redirects; /* redirects that ran the function */
	uint64_t refused;   /* samples taken while armed that were not safe points */
	uint64_t syscall_redirects; /* of the redirects, at a system call's return in libc */
};
void hijack_get_stats(struct hijack_stats *out);

#endif
