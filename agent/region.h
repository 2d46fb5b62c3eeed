/*
 * region.h - lock-free bump allocator over one mmap reservation.
 *
 * Owns: a contiguous range of address space reserved once (MAP_NORESERVE, so only
 * touched pages cost memory) and carved out by an atomic bump pointer.
 *  - region_alloc is lock-free and async-signal-safe: one CAS loop, no syscall.
 *  - No free of single allocations; region_reset frees everything at once and gives
 *    the pages back to the kernel (MADV_DONTNEED).
 *  - The reservation size is the memory ceiling: past it region_alloc returns NULL and
 *    counts the refusal.
 * Context: alloc from signal handlers and any thread; init/reset/destroy from the
 * uploader thread (or a fork child) only, with no allocation running concurrently.
 */
#ifndef DDPROF_AGENT_REGION_H
#define DDPROF_AGENT_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every allocation is aligned to this: enough for uint64_t and pointers. */
#define REGION_ALIGN 16

struct region {
	uint8_t *base;		  /* owned mapping, NULL when not initialized */
	size_t ceiling;		  /* bytes reserved */
	size_t page_size;	  /* for giving pages back at reset */
	bool wipe_on_fork;	  /* MADV_WIPEONFORK took (else MADV_DONTFORK) */
	_Atomic size_t used;	  /* bytes handed out */
	_Atomic uint64_t refused; /* allocations refused since the last reset */
};

/* Reserves ceiling bytes. Returns 0 or a negative errno. */
int region_init(struct region *r, size_t ceiling);
/* Fork child (single-threaded): the parent's contents are not inherited (wipe-on-fork,
 * or don't-fork where the kernel lacks it, which keeps fork cheap). Empties the region;
 * without wipe-on-fork maps it again at the same address. 0 or a negative errno (then
 * the region refuses every allocation). */
int region_after_fork(struct region *r);

/* Unmaps. Caller guarantees no concurrent use. */
void region_destroy(struct region *r);

/* async-signal-safe. Zeroed memory of size bytes, or NULL past the ceiling. */
void *region_alloc(struct region *r, size_t size);

/* Frees everything. Precondition: no region_alloc runs concurrently and nothing
 * allocated from r is used afterwards. */
void region_reset(struct region *r);

/* async-signal-safe. Bytes handed out so far. */
size_t region_used(const struct region *r);

#endif
