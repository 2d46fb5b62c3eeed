/*
 * mask_view.h - the sampling signal's place in the signal mask the application set.
 *
 * A thread that blocks every signal (the design where one thread sigwaits for the
 * process) would never receive its CPU timer's signal: no stack for all the CPU it
 * burns. Where the kernel raises a CPU timer's signal only on the way back to user
 * space, after the system call that ran ends (x86-64 from Linux 5.10, posix CPU timers
 * handled in task work), the signal cannot interrupt a system call, so the profiler
 * leaves it unblocked in the kernel and keeps, per thread, whether the application
 * blocked it: pthread_sigmask and sigprocmask (preload/signal_mask.c) report that bit
 * in the mask they return and never block the signal for real. Where the program's
 * mask outlives the process's code (exec, posix_spawn, system, popen), the signal is
 * blocked for real for the call, so the new program starts with the mask it would have
 * alone. On other kernels (active() false) the application's mask is the kernel's.
 * A thread's bit is inherited by the threads it creates (thread_start.h) and by fork
 * (TLS is copied). A vfork child shares its parent's TLS: its calls set the parent's bit
 * too, as they would set its mask if they shared it (the parent sets its mask again
 * after vfork in the programs that change it in the child: CPython's subprocess).
 * Not seen: raw rt_sigprocmask system calls (Go's runtime), glibc's own internal mask
 * changes (sigsetjmp/siglongjmp, ucontext), /proc/PID/status: they see the kernel's mask.
 * Context: any thread, signal handlers included; everything is async-signal-safe (one
 * initial-exec TLS flag, raw system calls).
 */
#ifndef DDPROF_AGENT_MASK_VIEW_H
#define DDPROF_AGENT_MASK_VIEW_H

#include <signal.h>
#include <stdbool.h>

/* Start-up, in the thread that runs the constructor, once the sampling signal is
 * installed: decides whether the kernel allows the view (release text of uname) and
 * takes the calling thread's kernel mask into it: a program started with the signal
 * blocked (a parent that blocked everything and exec'd) keeps it blocked in its view
 * and has it unblocked in the kernel. */
void mask_view_start(int signo);
/* Fork child: nothing to do (the TLS came with the thread); tests: off again. */
void mask_view_reset(void);

/* async-signal-safe. Whether the view is kept (kernel allows it, agent started; kept
 * once started, when sampling stops too: the kernel's mask lacks the signal). */
bool mask_view_active(void);
/* async-signal-safe. The signal the view is kept for, 0 when it is not. */
int mask_view_signal(void);
/* async-signal-safe. The calling thread's bit: the application blocked the signal. */
bool mask_view_blocked(void);
void mask_view_set_blocked(bool blocked);

/* async-signal-safe. For a call whose child or new image inherits the mask: when the
 * view says blocked, blocks the signal for real (returns true); mask_view_let_go
 * unblocks it again (a signal that came meanwhile is then handled, a sample like any
 * other). For exec: mask_view_hold_for_exec also takes a pending one, so that the new
 * program never finds it pending. */
bool mask_view_hold(void);
bool mask_view_hold_for_exec(void);
void mask_view_let_go(bool held);

/* Parsing, for tests: whether a kernel of this uname release raises CPU timers' signals
 * only on the way back to user space. */
bool mask_view_kernel_allows(const char *release);

#endif
