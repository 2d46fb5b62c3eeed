/*
 * big_alloc.h - memory for the profiler's own buffers that can grow large (unwind and
 * symbol tables, module lists, the pprof encoder's buffers and maps), mapped directly
 * once they pass BIG_ALLOC_MAP_MIN instead of taken from glibc's malloc.
 *
 * Why: glibc's malloc serves a request above its mmap threshold (128 KiB by default)
 * with a mapping of its own, and when such a block is freed it raises the process's
 * mmap threshold to the block's size and its trim threshold to twice that (the dynamic
 * threshold, up to 32 MiB). One large buffer of ours freed by glibc would thus change
 * how the application's own allocations are served (from the heap instead of mappings)
 * and how often its heaps are given back to the kernel: its memory and speed, for the
 * rest of its life. Blocks below BIG_ALLOC_MAP_MIN come from malloc: glibc never maps
 * those unless the application lowered its threshold, which freezes it (mallopt).
 *
 * Every block carries a header saying which kind it is, so big_free and big_realloc
 * take any block of this module; a block of this module must never reach free() nor a
 * block of malloc big_free (the header is not checked against that).
 *
 * Context: normal context, any thread (no signal handler: malloc and mmap calls).
 */
#ifndef DDPROF_COMMON_BIG_ALLOC_H
#define DDPROF_COMMON_BIG_ALLOC_H

#include <stddef.h>
#include <stdint.h>

/* Blocks of this size and above (header included) are mapped: half glibc's default
 * mmap threshold, so that no block of ours reaches it. */
#define BIG_ALLOC_MAP_MIN ((size_t)64 * 1024)

/* As malloc, calloc, realloc and free (NULL and errno ENOMEM on failure; big_realloc
 * keeps the block on failure; big_realloc(p, 0) frees p and returns NULL). */
void *big_malloc(size_t size);
void *big_calloc(size_t n, size_t size);
void *big_realloc(void *p, size_t size);
void big_free(void *p);
/* The size a block of this module was last given (its malloc, calloc or realloc). */
size_t big_size(const void *p);

/* Bytes of the blocks mapped now, and the most there ever were (relaxed counters). */
struct big_alloc_stats {
	uint64_t mapped_bytes;
	uint64_t mapped_peak;
};
void big_alloc_stats(struct big_alloc_stats *out);

#endif
