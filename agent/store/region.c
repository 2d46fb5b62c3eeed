/*
 * region.c - lock-free bump allocator over chunks mapped on demand (see region.h).
 *
 * This file is async-signal-safe where marked: region_alloc, region_used and
 * region_mapped run inside the sampling signal handler, region_after_fork on a fork
 * child's first sample. Everything that maps or unmaps runs in normal context.
 *
 * The position is one 64-bit word: the chunk's index in the top bits, the offset in
 * that chunk below. An allocation that fits in the chunk bumps the offset; one that does
 * not moves the position to offset `size` of the next chunk, if that one is mapped
 * already. Both are a single CAS, so an allocation never straddles two chunks and two
 * allocations never overlap. The position only moves to chunks that are mapped, and
 * chunks are unmapped only by reset and destroy, which run with no allocation.
 *
 * Why chunks that double (Go's trace regions use fixed 64 KiB blocks from a free list):
 * no mmap in the handler means every chunk must be mapped ahead of need by another
 * thread, and how much is needed is unknown: doubling keeps the table small (24 entries
 * reach any ceiling), what is mapped bounded by what is used (growth starts past two
 * thirds of what is mapped and doubles it: beyond the first chunk, at most three times
 * what is used; untouched pages cost no memory, MAP_NORESERVE, only address space), and
 * the chunk of a position computable with a shift.
 */
#include "agent/store/region.h"
#include "common/fork_child.h"
#include "common/page_size.h"
#include "common/sys_io.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* The position's chunk index starts at this bit: offsets below it reach 256 TiB, more
 * than a process's address space on x86-64 and arm64 (128 TiB, 256 TiB). */
#define REGION_POS_SHIFT 48
#define REGION_POS_OFFSET_MASK (((uint64_t)1 << REGION_POS_SHIFT) - 1)
/* region_reset waits this long between tries for the grow lock (a concurrent grow is a
 * few system calls). */
#define REGION_LOCK_POLL_NS 20000

/* async-signal-safe. Bytes of the logical sequence before chunk i. */
static inline size_t chunk_start(const struct region *r, unsigned i)
{
	return i == 0 ? 0 : r->first << (i - 1);
}

/* async-signal-safe. Usable bytes of chunk i < chunks_max: its nominal size, the last
 * chunk cut at the ceiling. */
static inline size_t chunk_bytes(const struct region *r, unsigned i)
{
	size_t start = chunk_start(r, i);
	size_t nominal = i == 0 ? r->first : start;
	return nominal < r->ceiling - start ? nominal : r->ceiling - start;
}

/* async-signal-safe. What mmap maps for chunk i: whole pages. */
static inline size_t chunk_map_len(const struct region *r, unsigned i)
{
	size_t page = page_size();
	return (chunk_bytes(r, i) + page - 1) & ~(page - 1);
}

/* async-signal-safe. Bytes of the chunks [0, n). */
static inline size_t mapped_bytes(const struct region *r, unsigned n)
{
	if (n == 0)
		return 0;
	return chunk_start(r, n - 1) + chunk_bytes(r, n - 1);
}

/* async-signal-safe. Where region_alloc starts asking for room with n chunks mapped:
 * when less than a third of them is left ahead of the position. Never once every chunk
 * is mapped: nothing more could come. */
static inline size_t grow_threshold(const struct region *r, unsigned n)
{
	if (n >= r->chunks_max)
		return SIZE_MAX;
	size_t m = mapped_bytes(r, n);
	return m - m / 3;
}

/* async-signal-safe */
static inline size_t pos_used(const struct region *r, uint64_t pos)
{
	return chunk_start(r, (unsigned)(pos >> REGION_POS_SHIFT)) +
	       (size_t)(pos & REGION_POS_OFFSET_MASK);
}

/* Normal context. Maps chunk i (fork semantics as the region's) into map->base[i]. */
static int map_chunk(struct region *r, unsigned i)
{
	size_t len = chunk_map_len(r, i);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	if (r->kept) {
		r->map->base[i] = p;
		return 0;
	}
	/* A fork child starts with empty profiles: not sharing the parent's pages makes
	 * fork cheaper (no page tables to copy, no write-protection of the parent's pages,
	 * so no copy-on-write faults and TLB shoot-downs in the parent afterwards).
	 * MADV_WIPEONFORK (Linux >= 4.14) gives the child the chunk zero-filled at the same
	 * address, with no system call in the child; MADV_DONTFORK is the fallback, and
	 * then region_after_fork maps it again. The first chunk decides for all. */
	if (i == 0) {
		r->wipe_on_fork = madvise(p, len, MADV_WIPEONFORK) == 0;
		if (!r->wipe_on_fork)
			madvise(p, len, MADV_DONTFORK);
	} else if (madvise(p, len, r->wipe_on_fork ? MADV_WIPEONFORK : MADV_DONTFORK) != 0) {
		int err = errno;
		munmap(p, len);
		return -err;
	}
	r->map->base[i] = p;
	return 0;
}

static int init(struct region *r, struct region_map *map, size_t ceiling, size_t first, bool kept)
{
	memset(r, 0, sizeof(*r));
	r->kept = kept;
	if (atomic_load_explicit(&map->mapped, memory_order_relaxed) != 0)
		return -EBUSY;
	/* Past SIZE_MAX / 2, doubling a chunk's start could wrap. */
	if (ceiling == 0 || first == 0 || ceiling > SIZE_MAX / 2)
		return -EINVAL;
	r->ceiling = ceiling;
	r->first = first < ceiling ? first : ceiling;
	/* Chunks until their starts pass the ceiling: start(i) = first << (i - 1). */
	unsigned n = 1;
	while (n < REGION_MAX_CHUNKS && chunk_start(r, n) < ceiling)
		n++;
	if (n == REGION_MAX_CHUNKS && chunk_start(r, n) < ceiling) {
		r->ceiling = 0;
		return -EINVAL;
	}
	r->chunks_max = n;
	r->map = map;
	int rc = map_chunk(r, 0);
	if (rc < 0) {
		r->map = NULL;
		r->ceiling = 0;
		return rc;
	}
	/* Relaxed: the caller publishes the region (thread creation, or its own release). */
	atomic_store_explicit(&map->mapped, 1, memory_order_relaxed);
	atomic_init(&r->growing, false);
	atomic_init(&r->wants_room, false);
	atomic_init(&r->grow_failed, false);
	atomic_init(&r->grow_at, grow_threshold(r, 1));
	atomic_init(&r->pos, 0);
	atomic_init(&r->refused, 0);
	return 0;
}

int region_init(struct region *r, struct region_map *map, size_t ceiling, size_t first)
{
	return init(r, map, ceiling, first, false);
}

int region_init_kept(struct region *r, struct region_map *map, size_t ceiling, size_t first)
{
	return init(r, map, ceiling, first, true);
}

void region_after_fork_kept(struct region *r)
{
	/* Relaxed: single-threaded here. */
	atomic_store_explicit(&r->growing, false, memory_order_relaxed);
}

/* async-signal-safe in its wipe-on-fork branch (plain stores, a fork child's first
 * sample may set up its pair: agent/store/profiles.c); the don't-fork branch, never taken
 * there, maps again. */
FORK_CHILD_PATH int region_after_fork(struct region *r)
{
	struct region_map *m = r->map;
	if (!m)
		return 0;
	/* Relaxed, all: single-threaded here, or the caller publishes the set-up. */
	atomic_store_explicit(&r->pos, 0, memory_order_relaxed);
	atomic_store_explicit(&r->refused, 0, memory_order_relaxed);
	atomic_store_explicit(&r->wants_room, false, memory_order_relaxed);
	atomic_store_explicit(&r->grow_failed, false, memory_order_relaxed);
	/* A parent thread may have held it at the fork: that thread is not here. */
	atomic_store_explicit(&r->growing, false, memory_order_relaxed);
	unsigned n = atomic_load_explicit(&m->mapped, memory_order_relaxed);
	int rc = 0;
	if (!r->wipe_on_fork) {
		/* The chunks were not inherited (MADV_DONTFORK): map them again at the same
		 * addresses, so pointers to the region stay meaningful. */
		for (unsigned i = 0; i < n; i++) {
			size_t len = chunk_map_len(r, i);
			void *p =
			    mmap(m->base[i], len, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
				 -1, 0);
			if (p == MAP_FAILED && errno == EEXIST) {
				/* Inherited after all (a kernel without DONTFORK): reuse. */
				madvise(m->base[i], len, MADV_DONTNEED);
				continue;
			}
			if (p != m->base[i]) {
				rc = p == MAP_FAILED ? -errno : -EEXIST;
				if (p != MAP_FAILED)
					munmap(p, len);
				n = i; /* this chunk and the later ones are given up */
				break;
			}
			madvise(p, len, MADV_DONTFORK);
		}
		atomic_store_explicit(&m->mapped, n, memory_order_relaxed);
		if (n == 0)
			r->ceiling = 0; /* region_alloc refuses everything: samples are dropped */
	}
	atomic_store_explicit(&r->grow_at, grow_threshold(r, n), memory_order_relaxed);
	return rc;
}

void region_destroy(struct region *r)
{
	struct region_map *m = r->map;
	if (!m)
		return;
	unsigned n = atomic_load_explicit(&m->mapped, memory_order_relaxed);
	for (unsigned i = n; i-- > 0;)
		munmap(m->base[i], chunk_map_len(r, i));
	atomic_store_explicit(&m->mapped, 0, memory_order_relaxed);
	r->map = NULL;
}

/* async-signal-safe. Relaxed, all: a hint for region_grow, which reads the position
 * itself; stored only when it changes (a handler writes no shared line for nothing). */
static void ask_for_room(struct region *r)
{
	if (!atomic_load_explicit(&r->wants_room, memory_order_relaxed) &&
	    !atomic_load_explicit(&r->grow_failed, memory_order_relaxed))
		atomic_store_explicit(&r->wants_room, true, memory_order_relaxed);
}

/* async-signal-safe. Refuses an allocation, asking for room when more chunks could come
 * (the ceiling is final). */
static void *refuse(struct region *r, bool room_could_help)
{
	atomic_fetch_add_explicit(&r->refused, 1, memory_order_relaxed);
	if (room_could_help)
		ask_for_room(r);
	return NULL;
}

/* async-signal-safe. An allocation ended at used bytes: ask for room once past the
 * threshold (a load and no store in the common case). */
static inline void note_used(struct region *r, size_t used)
{
	if (used > atomic_load_explicit(&r->grow_at, memory_order_relaxed))
		ask_for_room(r);
}

/* async-signal-safe */
void *region_alloc(struct region *r, size_t size)
{
	if (size > r->ceiling) /* also keeps the rounding below from wrapping */
		return refuse(r, false);
	size = (size + REGION_ALIGN - 1) & ~(size_t)(REGION_ALIGN - 1);
	struct region_map *m = r->map;
	/* Acquire (here and in every CAS): pairs with the release CAS below that moved the
	 * position into its chunk (all later CASes continue that release sequence), so that
	 * chunk's base, published by region_grow before, is visible. The bytes need no
	 * ordering: fresh from the kernel (zero), published by the caller's own release. */
	uint64_t pos = atomic_load_explicit(&r->pos, memory_order_acquire);
	for (;;) {
		unsigned i = (unsigned)(pos >> REGION_POS_SHIFT);
		size_t off = (size_t)(pos & REGION_POS_OFFSET_MASK);
		if (size <= chunk_bytes(r, i) - off) {
			if (atomic_compare_exchange_weak_explicit(&r->pos, &pos, pos + size,
								  memory_order_acquire,
								  memory_order_acquire)) {
				note_used(r, chunk_start(r, i) + off + size);
				return m->base[i] + off;
			}
			continue;
		}
		/* No room left in chunk i: the next one, if mapped. Acquire pairs with the
		 * release store of mapped in region_grow: base[i + 1] is visible. */
		unsigned n = atomic_load_explicit(&m->mapped, memory_order_acquire);
		if (i + 1 >= n || size > chunk_bytes(r, i + 1))
			return refuse(r, n < r->chunks_max);
		uint64_t next = ((uint64_t)(i + 1) << REGION_POS_SHIFT) | size;
		/* Release: heads the sequence the acquire loads above read base[i + 1] by. */
		if (atomic_compare_exchange_weak_explicit(&r->pos, &pos, next, memory_order_acq_rel,
							  memory_order_acquire)) {
			note_used(r, chunk_start(r, i + 1) + size);
			return m->base[i + 1];
		}
	}
}

/* async-signal-safe */
size_t region_used(const struct region *r)
{
	return pos_used(r, atomic_load_explicit(&r->pos, memory_order_relaxed));
}

/* async-signal-safe */
size_t region_mapped(const struct region *r)
{
	if (!r->map)
		return 0;
	return mapped_bytes(r, atomic_load_explicit(&r->map->mapped, memory_order_relaxed));
}

/* Normal context. Takes the grow lock if free. Acquire pairs with the release in
 * unlock: the previous holder's map writes are visible. */
static bool try_lock(struct region *r)
{
	return !atomic_load_explicit(&r->growing, memory_order_relaxed) &&
	       !atomic_exchange_explicit(&r->growing, true, memory_order_acquire);
}

static void unlock(struct region *r)
{
	/* Release: pairs with the acquire exchange in try_lock. */
	atomic_store_explicit(&r->growing, false, memory_order_release);
}

/* Grow lock held. Maps chunks while less than a third of what is mapped lies ahead of
 * the position (headroom), or until want_bytes are mapped. */
static int grow_locked(struct region *r, size_t want_bytes, bool headroom)
{
	struct region_map *m = r->map;
	unsigned n = atomic_load_explicit(&m->mapped, memory_order_relaxed);
	int rc = 0;
	for (; n < r->chunks_max; n++) {
		size_t mapped = mapped_bytes(r, n);
		size_t used = region_used(r);
		bool short_of_room =
		    headroom ? used > mapped || mapped - used < mapped / 3 : mapped < want_bytes;
		if (!short_of_room)
			break;
		rc = map_chunk(r, n);
		if (rc < 0) {
			atomic_store_explicit(&r->grow_failed, true, memory_order_relaxed);
			break;
		}
		/* Release: pairs with the acquire load in region_alloc (base[n] is set). */
		atomic_store_explicit(&m->mapped, n + 1, memory_order_release);
	}
	atomic_store_explicit(&r->grow_at, grow_threshold(r, n), memory_order_relaxed);
	return rc;
}

int region_grow(struct region *r)
{
	if (!r->map || !try_lock(r))
		return 0;
	/* Cleared first: an allocation that passes the new threshold meanwhile asks again. */
	atomic_store_explicit(&r->wants_room, false, memory_order_relaxed);
	int rc = grow_locked(r, 0, true);
	unlock(r);
	return rc;
}

int region_reserve(struct region *r, size_t bytes)
{
	if (!r->map || !try_lock(r))
		return 0;
	int rc = grow_locked(r, bytes, false);
	unlock(r);
	return rc;
}

void region_reset(struct region *r)
{
	struct region_map *m = r->map;
	if (!m)
		return;
	while (!try_lock(r)) {
		struct timespec ts = {0, REGION_LOCK_POLL_NS};
		sys_nanosleep(&ts, NULL);
	}
	uint64_t pos = atomic_load_explicit(&r->pos, memory_order_relaxed);
	unsigned last = (unsigned)(pos >> REGION_POS_SHIFT);
	size_t off = (size_t)(pos & REGION_POS_OFFSET_MASK);
	unsigned n = atomic_load_explicit(&m->mapped, memory_order_relaxed);
	/* Chunks the position never reached were never touched: unmapped, so that what a
	 * process keeps mapped follows what its profiles use (mlockall locks all of it).
	 * The count first: a fork meanwhile leaves the child a chunk it does not know (an
	 * empty mapping), never one it knows unmapped. */
	for (unsigned i = n; i-- > last + 1;) {
		atomic_store_explicit(&m->mapped, i, memory_order_relaxed);
		munmap(m->base[i], chunk_map_len(r, i));
	}
	n = last + 1 < n ? last + 1 : n;
	/* Pages read back as zero afterwards: region_alloc relies on that. */
	size_t page = page_size();
	for (unsigned i = 0; i < n; i++) {
		size_t len = i < last ? chunk_map_len(r, i) : (off + page - 1) & ~(page - 1);
		if (len > 0)
			madvise(m->base[i], len, MADV_DONTNEED);
	}
	atomic_store_explicit(&r->pos, 0, memory_order_relaxed);
	atomic_store_explicit(&r->refused, 0, memory_order_relaxed);
	atomic_store_explicit(&r->wants_room, false, memory_order_relaxed);
	atomic_store_explicit(&r->grow_failed, false, memory_order_relaxed);
	atomic_store_explicit(&r->grow_at, grow_threshold(r, n), memory_order_relaxed);
	unlock(r);
}
