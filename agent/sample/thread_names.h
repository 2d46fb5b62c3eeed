/*
 * thread_names.h - a thread's name as the kernel holds it, and a snapshot of thread
 * names: tid -> name, sorted, immutable once made.
 *
 * Owns: reading a name (/proc/self/task/<tid>/comm), and the value the thread registry hands a
 * profile's encoder (threads_snapshot_names, agent/sample/threads.h), so that encoding reads no
 * live agent state and the registry may forget ended threads whenever it likes. Context: normal
 * context (it allocates and frees); lookups from any thread.
 */
#ifndef DDPROF_AGENT_SAMPLE_THREAD_NAMES_H
#define DDPROF_AGENT_SAMPLE_THREAD_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "agent/sample/threads.h" /* THREAD_NAME_MAX */

struct thread_name {
	pid_t tid;
	bool live; /* the registry's live entry (a tid reused by a live thread wins) */
	char name[THREAD_NAME_MAX];
};

struct thread_names {
	struct thread_name *v; /* sorted by tid, one per tid */
	size_t n;
};

/* Normal context: tid's name (comm) into out, NUL-terminated; false when it cannot be
 * read (the thread is gone). One open, read and close. */
bool thread_names_read(pid_t tid, char out[THREAD_NAME_MAX]);

/* Takes v (n entries, from big_malloc: common/big_alloc.h; any order, a tid possibly twice) into
 * out: sorted, one entry per tid, the live one where there are two. */
void thread_names_adopt(struct thread_names *out, struct thread_name *v, size_t n);
/* tid's name, or NULL (names may be NULL or empty). */
const char *thread_names_find(const struct thread_names *names, pid_t tid);
void thread_names_free(struct thread_names *names);

#endif
