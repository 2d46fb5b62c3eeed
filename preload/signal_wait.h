/*
 * signal_wait.h - what preload's other wrappers use of signal_wait.c: a wait's
 * temporary signal mask that keeps the sampling signal blocked where the thread blocks
 * it (a pending one would end the wait with EINTR; see signal_wait.c).
 * Context: any application thread, signal handlers included (async-signal-safe).
 */
#ifndef DDPROF_PRELOAD_SIGNAL_WAIT_H
#define DDPROF_PRELOAD_SIGNAL_WAIT_H

#include <signal.h>

/* m, or *copy holding m plus the sampling signal when the calling thread blocks that
 * signal now and m does not. */
const sigset_t *signal_wait_keep_blocked(const sigset_t *m, sigset_t *copy);

#endif
