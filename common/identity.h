/*
 * identity.h - whether the process still runs as the user and group it started as.
 *
 * A server started as root that switches its workers to an unprivileged user (nginx,
 * postgres) leaves them unable to write where the process could at start (a root-owned
 * output directory, root's unwind cache). What fails for that reason is counted, not
 * printed: the worker's stderr is the server's log, and nothing is wrong with its
 * configuration. Fork children inherit the start identity with the rest of the
 * process's memory.
 * Context: identity_note_start in the constructor; identity_changed in normal context,
 * any thread.
 */
#ifndef DDPROF_COMMON_IDENTITY_H
#define DDPROF_COMMON_IDENTITY_H

#include <stdbool.h>

/* Start-up: notes the effective user and group. */
void identity_note_start(void);

/* Whether the effective user or group differs from the one noted at start (false when
 * none was noted). */
bool identity_changed(void);

#endif
