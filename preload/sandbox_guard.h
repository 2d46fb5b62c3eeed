/*
 * sandbox_guard.h - seccomp filters installed through libc (see sandbox_guard.c).
 * Context: sandbox_guard_init from the constructor.
 */
#ifndef DDPROF_PRELOAD_SANDBOX_GUARD_H
#define DDPROF_PRELOAD_SANDBOX_GUARD_H

/* Resolves the next prctl and syscall. Normal context, once. */
void sandbox_guard_init(void);

#endif
