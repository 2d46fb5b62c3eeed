/*
 * live_table.c - the live heap's bounded lock-free table (see live_table.h).
 *
 * This file is async-signal-safe (insert, remove and everything they call): no lock, no
 * allocation, no system call, errno untouched; nothing waits for another operation to
 * finish, so an operation interrupted at any instruction by a signal whose handler
 * operates on the same table cannot block it. init, destroy, clear, for_each and stats
 * run in normal context.
 *
 * A slot's key word is its state, changed only by CAS or by its owner:
 *
 *     bits 0..47  the address (0: no address)
 *     bits 48..61 the slot's generation, bumped at every claim
 *     bit 62      REMOVING: a remove owns the slot (clearing the tag)
 *     bit 63      CLAIMED: an insert owns the slot (writing the payload, then the tag)
 *
 *     free --CAS by insert--> CLAIMED|addr --release store--> addr (live)
 *     live --CAS by remove--> REMOVING|addr --release store--> free (same generation)
 *     live --CAS by insert of the same addr--> CLAIMED|addr --release store--> addr
 *
 * A slot's tag is set only while its key word is live or claimed, and cleared while it
 * is removing, always by the slot's owner (one atomic OR or AND on the control word, the
 * other bytes untouched): a free key word has a zero tag, a live one that was fully
 * inserted has its address's tag. The overflow count of a bucket (its control word's
 * top byte) is raised by an insert before it looks further than that bucket, and
 * lowered by the remove of the entry it placed (or by the insert itself when it found no
 * room): so while an entry lives past its home bucket, every bucket between counts it,
 * and a lookup stops at the first bucket without a match whose count is 0. A count holds
 * at most (LIVE_TABLE_PROBE_BUCKETS - 1) * LIVE_TABLE_BUCKET_SLOTS = 217 placed entries
 * plus the inserts running at that moment; it is raised by CAS up to 255 and no further
 * (an insert that would pass it is refused), so it never wraps.
 *
 * Readers of a payload use the generation as a sequence number (a seqlock whose writers
 * never wait): read the key, the payload, the key again; the same value twice means the
 * payload is the one published with it, since every writer changes the key word (claim)
 * before it writes the payload. 16384 claims of one slot between the two reads, the
 * last one for the same address, would fool it: the reader preempted while the same
 * address is sampled that often (8 GiB allocated at the default interval).
 *
 * No ABA on one address: the hooks call remove(X) before the real free(X), and insert(X)
 * after a malloc returned X, so for one address the operations are ordered by the
 * allocator (remove completes, free, malloc returns X, insert starts). Two operations on
 * the same address at once are application errors (a double free, a free of an address
 * not returned yet): the CAS of one of them fails and it reports the address as absent.
 */
#include "agent/alloc/live_table.h"

#include "common/mem_populate.h"
#include "common/page_size.h"
#include "common/raw_syscall.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#define KEY_ADDR_MASK (LIVE_TABLE_ADDR_LIMIT - 1)
#define KEY_GEN_SHIFT 48
#define KEY_GEN_MASK (0x3fffULL << KEY_GEN_SHIFT)
#define KEY_REMOVING (1ULL << 62)
#define KEY_CLAIMED (1ULL << 63)

/* One unit of a control word's overflow count (its top byte). */
#define CTRL_OVERFLOW_ONE (1ULL << LIVE_TABLE_OVERFLOW_SHIFT)
#define OVERFLOW_MAX 0xffULL
#define TAG_BITS 8
#define TAG_MASK 0xffULL

/* A reader of a slot that keeps changing under it (the same slot removed and claimed
 * again while it reads) gives up on it after this many reads: each change is another
 * thread's progress, so this bounds the walk, never a wait. */
#define READ_TRIES 4

/* Control words are aligned to a cache line at the start of the mapping, the slots after
 * them on a cache line too. */
#define LINE 64

/* async-signal-safe */
static inline bool key_is_live(uint64_t k)
{
	return (k & (KEY_CLAIMED | KEY_REMOVING)) == 0 && (k & KEY_ADDR_MASK) != 0;
}

/* async-signal-safe */
static inline bool key_is_free(uint64_t k)
{
	return (k & ~KEY_GEN_MASK) == 0;
}

/* async-signal-safe. The generation bits of the next claim of a slot whose key is k. */
static inline uint64_t key_next_gen(uint64_t k)
{
	return (k + (1ULL << KEY_GEN_SHIFT)) & KEY_GEN_MASK;
}

/* async-signal-safe. Bucket home + d, around the end. */
static inline uint64_t bucket_at(const struct live_table *t, uint64_t home, unsigned d)
{
	uint64_t j = home + d;
	return j >= t->nbuckets ? j - t->nbuckets : j;
}

/* async-signal-safe. Slot of a bucket from a match mask (its lowest set byte). */
static inline uint64_t slot_of(uint64_t bucket, uint64_t mask)
{
	return bucket * LIVE_TABLE_BUCKET_SLOTS + ((uint64_t)__builtin_ctzll(mask) >> 3);
}

/* async-signal-safe. Bit position of a slot's tag in its bucket's control word. */
static inline unsigned tag_shift(uint64_t slot)
{
	return (unsigned)(slot % LIVE_TABLE_BUCKET_SLOTS) * TAG_BITS;
}

/* Where a lookup found its address. */
struct found {
	uint64_t slot;
	uint64_t key;  /* the live key word read */
	unsigned dist; /* buckets past the home bucket */
};

/*
 * async-signal-safe. Looks addr up from its home bucket, following the overflow counts.
 * *probes counts the slots read because their tag matched.
 */
static bool find(struct live_table *t, uintptr_t addr, uint64_t h, struct found *f,
		 uint64_t *probes)
{
	uint64_t home = live_table_home(t, h), tag = live_table_tag(h);
	for (unsigned d = 0; d < t->probe_buckets; d++) {
		uint64_t j = bucket_at(t, home, d);
		uint64_t w = atomic_load_explicit(&t->ctrl[j], memory_order_relaxed);
		for (uint64_t m = live_table_match(w, tag); m; m &= m - 1) {
			uint64_t s = slot_of(j, m);
			(*probes)++;
			/* Acquire pairs with the release store that published the key: the
			 * payload written before it is visible. */
			uint64_t k = atomic_load_explicit(&t->slots[s].key, memory_order_acquire);
			if (key_is_live(k) && (k & KEY_ADDR_MASK) == addr) {
				*f = (struct found){s, k, d};
				return true;
			}
		}
		if ((w >> LIVE_TABLE_OVERFLOW_SHIFT) == 0)
			break; /* nothing placed past this bucket from an earlier one */
	}
	return false;
}

/* async-signal-safe. The payload of a slot the caller owns (claimed), then publishes
 * key with it. */
static void publish(struct live_table_slot *s, uint64_t key, uint64_t ref, uint64_t size,
		    uint64_t weight)
{
	/* Pairs with the acquire fences of the readers (read_slot, remove): the claim
	 * (the key word's change) is ordered before the payload stores, so a reader that
	 * sees one of them sees the key changed when it reads it again. */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&s->ref, ref, memory_order_relaxed);
	atomic_store_explicit(&s->size, size, memory_order_relaxed);
	atomic_store_explicit(&s->weight, weight, memory_order_relaxed);
	/* Release pairs with the acquire loads of the key (find, read_slot): the payload
	 * is visible to whoever sees this key. */
	atomic_store_explicit(&s->key, key, memory_order_release);
}

/* async-signal-safe. Replaces the live entry f found with the new payload: the old
 * one's allocation was freed without a remove. false when the slot changed meanwhile. */
static bool replace(struct live_table *t, const struct found *f, uintptr_t addr, uint64_t ref,
		    uint64_t size, uint64_t weight)
{
	struct live_table_slot *s = &t->slots[f->slot];
	uint64_t k = f->key, gen = key_next_gen(k);
	/* Acquire pairs with the release store that published the old entry (as
	 * find's load did). */
	if (!atomic_compare_exchange_strong_explicit(&s->key, &k, KEY_CLAIMED | gen | addr,
						     memory_order_acquire, memory_order_relaxed))
		return false;
	publish(s, gen | addr, ref, size, weight);
	atomic_fetch_add_explicit(&t->replaced, 1, memory_order_relaxed);
	return true;
}

/* async-signal-safe. Claims a free slot of bucket j for addr: its index (*key: the key
 * word as claimed), or -1 when the bucket has none. */
static int64_t claim_in(struct live_table *t, uint64_t j, uintptr_t addr, uint64_t *key)
{
	uint64_t w = atomic_load_explicit(&t->ctrl[j], memory_order_relaxed);
	/* Slots without a tag: free, or owned by an insert or a remove (their CAS fails). */
	for (uint64_t m = live_table_match(w, 0); m; m &= m - 1) {
		uint64_t s = slot_of(j, m);
		uint64_t k = atomic_load_explicit(&t->slots[s].key, memory_order_relaxed);
		if (!key_is_free(k))
			continue;
		/* Acquire pairs with the release store of the remove that freed the slot:
		 * its reads of the old payload and its clearing of the tag happen before
		 * our writes. */
		*key = KEY_CLAIMED | key_next_gen(k) | addr;
		if (atomic_compare_exchange_strong_explicit(
			&t->slots[s].key, &k, *key, memory_order_acquire, memory_order_relaxed))
			return (int64_t)s;
		/* Lost to another insert (or the key word moved on): try the next one. */
	}
	return -1;
}

/* async-signal-safe. Raises the overflow count of a control word, unless it is at its
 * maximum (then the insert that asks is refused: a count never wraps). */
static bool overflow_raise(_Atomic uint64_t *w)
{
	uint64_t v = atomic_load_explicit(w, memory_order_relaxed);
	do {
		if ((v >> LIVE_TABLE_OVERFLOW_SHIFT) == OVERFLOW_MAX)
			return false;
		/* A failed CAS means another slot's tag or the count changed: someone
		 * progressed; retry with the value it loaded. */
	} while (!atomic_compare_exchange_weak_explicit(
	    w, &v, v + CTRL_OVERFLOW_ONE, memory_order_relaxed, memory_order_relaxed));
	return true;
}

/* async-signal-safe */
bool live_table_insert(struct live_table *t, uintptr_t addr, uint64_t ref, uint64_t size,
		       uint64_t weight)
{
	if (addr == 0)
		return false;
	if (addr >= LIVE_TABLE_ADDR_LIMIT) {
		atomic_fetch_add_explicit(&t->overflows, 1, memory_order_relaxed);
		return false;
	}
	/* Counted first, for the entry this insert may place; taken back when it places
	 * none or replaces one (whose count stands for it). */
	_Atomic uint32_t *region = &t->regions[live_table_region(addr)];
	atomic_fetch_add_explicit(region, 1, memory_order_relaxed);
	uint64_t h = live_table_hash(addr), probes = 0;
	struct found f;
	bool dup = find(t, addr, h, &f, &probes);
	if (probes)
		atomic_fetch_add_explicit(&t->probes, probes, memory_order_relaxed);
	/* A stale entry of this address: replaced in place (if it changed meanwhile, the
	 * application freed an address that malloc had not returned yet: a new slot). */
	if (dup && replace(t, &f, addr, ref, size, weight)) {
		atomic_fetch_sub_explicit(region, 1, memory_order_relaxed);
		return true;
	}
	uint64_t home = live_table_home(t, h);
	unsigned passed = 0; /* buckets whose overflow count this insert raised */
	for (unsigned d = 0; d < t->probe_buckets; d++) {
		uint64_t j = bucket_at(t, home, d);
		uint64_t key;
		int64_t s = claim_in(t, j, addr, &key);
		if (s >= 0) {
			publish(&t->slots[s], key & ~KEY_CLAIMED, ref, size, weight);
			/* The tag last: a lookup that matches it finds the key live (the
			 * remove of this address comes after this insert returned). */
			atomic_fetch_or_explicit(&t->ctrl[j], live_table_tag(h) << tag_shift(s),
						 memory_order_relaxed);
			atomic_fetch_add_explicit(&t->entries, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&t->inserted, 1, memory_order_relaxed);
			if (d)
				atomic_fetch_add_explicit(&t->displaced, 1, memory_order_relaxed);
			return true;
		}
		/* Full: count this entry as placed past bucket j before looking further,
		 * so that a lookup never stops here while the entry lives beyond. */
		if (d + 1 == t->probe_buckets || !overflow_raise(&t->ctrl[j]))
			break;
		passed++;
	}
	for (unsigned d = 0; d < passed; d++)
		atomic_fetch_sub_explicit(&t->ctrl[bucket_at(t, home, d)], CTRL_OVERFLOW_ONE,
					  memory_order_relaxed);
	atomic_fetch_add_explicit(&t->overflows, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(region, 1, memory_order_relaxed);
	return false;
}

/* async-signal-safe */
bool live_table_remove_slow(struct live_table *t, uintptr_t addr, uint64_t h,
			    struct live_table_entry *out)
{
	uint64_t probes = 0;
	struct found f;
	bool found = find(t, addr, h, &f, &probes);
	if (probes)
		atomic_fetch_add_explicit(&t->probes, probes, memory_order_relaxed);
	if (!found) {
		if (probes)
			atomic_fetch_add_explicit(&t->false_hits, 1, memory_order_relaxed);
		return false;
	}
	struct live_table_slot *s = &t->slots[f.slot];
	/* The payload published with f.key (find's acquire load). */
	struct live_table_entry e = {addr, atomic_load_explicit(&s->ref, memory_order_relaxed),
				     atomic_load_explicit(&s->size, memory_order_relaxed),
				     atomic_load_explicit(&s->weight, memory_order_relaxed)};
	/* Pairs with publish's release fence: if a payload load above saw a writer that
	 * claimed the slot since, the CAS below sees that claim and fails. */
	atomic_thread_fence(memory_order_acquire);
	uint64_t k = f.key;
	if (!atomic_compare_exchange_strong_explicit(&s->key, &k, k | KEY_REMOVING,
						     memory_order_relaxed, memory_order_relaxed))
		return false; /* removed or replaced at the same time: an application error */
	uint64_t j = f.slot / LIVE_TABLE_BUCKET_SLOTS;
	atomic_fetch_and_explicit(&t->ctrl[j], ~(TAG_MASK << tag_shift(f.slot)),
				  memory_order_relaxed);
	/* Release pairs with claim_in's acquire CAS: the payload reads and the tag's
	 * clearing above happen before the next owner's writes. */
	atomic_store_explicit(&s->key, k & KEY_GEN_MASK, memory_order_release);
	uint64_t home = live_table_home(t, h);
	for (unsigned d = 0; d < f.dist; d++)
		atomic_fetch_sub_explicit(&t->ctrl[bucket_at(t, home, d)], CTRL_OVERFLOW_ONE,
					  memory_order_relaxed);
	atomic_fetch_sub_explicit(&t->entries, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&t->regions[live_table_region(addr)], 1, memory_order_relaxed);
	if (f.dist)
		atomic_fetch_sub_explicit(&t->displaced, 1, memory_order_relaxed);
	if (out)
		*out = e;
	return true;
}

/* A consistent copy of slot s's entry; false when it holds none (or kept changing). */
static bool read_slot(const struct live_table_slot *s, struct live_table_entry *e)
{
	for (int i = 0; i < READ_TRIES; i++) {
		/* Acquire pairs with publish's release store of the key. */
		uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
		if (!key_is_live(k))
			return false;
		e->addr = (uintptr_t)(k & KEY_ADDR_MASK);
		e->ref = atomic_load_explicit(&s->ref, memory_order_relaxed);
		e->size = atomic_load_explicit(&s->size, memory_order_relaxed);
		e->weight = atomic_load_explicit(&s->weight, memory_order_relaxed);
		/* Pairs with publish's release fence: a payload from a later claim means
		 * the key reads differently below. */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->key, memory_order_relaxed) == k)
			return true;
	}
	return false;
}

void live_table_for_each(const struct live_table *t,
			 void (*fn)(const struct live_table_entry *e, void *arg), void *arg)
{
	for (uint64_t j = 0; j < t->nbuckets; j++) {
		uint64_t w = atomic_load_explicit(&t->ctrl[j], memory_order_relaxed);
		/* Slots with a tag: every entry fully inserted, and entries being removed. */
		uint64_t tagged = ~live_table_match(w, 0) & LIVE_TABLE_TAG_HIGH_BITS;
		for (; tagged; tagged &= tagged - 1) {
			struct live_table_entry e;
			if (read_slot(&t->slots[slot_of(j, tagged)], &e))
				fn(&e, arg);
		}
	}
}

static void zero_counters(struct live_table *t)
{
	atomic_store_explicit(&t->entries, 0, memory_order_relaxed);
	atomic_store_explicit(&t->inserted, 0, memory_order_relaxed);
	atomic_store_explicit(&t->overflows, 0, memory_order_relaxed);
	atomic_store_explicit(&t->replaced, 0, memory_order_relaxed);
	atomic_store_explicit(&t->displaced, 0, memory_order_relaxed);
	atomic_store_explicit(&t->probes, 0, memory_order_relaxed);
	atomic_store_explicit(&t->false_hits, 0, memory_order_relaxed);
	/* Only the counters that are not zero: a fork child that clears the table copies
	 * no page it does not have to. */
	for (size_t r = 0; r < LIVE_TABLE_REGIONS; r++)
		if (atomic_load_explicit(&t->regions[r], memory_order_relaxed) != 0)
			atomic_store_explicit(&t->regions[r], 0, memory_order_relaxed);
}

void live_table_rewrite_refs(struct live_table *t,
			     uint64_t (*fn)(const struct live_table_entry *e, void *arg), void *arg)
{
	for (uint64_t j = 0; j < t->nbuckets; j++) {
		uint64_t w = atomic_load_explicit(&t->ctrl[j], memory_order_relaxed);
		uint64_t tagged = ~live_table_match(w, 0) & LIVE_TABLE_TAG_HIGH_BITS;
		for (; tagged; tagged &= tagged - 1) {
			struct live_table_slot *s = &t->slots[slot_of(j, tagged)];
			struct live_table_entry e;
			if (!read_slot(s, &e))
				continue;
			uint64_t ref = fn(&e, arg), expected = e.ref;
			/* Relaxed: the entry's readers take the ref as a value; the
			 * caller orders what it points to (live_heap.c). */
			if (ref != e.ref)
				atomic_compare_exchange_strong_explicit(&s->ref, &expected, ref,
									memory_order_relaxed,
									memory_order_relaxed);
		}
	}
}

/* Bytes of the control words of nbuckets buckets, up to the slots' first cache line. */
static size_t ctrl_bytes(uint64_t nbuckets)
{
	return (nbuckets * sizeof(uint64_t) + LINE - 1) & ~(size_t)(LINE - 1);
}

static size_t table_bytes(uint64_t nbuckets)
{
	return ctrl_bytes(nbuckets) +
	       nbuckets * LIVE_TABLE_BUCKET_SLOTS * sizeof(struct live_table_slot);
}

void live_table_stats(const struct live_table *t, struct live_table_stats *out)
{
	*out = (struct live_table_stats){
	    .entries = atomic_load_explicit(&t->entries, memory_order_relaxed),
	    .capacity = t->nbuckets * LIVE_TABLE_BUCKET_SLOTS,
	    .overflows = atomic_load_explicit(&t->overflows, memory_order_relaxed),
	    .replaced = atomic_load_explicit(&t->replaced, memory_order_relaxed),
	    .displaced = atomic_load_explicit(&t->displaced, memory_order_relaxed),
	    .probes = atomic_load_explicit(&t->probes, memory_order_relaxed),
	    .false_hits = atomic_load_explicit(&t->false_hits, memory_order_relaxed),
	    .bytes = t->map_len,
	};
	/* Each insert writes one slot, on a page of its own at worst. */
	uint64_t inserted = atomic_load_explicit(&t->inserted, memory_order_relaxed);
	uint64_t slots = t->map_len - ctrl_bytes(t->nbuckets);
	uint64_t touched = inserted * page_size();
	out->touched_bound = ctrl_bytes(t->nbuckets) + (touched < slots ? touched : slots);
	size_t populated = atomic_load_explicit(&t->populated, memory_order_relaxed);
	if (populated > out->touched_bound)
		out->touched_bound = populated;
}

bool live_table_populated(const struct live_table *t)
{
	return atomic_load_explicit(&t->populated, memory_order_relaxed) >= t->map_len;
}

size_t live_table_populate(struct live_table *t, size_t step)
{
	size_t done = atomic_load_explicit(&t->populated, memory_order_relaxed);
	if (done >= t->map_len)
		return 0;
	size_t n = t->map_len - done;
	/* The last step takes a remainder smaller than a call is worth with it. */
	if (n > step && n - step >= MEM_POPULATE_MIN)
		n = step;
	mem_populate((char *)t->map + done, n);
	atomic_store_explicit(&t->populated, done + n, memory_order_relaxed);
	return t->map_len - done - n;
}

int live_table_init(struct live_table *t, size_t budget)
{
	size_t page = page_size();
	size_t bytes = budget & ~(page - 1);
	uint64_t per_bucket =
	    sizeof(uint64_t) + LIVE_TABLE_BUCKET_SLOTS * sizeof(struct live_table_slot);
	uint64_t nbuckets = bytes / per_bucket;
	while (nbuckets && table_bytes(nbuckets) > bytes)
		nbuckets--;
	if (nbuckets == 0)
		return -EINVAL;
	size_t len = (table_bytes(nbuckets) + page - 1) & ~(page - 1);
	/* No swap reservation: pages are backed as entries land on them. */
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	t->map = p;
	t->map_len = len;
	t->ctrl = p;
	t->slots = (struct live_table_slot *)((char *)p + ctrl_bytes(nbuckets));
	t->nbuckets = nbuckets;
	t->probe_buckets =
	    nbuckets < LIVE_TABLE_PROBE_BUCKETS ? (unsigned)nbuckets : LIVE_TABLE_PROBE_BUCKETS;
	memset(t->regions, 0, sizeof(t->regions)); /* t may be fresh memory */
	atomic_store_explicit(&t->populated, 0, memory_order_relaxed);
	zero_counters(t);
	return 0;
}

void live_table_destroy(struct live_table *t)
{
	if (t->map)
		munmap(t->map, t->map_len);
	memset(t, 0, sizeof(*t));
}

void live_table_clear(struct live_table *t)
{
	/* Raw system calls: no libc wrapper that we or the application interpose, and
	 * errno untouched. */
	uint64_t all = ~0ULL, old;
	raw_syscall(SYS_rt_sigprocmask, SIG_BLOCK, (long)&all, (long)&old, sizeof(all));
	/* Zero pages from now on; the pages are not written (a fork child copies none).
	 * Locked pages (mlockall) refuse: zeroed by hand then. */
	if (raw_syscall(SYS_madvise, (long)t->map, (long)t->map_len, MADV_DONTNEED, 0) != 0)
		memset(t->map, 0, t->map_len);
	else
		atomic_store_explicit(&t->populated, 0, memory_order_relaxed);
	zero_counters(t);
	raw_syscall(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, sizeof(old));
}
