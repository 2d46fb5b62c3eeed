/*
 * live_table.h - the live heap's table: sampled allocations still alive, by address.
 *
 * Owns: one anonymous mapping, sized once from a byte budget and never grown, holding a
 * bounded lock-free hash table from an address (never 0, below 2^56) to a small payload:
 * the sample's stack reference (opaque here), its size and its weight.
 *  - Buckets of LIVE_TABLE_BUCKET_SLOTS slots. Each bucket has a control word: one tag
 *    byte per slot (8 bits of the address's hash, 0 for a slot without an entry) and an
 *    overflow count (entries whose home is an earlier bucket and that were placed past
 *    this one). The control words are the filter: an address that is not in the table
 *    costs one relaxed load of its home bucket's word (and a few ALU operations) when no
 *    tag matches and nothing overflowed past it, the common case for every free. Each
 *    entry of the home bucket matches by chance once in 255: with n entries in c slots,
 *    a share of about 7n / 255c of those addresses reads a slot too (n / 37c), until
 *    buckets fill up and overflow.
 *  - Before the control words, a coarser filter that keeps a free's read in the
 *    first-level cache: a count of the entries in each page (4 KiB region) of the
 *    address space, on LIVE_TABLE_REGIONS counters (live_table_region: consecutive
 *    pages on consecutive counters). A free in a page without an entry, most of them
 *    while sampled allocations are sparse, reads only its counter: neighbouring pages
 *    share a cache line, and an application's frees stay in a few pages at a time,
 *    where the control word of a hashed bucket is anywhere in the array. The count is
 *    exact, never below the entries of the region: an insert raises it before the hook
 *    returns the address to the application (so before any free of it), and it is
 *    lowered only by the removal of an entry (or by an insert that placed none).
 *  - An entry lives in its home bucket or, when that one is full, in one of the next
 *    LIVE_TABLE_PROBE_BUCKETS - 1 (each one passed counts the overflow). Past that the
 *    insert is refused and counted: a full table never blocks and never crashes.
 *  - A slot is claimed by CAS on its key word, its payload written, the key published
 *    with a release store, then the tag set. A remove takes the slot by CAS, clears the
 *    tag, then frees the key word: a slot is free again as soon as its entry is gone.
 *    There are no tombstones (probe chains are bounded by buckets and the overflow
 *    counts, not by empty slots), so nothing accumulates and nothing needs a reset.
 *  - Nothing waits for another operation: a slot between two states is skipped by the
 *    others, so a signal handler that interrupts an operation at any instruction can run
 *    its own operations on the same table (lock-free and reentrant).
 *  - The order it relies on for one address: remove(X) completes before the real free(X),
 *    which happens before the malloc that returns X again, which happens before that
 *    caller's insert(X). So the hooks must call remove BEFORE the real free and insert
 *    AFTER the real malloc returns. An insert of an address already present (freed
 *    through a path that was not hooked) replaces the old entry.
 *  - Memory: every free reads the control words (a 29th of the budget); entries land on
 *    pages at random, so resident memory grows by about a page per entry until every
 *    page of slots holds one, each first touch a page fault in the allocating thread,
 *    unless live_table_populate mapped the pages ahead (the live heap does, from its
 *    host thread, once the process has lived a second: the whole budget resident, no
 *    fault in the application's threads from then on;
 *    mlockall(MCL_CURRENT) makes the whole mapping resident too).
 *  - Not done: no growth, no iteration order, no lookup without removal.
 * Context: insert and remove from any thread and from signal handlers
 * (async-signal-safe, errno untouched); for_each and stats from any thread in normal
 * context, concurrently with them; init, destroy and clear in normal context with no
 * other thread using the table.
 */
#ifndef DDPROF_AGENT_ALLOC_LIVE_TABLE_H
#define DDPROF_AGENT_ALLOC_LIVE_TABLE_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Slots of a bucket: seven tag bytes and the overflow count fill one 64-bit control
 * word, read with one load. */
#define LIVE_TABLE_BUCKET_SLOTS 7
/* Buckets an entry may be placed in, its home first (224 slots): enough for random
 * addresses to fill most of the table before the first insert is refused (the unit
 * suite checks how much). A lookup reads past its home bucket only while an entry
 * overflowed past it, the next control words most often on the same cache line. */
#define LIVE_TABLE_PROBE_BUCKETS 32
/* The regions of the coarse filter: 4 KiB each (a page: a tracked block makes only its
 * own page's frees read further), 4096 counters (16 KiB). */
#define LIVE_TABLE_REGION_SHIFT 12
#define LIVE_TABLE_REGIONS 4096

/* Addresses are below this: user space of 4-level page tables (x86-64: 47 bits,
 * arm64: 48). With 5-level tables Linux maps above it only for an mmap whose hint asks
 * (no allocator does); such an allocation is not tracked and counted as refused. The
 * key word keeps its top 16 bits for a slot's state and a generation wide enough for
 * its readers' seqlock check (live_table.c). */
#define LIVE_TABLE_ADDR_LIMIT ((uintptr_t)1 << 48)

/* A sampled allocation, as inserted and as read back. */
struct live_table_entry {
	uintptr_t addr;
	uint64_t ref;	 /* the sample's stack reference: the caller's, opaque here */
	uint64_t size;	 /* bytes the application asked for */
	uint64_t weight; /* sampled bytes the allocation stands for */
};

/* One slot: 32 bytes, so that a slot never straddles a cache line. The key word holds
 * the address and the slot's state (live_table.c). */
struct live_table_slot {
	_Atomic uint64_t key;
	_Atomic uint64_t ref, size, weight;
};

struct live_table {
	/* Read by every operation, written only by init and destroy: a cache line that
	 * the counters below never share. */
	alignas(64) _Atomic uint64_t *ctrl; /* [nbuckets]: the buckets' control words */
	struct live_table_slot *slots;	    /* [nbuckets * LIVE_TABLE_BUCKET_SLOTS] */
	uint64_t nbuckets;
	unsigned probe_buckets; /* min(LIVE_TABLE_PROBE_BUCKETS, nbuckets) */
	void *map;		/* the mapping: control words, then slots */
	size_t map_len;
	/* Bytes of the mapping populated from its start (live_table_populate), relaxed:
	 * written by the one thread that populates, read for the statistics. */
	_Atomic size_t populated;
	/* Counters (relaxed): written by inserts and by removes that found a tag, never by
	 * a remove of an address that no tag matches. */
	alignas(64) _Atomic uint64_t entries; /* entries in the table */
	_Atomic uint64_t inserted;	      /* inserts that placed an entry, ever */
	_Atomic uint64_t overflows;	      /* inserts refused: no free slot in reach, or
					       * an address past the limit */
	_Atomic uint64_t replaced;   /* inserts that replaced an entry of the same address */
	_Atomic uint64_t displaced;  /* entries outside their home bucket */
	_Atomic uint64_t probes;     /* slots read because their tag matched */
	_Atomic uint64_t false_hits; /* removes whose tags matched and found nothing */
	/* Entries per region (live_table_region), relaxed: see the top of this file. */
	alignas(64) _Atomic uint32_t regions[LIVE_TABLE_REGIONS];
};

struct live_table_stats {
	uint64_t entries, capacity, overflows, replaced, displaced, probes, false_hits;
	size_t bytes;		/* of the mapping */
	uint64_t touched_bound; /* of them, written at most: resident unless swapped out */
};

/*
 * Normal context. Maps the table: as many buckets as fit in budget bytes (rounded down to
 * whole pages; a mapping of at most that). The mapping is private and inherited by a fork
 * child as a copy (the child's heap is the parent's). 0, -EINVAL when the budget holds
 * less than one bucket, or mmap's negative errno.
 */
int live_table_init(struct live_table *t, size_t budget);

/* Unmaps the table. Precondition: no other operation runs or will run on it. */
void live_table_destroy(struct live_table *t);

/*
 * async-signal-safe, lock-free. Records addr (0 < addr < LIVE_TABLE_ADDR_LIMIT) with its
 * payload. An entry of the same address already present is replaced (the old one was
 * freed without a remove). false when addr is out of range, or when its home bucket and
 * the next ones are full (counted in overflows). Call it after the real malloc returned
 * addr.
 */
bool live_table_insert(struct live_table *t, uintptr_t addr, uint64_t ref, uint64_t size,
		       uint64_t weight);

/* async-signal-safe. live_table_remove past the filter: a tag matched or an entry
 * overflowed past addr's home bucket (h: live_table_hash(addr)). */
bool live_table_remove_slow(struct live_table *t, uintptr_t addr, uint64_t h,
			    struct live_table_entry *out);

/* async-signal-safe. The hash of an address: one multiplication by 2^64 / phi (Knuth's
 * multiplicative hashing). Its top bits, which pick the bucket, depend on every bit of
 * the address and spread arithmetic progressions (a heap's addresses) evenly; a full
 * mixer would cost the free path a few more cycles for nothing the tags need. */
static inline uint64_t live_table_hash(uintptr_t addr)
{
	return (uint64_t)addr * 0x9e3779b97f4a7c15ULL;
}

/* async-signal-safe. addr's counter of the coarse filter: consecutive pages have
 * consecutive counters (a run of frees reads one cache line), and each 16 MiB span
 * starts at an offset hashed from its number, so that heaps at the same offset of
 * aligned spans (glibc's thread arenas, 64 MiB-aligned) seldom share counters (which
 * another thread's inserts would keep taking from this one's cache). */
static inline uint64_t live_table_region(uintptr_t addr)
{
	uint64_t r = addr >> LIVE_TABLE_REGION_SHIFT;
	/* An odd multiplier: spans 1, 2 and 4 apart (4: the next thread arena) start at
	 * least 970 counters apart; one instruction with an immediate operand, on every
	 * free's path. */
	return (r + (r >> 12) * 0x9E5) & (LIVE_TABLE_REGIONS - 1);
}

/* async-signal-safe. addr's home bucket: the top bits of its hash scaled to nbuckets. */
static inline uint64_t live_table_home(const struct live_table *t, uint64_t h)
{
	return (uint64_t)(((unsigned __int128)h * t->nbuckets) >> 64);
}

/* Where the tag is taken from the hash: bits 32..39, which the bucket does not use (it
 * takes the top ones, fewer than 24 of them for any budget below 3 GiB) and which depend
 * on the address's bits 0..39 (a lower byte would be the same for addresses that differ
 * only above bit 31, as blocks at one offset of regions 4 GiB apart do). */
#define LIVE_TABLE_TAG_SHIFT 32

/* async-signal-safe. addr's tag: a byte of its hash, never 0 (no entry). */
static inline uint64_t live_table_tag(uint64_t h)
{
	uint64_t tag = (h >> LIVE_TABLE_TAG_SHIFT) & 0xff;
	return tag + (tag == 0);
}

/* The high bit of each tag byte of a control word (bytes 0..6; byte 7 is the overflow
 * count). */
#define LIVE_TABLE_TAG_HIGH_BITS 0x0080808080808080ULL
#define LIVE_TABLE_OVERFLOW_SHIFT 56

/* async-signal-safe. The high bit of every tag byte of w equal to tag (exact, no
 * carries between bytes). */
static inline uint64_t live_table_match(uint64_t w, uint64_t tag)
{
	const uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL;
	uint64_t x = w ^ (tag * 0x0101010101010101ULL); /* bytes equal to tag are now 0 */
	return ~(((x & low7) + low7) | x | low7) & LIVE_TABLE_TAG_HIGH_BITS;
}

/*
 * async-signal-safe, lock-free: the free path. Removes addr's entry and copies it to out
 * (may be NULL); false when addr is not in the table. An address that no tag of its home
 * bucket matches, with nothing overflowed past that bucket, costs one relaxed load and
 * writes nothing. Call it before the real free of addr.
 */
/* async-signal-safe. The coarse filter alone: false when addr is certainly not in the
 * table (its page holds no entry). */
static inline bool live_table_may_hold(const struct live_table *t, uintptr_t addr)
{
	/* Relaxed: an entry's count was raised before its address reached the caller
	 * (happens-before through the application), and is lowered only by its removal. */
	return atomic_load_explicit(&t->regions[live_table_region(addr)], memory_order_relaxed) !=
	       0;
}

static inline bool live_table_remove(struct live_table *t, uintptr_t addr,
				     struct live_table_entry *out)
{
	if (!live_table_may_hold(t, addr))
		return false;
	uint64_t h = live_table_hash(addr);
	uint64_t w = atomic_load_explicit(&t->ctrl[live_table_home(t, h)], memory_order_relaxed);
	if (!live_table_match(w, live_table_tag(h)) && (w >> LIVE_TABLE_OVERFLOW_SHIFT) == 0)
		return false;
	return live_table_remove_slow(t, addr, h, out);
}

/*
 * Normal context, concurrently with inserts and removes. Calls fn on a copy of every
 * entry: an entry inserted before the walk starts and not removed before it ends is seen
 * exactly once, with its payload; one removed before the walk starts is not seen; one
 * inserted or removed during the walk may or may not be, and an address removed and
 * inserted again during the walk may be seen twice (its old and its new entry). Never
 * a torn entry: a slot that changed while it was read is read again or skipped. fn may
 * insert and remove.
 */
void live_table_for_each(const struct live_table *t,
			 void (*fn)(const struct live_table_entry *e, void *arg), void *arg);

/*
 * Normal context, concurrently with inserts and removes: visits entries as for_each
 * does, and replaces an entry's ref with what fn returns for it when that differs (a
 * CAS on the ref, which fails harmlessly when the slot changed meanwhile). For callers
 * that move what refs point to (the live heap's compaction).
 */
void live_table_rewrite_refs(struct live_table *t,
			     uint64_t (*fn)(const struct live_table_entry *e, void *arg),
			     void *arg);

/* Normal context, one thread at a time, concurrently with inserts and removes. Maps the
 * next step bytes of the mapping (whole pages, for writing) that are not yet populated;
 * returns the bytes left to populate (0: the whole mapping is). */
size_t live_table_populate(struct live_table *t, size_t step);
/* Whether live_table_populate has mapped the whole table. */
bool live_table_populated(const struct live_table *t);

/* Any context (relaxed loads). The counters, each exact but not a snapshot together. */
void live_table_stats(const struct live_table *t, struct live_table_stats *out);

/*
 * Normal context. Drops every entry and zeroes the counters (a fork child that does not
 * inherit the live heap): the pages are given back, not written. Precondition: no other
 * thread uses the table; signals are blocked meanwhile, so a handler of this thread sees
 * the table either full or empty.
 */
void live_table_clear(struct live_table *t);

#endif
