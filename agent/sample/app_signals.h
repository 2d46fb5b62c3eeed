/*
 * app_signals.h - the application's own signal dispositions, kept as it set them.
 *
 * Owns: the table of the actions the application set through libc (sigaction, signal
 * and their relatives, interposed by preload/signal_api.c), and what the kernel holds on
 * their behalf:
 *  - The sampling signal: the kernel always holds the sampler's handler. The action the
 *    application sets for that number is virtual: it reads back what it set, signals of
 *    that number that are not our timers' (kill, its own setitimer or timer_create) get
 *    the action it chose, its handler with its mask and flags, SIG_IGN, or the default
 *    action (SIG_DFL: a SIGPROF from kill still terminates), and our timer signals never
 *    reach it.
 *  - Every other signal the application handles: the kernel holds a small dispatcher
 *    with the application's flags and mask, which calls its handler with the arguments
 *    the kernel gave. The dispatcher only counts, per thread, that an application
 *    handler runs: the profiler never starts work from inside one (app_signals_in_handler).
 *    SIG_DFL and SIG_IGN are set in the kernel as they are, except:
 *  - Watched signals (app_signals_watch_deaths: SIGTERM, SIGINT, SIGHUP) while the
 *    application leaves them at SIG_DFL: the kernel holds the dispatcher, the action is a
 *    virtual SIG_DFL, and a delivery first calls the death hook (the process's final
 *    profile), then takes the default action as the kernel would have: SIG_DFL
 *    restored and the signal raised again, so the process dies of it. A disposition it
 *    inherited as SIG_IGN (nohup) is left alone.
 * A reader gets the application's action back unchanged, unless something bypassed libc
 * (a raw rt_sigaction system call, or libc's internal resets): then the kernel's action
 * is the truth and is returned. app_signals_sampling_intact tells whether the sampler's
 * handler is still installed.
 * Context: app_signals_sigaction from any application thread, signal handlers included
 * (sigaction is async-signal-safe): writers are serialized by a spin lock held with
 * every signal blocked, readers in handlers use a sequence count. Everything marked
 * async-signal-safe here is.
 */
#ifndef DDPROF_AGENT_APP_SIGNALS_H
#define DDPROF_AGENT_APP_SIGNALS_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

typedef void (*app_signals_handler_fn)(int, siginfo_t *, void *);

/* async-signal-safe. sigaction as libc defines it (0, or -1 with errno), as the
 * application sees it. */
int app_signals_sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* Normal context, start-up: installs handler in the kernel for signo, with every signal
 * blocked while it runs and SA_RESTART; the application's action so far becomes its
 * virtual one. 0 or a negative errno. */
int app_signals_install_sampling(int signo, app_signals_handler_fn handler);

/* async-signal-safe. From the sampling handler, for a signal of its number that none of
 * our timers sent: gives it the application's action. uc: the handler's ucontext. */
void app_signals_deliver(int sig, siginfo_t *si, void *uc);

/* Normal context. Whether the calling thread runs inside one of the application's
 * signal handlers (one installed through libc after we loaded). May say true for a
 * thread that left a handler with siglongjmp and runs deeper than the handler did:
 * callers treat true as "not now". */
bool app_signals_in_handler(void);

/* Any thread. Whether the kernel still holds the sampling handler (false: the
 * application replaced it without libc, e.g. a raw rt_sigaction). */
bool app_signals_sampling_intact(void);

/* Fork child, its only thread, pid its id (0: unknown, the table is then not used in
 * this process): the table is the child's. */
void app_signals_after_fork_child(pid_t pid);

/* async-signal-safe. Called in the thread a watched signal is delivered to, before the
 * process dies of it; must return (it may wait, bounded). */
typedef void (*app_signals_death_fn)(int sig);

/* Normal context, start-up, after app_signals_install_sampling: watches each signal of
 * sigs (n of them) whose action is SIG_DFL now, and whenever the application sets
 * SIG_DFL for it later; hook runs before the process dies of one. */
void app_signals_watch_deaths(const int *sigs, int n, app_signals_death_fn hook);

/* Counters: signals of the sampling number that ran the application's handler. */
uint64_t app_signals_forwarded(void);

#endif
