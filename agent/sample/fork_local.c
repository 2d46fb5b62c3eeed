/*
 * fork_local.c - the fork-local page (see fork_local.h).
 *
 * Context: start-up only (the constructor, before any thread of ours exists); never a
 * signal handler.
 */
#include "agent/sample/fork_local.h"

#include <stdint.h>
#include <sys/mman.h>

#define FORK_LOCAL_BYTES 4096
#define FORK_LOCAL_ALIGN 64

/* Read by fork_local_owns in a fork child: on the page it touches anyway. */
FORK_CHILD_DATA static uint8_t *page; /* NULL until mapped; MAP_FAILED when it cannot be */
static size_t page_used;	      /* ordinary memory: a child keeps the parent's value */

FORK_CHILD_PATH void fork_local_mutex_after_fork(pthread_mutex_t *m)
{
	if (!fork_local_owns(m)) {
		/* Same as pthread_mutex_init(m, NULL), without a call into libc's code
		 * (common/raw_syscall.h says why). */
		pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
		*m = fresh;
	}
}

FORK_CHILD_PATH bool fork_local_owns(const void *p)
{
	const uint8_t *b = p;
	return page && page != MAP_FAILED && b >= page && b < page + FORK_LOCAL_BYTES;
}

void *fork_local_or(void *fallback, size_t size)
{
	void *p = fork_local_alloc(size);
	return p ? p : fallback;
}

void *fork_local_alloc(size_t size)
{
	if (!page) {
		void *p = mmap(NULL, FORK_LOCAL_BYTES, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		/* Linux >= 4.14. Without it the page would be copied on write like any
		 * other: no gain, so callers keep their ordinary memory instead. */
		if (p != MAP_FAILED && madvise(p, FORK_LOCAL_BYTES, MADV_WIPEONFORK) != 0) {
			munmap(p, FORK_LOCAL_BYTES);
			p = MAP_FAILED;
		}
		page = p;
	}
	size = (size + FORK_LOCAL_ALIGN - 1) & ~(size_t)(FORK_LOCAL_ALIGN - 1);
	if (page == MAP_FAILED || size > FORK_LOCAL_BYTES - page_used)
		return NULL;
	void *out = page + page_used;
	page_used += size;
	return out;
}
