/*
 * thread_names.c - thread names: read from /proc, and their snapshots (see
 * thread_names.h).
 * Context: normal context; lookups from any thread (the snapshot is immutable).
 */
#include "agent/sample/thread_names.h"
#include "common/sort.h"
#include "common/big_alloc.h"
#include "common/sys_io.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool thread_names_read(pid_t tid, char out[THREAD_NAME_MAX])
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d/comm", (int)tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = sys_read(fd, out, THREAD_NAME_MAX - 1);
	close(fd);
	if (n <= 0)
		return false;
	out[n] = 0;
	char *nl = strchr(out, '\n');
	if (nl)
		*nl = 0;
	return true;
}

static int by_tid(const void *a, const void *b)
{
	pid_t x = ((const struct thread_name *)a)->tid, y = ((const struct thread_name *)b)->tid;
	return (x > y) - (x < y);
}

/* By tid, the live entry of a tid first. */
static int by_tid_live_first(const void *a, const void *b)
{
	const struct thread_name *x = a, *y = b;
	int c = by_tid(a, b);
	return c ? c : (int)y->live - (int)x->live;
}

void thread_names_adopt(struct thread_names *out, struct thread_name *v, size_t n)
{
	sort_inplace(v, n, sizeof(*v), by_tid_live_first);
	size_t kept = 0;
	for (size_t i = 0; i < n; i++)
		if (kept == 0 || v[kept - 1].tid != v[i].tid)
			v[kept++] = v[i];
	out->v = v;
	out->n = kept;
}

const char *thread_names_find(const struct thread_names *names, pid_t tid)
{
	if (!names || !names->n)
		return NULL;
	struct thread_name key = {.tid = tid};
	const struct thread_name *hit = bsearch(&key, names->v, names->n, sizeof(key), by_tid);
	return hit ? hit->name : NULL;
}

void thread_names_free(struct thread_names *names)
{
	big_free(names->v);
	names->v = NULL;
	names->n = 0;
}
