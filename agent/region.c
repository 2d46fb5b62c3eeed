/*
 * region.c - lock-free bump allocator (see region.h).
 *
 * This file is async-signal-safe: region_alloc and region_used run inside the sampling
 * signal handler. region_init/reset/destroy run on the uploader thread only.
 *
 * Why one reservation instead of a list of blocks (Go's traceRegionAlloc): a fixed
 * reservation makes allocation a single CAS with no mmap in the handler, and the
 * ceiling is simply its size. MAP_NORESERVE plus lazily touched pages means a profile
 * that holds 1 MiB of stacks costs 1 MiB of RSS, not the ceiling.
 */
#include "region.h"
#include "common/page_size.h"
#include "agent/fork_local.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int region_init(struct region *r, size_t ceiling)
{
	memset(r, 0, sizeof(*r));
	void *p = mmap(NULL, ceiling, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	/* A fork child starts with empty profiles: not sharing the parent's pages makes
	 * fork cheaper (no page tables to copy, no write-protection of the parent's pages,
	 * so no copy-on-write faults and TLB shoot-downs in the parent afterwards).
	 * MADV_WIPEONFORK (Linux >= 4.14) gives the child the reservation zero-filled at
	 * the same address, with no system call in the child; MADV_DONTFORK is the
	 * fallback, and then region_after_fork maps it again. */
	r->wipe_on_fork = madvise(p, ceiling, MADV_WIPEONFORK) == 0;
	if (!r->wipe_on_fork)
		madvise(p, ceiling, MADV_DONTFORK);
	r->base = p;
	r->ceiling = ceiling;
	r->page_size = page_size();
	atomic_init(&r->used, 0);
	atomic_init(&r->refused, 0);
	return 0;
}

/* async-signal-safe: a fork child's first sample may set up its pair (agent/profile.c);
 * only its MADV_DONTFORK branch, never taken there, makes system calls. */
FORK_CHILD_PATH int region_after_fork(struct region *r)
{
	if (!r->base)
		return 0;
	if (r->wipe_on_fork) { /* inherited, zero-filled: nothing is in use */
		atomic_store_explicit(&r->used, 0, memory_order_relaxed);
		atomic_store_explicit(&r->refused, 0, memory_order_relaxed);
		return 0;
	}
	/* The reservation was not inherited (MADV_DONTFORK): map it again at the same
	 * address, so pointers to the region stay meaningful. */
	void *p = mmap(r->base, r->ceiling, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED && errno == EEXIST) {
		region_reset(r); /* inherited after all (kernel without DONTFORK): reuse */
		return 0;
	}
	if (p != r->base) {
		int err = p == MAP_FAILED ? errno : EEXIST;
		if (p != MAP_FAILED)
			munmap(p, r->ceiling);
		r->base = NULL; /* region_alloc refuses everything: samples are dropped */
		r->ceiling = 0;
		atomic_store_explicit(&r->used, 0, memory_order_relaxed);
		return -err;
	}
	madvise(p, r->ceiling, MADV_DONTFORK);
	atomic_store_explicit(&r->used, 0, memory_order_relaxed);
	atomic_store_explicit(&r->refused, 0, memory_order_relaxed);
	return 0;
}

void region_destroy(struct region *r)
{
	if (r->base)
		munmap(r->base, r->ceiling);
	r->base = NULL;
}

/* async-signal-safe */
void *region_alloc(struct region *r, size_t size)
{
	if (size > r->ceiling) { /* also keeps the rounding below from wrapping */
		atomic_fetch_add_explicit(&r->refused, 1, memory_order_relaxed);
		return NULL;
	}
	size = (size + REGION_ALIGN - 1) & ~(size_t)(REGION_ALIGN - 1);
	/* Relaxed: the CAS only reserves bytes. The memory is fresh from the kernel (zero)
	 * and its contents are published by the caller's own release store. */
	size_t old = atomic_load_explicit(&r->used, memory_order_relaxed);
	do {
		if (size > r->ceiling - old) {
			atomic_fetch_add_explicit(&r->refused, 1, memory_order_relaxed);
			return NULL;
		}
	} while (!atomic_compare_exchange_weak_explicit(
	    &r->used, &old, old + size, memory_order_relaxed, memory_order_relaxed));
	return r->base + old;
}

/* async-signal-safe */
size_t region_used(const struct region *r)
{
	return atomic_load_explicit(&r->used, memory_order_relaxed);
}

void region_reset(struct region *r)
{
	size_t used = atomic_load_explicit(&r->used, memory_order_relaxed);
	if (used > 0) {
		size_t page = r->page_size;
		size_t len = (used + page - 1) & ~(page - 1);
		if (len > r->ceiling)
			len = r->ceiling;
		/* Pages read back as zero afterwards: region_alloc relies on that. */
		madvise(r->base, len, MADV_DONTNEED);
	}
	atomic_store_explicit(&r->used, 0, memory_order_relaxed);
	atomic_store_explicit(&r->refused, 0, memory_order_relaxed);
}
