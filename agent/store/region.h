/*
 * region.h - lock-free bump allocator over chunks mapped on demand.
 *
 * Owns: up to REGION_MAX_CHUNKS anonymous mappings (chunks), handed out by one atomic
 * bump position, and the ceiling that bounds their total.
 *  - region_alloc is lock-free and async-signal-safe: a CAS loop over chunks that are
 *    already mapped, never a system call. When the chunk under the position has no room
 *    left it moves on to the next mapped chunk (the rest of the old one stays unused);
 *    when there is none, it refuses, counts the refusal and asks for room.
 *  - Chunks are mapped in normal context only: region_init maps the first one, and
 *    region_grow the next ones, keeping room ahead of the position. Chunk 0 holds
 *    `first` bytes, chunk i >= 1 first << (i - 1): each new chunk doubles what is mapped,
 *    so a few chunks reach any ceiling, and a chunk's place in the logical sequence of
 *    bytes is a shift away.
 *  - Why not one reservation of the ceiling: the kernel counts reserved address space
 *    as the process's, mlockall(MCL_CURRENT) locks and populates all of it (2 x 64 MiB
 *    by default), and refuses a process whose address space exceeds RLIMIT_MEMLOCK
 *    (8 MiB by default) outright, PROT_NONE included.
 *  - No free of single allocations; region_reset frees everything at once, gives the
 *    pages back (MADV_DONTNEED) and unmaps the chunks the position never reached.
 *  - Fork: every chunk is wipe-on-fork (don't-fork on old kernels): fork copies nothing
 *    and a child finds the chunks empty at the same addresses (region_after_fork).
 * Context: region_alloc, region_used and region_wants_room from signal handlers and any
 * thread; region_grow and region_reserve from any thread in normal context (one at a
 * time wins, the others return); init/reset/destroy in normal context with no
 * allocation running concurrently; region_after_fork in a fork child.
 */
#ifndef DDPROF_AGENT_REGION_H
#define DDPROF_AGENT_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Every allocation is aligned to this: enough for uint64_t and pointers. */
#define REGION_ALIGN 16
/* Chunks a region may have: with doubling chunks, a first chunk of 4 KiB reaches
 * 32 GiB, twice the largest ceiling the configuration accepts (16 GiB). */
#define REGION_MAX_CHUNKS 24

/*
 * Where a region's chunks are mapped: what a fork child must inherit, apart from the
 * region itself, which callers may keep on the fork-local page (agent/sample/fork_local.h).
 * The chunks are wiped in the child, their addresses stay valid: the child reuses them
 * all. Written by region_init and region_destroy, under the region's grow lock
 * (region_grow, region_reset) and by region_after_fork; read by region_alloc.
 */
struct region_map {
	uint8_t *base[REGION_MAX_CHUNKS]; /* chunk i's mapping, written before mapped > i */
	_Atomic unsigned mapped;	  /* chunks [0, mapped) are mapped */
};

struct region {
	struct region_map *map;	  /* not owned: the caller's (see region_init) */
	size_t ceiling;		  /* bytes of all chunks together, at most */
	size_t first;		  /* bytes of chunk 0 (and of chunk 1) */
	unsigned chunks_max;	  /* chunks that reach the ceiling (the last one is cut) */
	bool wipe_on_fork;	  /* MADV_WIPEONFORK took (else MADV_DONTFORK) */
	bool kept;		  /* region_init_kept: a fork child inherits the contents */
	_Atomic bool growing;	  /* the grow lock (normal context only; try-lock) */
	_Atomic bool wants_room;  /* region_alloc passed grow_at or found no room */
	_Atomic bool grow_failed; /* a mapping failed: no more asking until the reset */
	_Atomic size_t grow_at;	  /* used bytes past which region_alloc asks for room */
	_Atomic uint64_t pos;	  /* the position: chunk index in the top 16 bits, offset */
	_Atomic uint64_t refused; /* allocations refused since the last reset */
};

/*
 * Maps the first chunk (min(first, ceiling) bytes) and records it in map, which must
 * stay valid until region_destroy and serve no other region meanwhile. ceiling: the
 * bound of all chunks together. 0 or a negative errno: -EBUSY when map serves a region
 * already, -EINVAL when REGION_MAX_CHUNKS doublings of first cannot reach ceiling,
 * mmap's error.
 */
int region_init(struct region *r, struct region_map *map, size_t ceiling, size_t first);

/* The same for a region whose contents a fork child inherits, as private copies at the
 * same addresses (what lives in it stays valid in the child: the live heap's stacks). */
int region_init_kept(struct region *r, struct region_map *map, size_t ceiling, size_t first);
/* Fork child of a kept region: contents and position stay; a grow the parent's thread
 * was in at the fork is forgotten (that thread is not here). */
void region_after_fork_kept(struct region *r);

/* Fork child (single-threaded, or the first use of a region on the fork-local page):
 * the parent's contents are not inherited (wipe-on-fork, or don't-fork where the kernel
 * lacks it, which keeps fork cheap). Empties the region, keeping every chunk the parent
 * had; without wipe-on-fork maps them again at the same addresses. 0 or a negative
 * errno (the chunks that could not be mapped again are given up; without the first,
 * the region refuses every allocation). */
int region_after_fork(struct region *r);

/* Unmaps every chunk and frees the map for another region. Caller guarantees no
 * concurrent use. */
void region_destroy(struct region *r);

/* async-signal-safe. Zeroed memory of size bytes, or NULL when no chunk mapped yet has
 * room for it (region_wants_room is then true) or past the ceiling. */
void *region_alloc(struct region *r, size_t size);

/* async-signal-safe. Whether region_grow has something to do: region_alloc asked for
 * room since the last one (the position passed the growth threshold, or an allocation
 * found no room), and no other thread is growing r (relaxed loads: a hint). */
static inline bool region_wants_room(struct region *r)
{
	return atomic_load_explicit(&r->wants_room, memory_order_relaxed) &&
	       !atomic_load_explicit(&r->growing, memory_order_relaxed);
}

/*
 * Normal context. Maps chunks until a third of what is mapped lies ahead of the
 * position (or the ceiling is reached), and clears region_wants_room. When another
 * thread is growing or resetting r, returns 0 at once. 0 or mmap's negative errno;
 * after a failure region_alloc asks for room no more until region_reset (the kernel
 * refused: RLIMIT_AS, or mlockall(MCL_FUTURE) past RLIMIT_MEMLOCK), so that callers
 * that grow whenever asked do not retry in a loop.
 */
int region_grow(struct region *r);

/* Normal context. Maps chunks until at least bytes are mapped (or the ceiling). Same
 * returns as region_grow. For callers that know their need ahead (benchmarks, tests). */
int region_reserve(struct region *r, size_t bytes);

/* Frees everything: gives the pages used back to the kernel and unmaps the chunks the
 * position never reached (those it did are kept for the next use, the first always).
 * Precondition: no region_alloc runs concurrently and nothing allocated from r is used
 * afterwards. Waits for a concurrent region_grow. */
void region_reset(struct region *r);

/* async-signal-safe. Bytes handed out so far (with the unused ends of the chunks the
 * position left behind). */
size_t region_used(const struct region *r);

/* async-signal-safe. Bytes of the chunks mapped now (at most the ceiling). */
size_t region_mapped(const struct region *r);

#endif
