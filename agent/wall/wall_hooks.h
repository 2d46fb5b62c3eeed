/*
 * wall_hooks.h - the functions the application's blocking calls reach while wall-clock
 * profiling is on.
 *
 * Owns: one hook per blocking libc entry point the wall profile times (read, readv,
 * recv, recvfrom, recvmsg, write, writev, send, sendto, sendmsg, accept, accept4,
 * connect, poll, ppoll, select, pselect, epoll_wait, epoll_pwait, nanosleep,
 * clock_nanosleep, usleep, sleep, waitpid, wait, sem_wait, sem_timedwait,
 * sem_clockwait, pthread_join, and the fortified __read_chk, __recv_chk,
 * __recvfrom_chk, __poll_chk, __ppoll_chk), the process's originals they call, and the recording of
 * a wall sample at a hook's caller (for these hooks and the lock hooks', which time
 * mutex and condition waits: agent/lock/lock_hooks.h). Like the other hooks they are
 * reached through the modules' GOT slots (agent/alloc/hook_set.h), never through
 * exported symbols: with the wall profile off no call passes through us. A hook calls
 * the original with the application's arguments and returns what it returned, errno
 * included; around it, two vDSO clock reads and the thread's account
 * (agent/wall/wall_clock.h). Calls libc makes internally (stdio's read, getaddrinfo's
 * poll) reach no hook: their time counts as running, charged at the thread's next CPU
 * sample.
 * Context: the hooks are async-signal-safe in what they add (no lock of ours, no
 * allocation, no system call): they run wherever the application blocks. Install,
 * notify and the service run in normal context.
 */
#ifndef DDPROF_AGENT_WALL_WALL_HOOKS_H
#define DDPROF_AGENT_WALL_WALL_HOOKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/alloc/hook_set.h"
#include "agent/sample/app_signals.h"
#include "agent/unwind/unwind.h"
#include "agent/wall/wall_clock.h"

/* Start-up, after sampling is enabled. 0 or a negative errno (nothing is hooked). */
int wall_hooks_install(void);
bool wall_hooks_installed(void);
void wall_hooks_notify(void);
bool wall_hooks_rescan_wanted(void);
uint64_t wall_hooks_service(uint64_t now_ns);

/* async-signal-safe. Records a wall sample of charge_ns in state at the stack of a
 * hook's caller (caller: HOOK_CALLER_REGS in the hook); false when it cannot (sampling
 * off, or this thread already recording: an application's signal handler that blocks
 * while a hook of this thread unwinds). */
bool wall_hooks_record(uint64_t charge_ns, enum wall_state state, const struct unwind_regs *caller);

/* async-signal-safe. Begins a wait at t0 in state (wall_clock_wait_begin with the hook
 * caller's registers). A macro: HOOK_CALLER_REGS must be read in the hook's own frame.
 * The _AT form takes them read already (caller: a const struct unwind_regs *), for a
 * hook whose waiting part is a function of its own (lock_hooks.c); the frame that marks
 * the account busy is then that function's, which the wait is inside of. */
#define WALL_WAIT_BEGIN_AT(t0, state, caller)                                                      \
	wall_clock_wait_begin((t0), (state), (caller), (uintptr_t)__builtin_frame_address(0),      \
			      app_signals_in_handler)
#define WALL_WAIT_BEGIN(t0, state)                                                                 \
	({                                                                                         \
		struct unwind_regs wr_ = HOOK_CALLER_REGS();                                       \
		WALL_WAIT_BEGIN_AT((t0), (state), &wr_);                                           \
	})

/* async-signal-safe. Closes the wait a hook began with WALL_WAIT_BEGIN (a: its result,
 * NULL: nothing to do) as soon as the call returned, before the hook reads its end time
 * (so that a charge by the host, which read its own time before, never passes that
 * end): where what is left to charge starts (wall_clock_wait_close). */
#define WALL_WAIT_CLOSE(a, t0) ((a) ? wall_clock_wait_close((a), (t0)) : (t0))

/* async-signal-safe. Ends the wait at t1 (from: WALL_WAIT_CLOSE's), recording a sample
 * when one is due. A macro: HOOK_CALLER_REGS must be read in the hook's own frame (the
 * _AT form: read already, as WALL_WAIT_BEGIN_AT's). */
#define WALL_WAIT_END_AT(a, t0, from, t1, state, caller)                                           \
	do {                                                                                       \
		struct wall_account *a_ = (a);                                                     \
		if (a_) {                                                                          \
			uint64_t c_ = wall_clock_waited(a_, (t0), (from), (t1));                   \
			if (__builtin_expect(c_ != 0, 0) &&                                        \
			    !wall_hooks_record(c_, (state), (caller)))                             \
				/* Not recorded (nested in a recording): kept. */                  \
				atomic_fetch_add_explicit(&a_->pending, c_, memory_order_relaxed); \
			/* Pairs with the sampling handler's read of busy, on this thread. */      \
			atomic_signal_fence(memory_order_seq_cst);                                 \
			a_->busy = 0;                                                              \
		}                                                                                  \
	} while (0)
/* The registers are read only when a sample is due (the compound literal is evaluated
 * where it appears, in the hook's frame). */
#define WALL_WAIT_END(a, t0, from, t1, state)                                                      \
	WALL_WAIT_END_AT((a), (t0), (from), (t1), (state), &HOOK_CALLER_REGS())

#endif
