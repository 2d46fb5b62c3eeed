/*
 * mem_populate.c - see mem_populate.h.
 *
 * Context: normal context, any thread.
 */
#include "common/mem_populate.h"
#include "common/page_size.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* The kernel refused it once (EINVAL: too old): not asked again. Relaxed: a hint. */
static _Atomic bool unsupported;

static void populate(const void *p, size_t len, int advice)
{
	if (len < MEM_POPULATE_MIN || atomic_load_explicit(&unsupported, memory_order_relaxed))
		return;
	uintptr_t page = (uintptr_t)page_size();
	uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
	uintptr_t hi = ((uintptr_t)p + len) & ~(page - 1);
	if (hi <= lo)
		return;
	int saved = errno;
	if (madvise((void *)lo, hi - lo, advice) != 0 && errno == EINVAL)
		atomic_store_explicit(&unsupported, true, memory_order_relaxed);
	errno = saved;
}

void mem_populate(void *p, size_t len)
{
	populate(p, len, MADV_POPULATE_WRITE);
}

void mem_populate_read(const void *p, size_t len)
{
	populate(p, len, MADV_POPULATE_READ);
}
