/*
 * big_alloc.c - the profiler's large buffers, mapped directly (see big_alloc.h).
 * Context: normal context, any thread.
 */
#include "common/big_alloc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/page_size.h"

/* Before every block: its kind and sizes. 16 bytes keep malloc's alignment. */
struct big_header {
	uint64_t size;	 /* bytes the caller asked for */
	uint64_t mapped; /* bytes of the mapping, header included; 0: from malloc */
};
#define HDR sizeof(struct big_header)

/* Relaxed: statistics only, read for the diagnostics. */
static _Atomic uint64_t mapped_bytes, mapped_peak;

static void count_mapped(int64_t delta)
{
	uint64_t now =
	    atomic_fetch_add_explicit(&mapped_bytes, (uint64_t)delta, memory_order_relaxed) +
	    (uint64_t)delta;
	uint64_t peak = atomic_load_explicit(&mapped_peak, memory_order_relaxed);
	while (now > peak &&
	       !atomic_compare_exchange_weak_explicit(&mapped_peak, &peak, now,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

static struct big_header *header_of(void *p)
{
	return (struct big_header *)((char *)p - HDR);
}

/* Bytes of a mapping that holds size bytes and the header, or 0 on overflow. */
static size_t mapping_for(size_t size)
{
	size_t page = page_size();
	if (size > SIZE_MAX - HDR - page)
		return 0;
	return (size + HDR + page - 1) & ~(page - 1);
}

static void *block_new(size_t size, bool zero)
{
	if (size > SIZE_MAX - HDR) {
		errno = ENOMEM;
		return NULL;
	}
	struct big_header *h;
	if (size + HDR < BIG_ALLOC_MAP_MIN) {
		h = zero ? calloc(1, size + HDR) : malloc(size + HDR);
		if (!h)
			return NULL;
		h->mapped = 0;
	} else {
		size_t len = mapping_for(size);
		h = len ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			       0)
			: MAP_FAILED;
		if (h == MAP_FAILED) {
			errno = ENOMEM;
			return NULL;
		}
		h->mapped = len;
		count_mapped((int64_t)len);
	}
	h->size = size;
	return h + 1;
}

void *big_malloc(size_t size)
{
	return block_new(size, false);
}

void *big_calloc(size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size) {
		errno = ENOMEM;
		return NULL;
	}
	return block_new(n * size, true); /* a fresh mapping is zero already */
}

size_t big_size(const void *p)
{
	return ((const struct big_header *)p - 1)->size;
}

void big_free(void *p)
{
	if (!p)
		return;
	struct big_header *h = header_of(p);
	if (h->mapped == 0) {
		free(h);
		return;
	}
	size_t len = h->mapped;
	munmap(h, len);
	count_mapped(-(int64_t)len);
}

void *big_realloc(void *p, size_t size)
{
	if (!p)
		return big_malloc(size);
	if (size == 0) {
		big_free(p);
		return NULL;
	}
	struct big_header *h = header_of(p);
	if (size > SIZE_MAX - HDR) {
		errno = ENOMEM;
		return NULL;
	}
	bool small = size + HDR < BIG_ALLOC_MAP_MIN;
	if (h->mapped == 0 && small) {
		struct big_header *n = realloc(h, size + HDR);
		if (!n)
			return NULL;
		n->size = size;
		return n + 1;
	}
	if (h->mapped != 0 && !small) {
		size_t len = mapping_for(size);
		if (len == 0) {
			errno = ENOMEM;
			return NULL;
		}
		if (len != h->mapped) {
			/* mremap moves the pages, no copy; the old mapping stays on failure. */
			size_t old = h->mapped; /* h is gone once the mapping moved */
			void *n = mremap(h, old, len, MREMAP_MAYMOVE);
			if (n == MAP_FAILED) {
				errno = ENOMEM;
				return NULL;
			}
			count_mapped((int64_t)len - (int64_t)old);
			h = n;
			h->mapped = len;
		}
		h->size = size;
		return h + 1;
	}
	/* From one kind to the other: a new block, the common bytes copied. */
	void *n = big_malloc(size);
	if (!n)
		return NULL;
	memcpy(n, p, h->size < size ? h->size : size);
	big_free(p);
	return n;
}

void big_alloc_stats(struct big_alloc_stats *out)
{
	out->mapped_bytes = atomic_load_explicit(&mapped_bytes, memory_order_relaxed);
	out->mapped_peak = atomic_load_explicit(&mapped_peak, memory_order_relaxed);
}
