/*
 * dw_memory.h - the memory libdw and libelf take: large blocks mapped by the profiler,
 * sorting without a buffer.
 *
 * Why: libelf decompresses a debug file's compressed DWARF (Debian's debug packages)
 * into blocks of hundreds of KiB to MiBs, and libdw builds tables as large for a big
 * compilation unit, all from malloc; the profiler gives them back after every profile
 * (agent/symbolize/sym_dwarf.h). glibc serves such a block with a mapping of its own and,
 * when it is freed, raises the process's mmap threshold to its size and the trim
 * threshold to twice that, for good (common/big_alloc.h): the application's large
 * allocations would come from its heap from then on, and its heap be given back less
 * often. glibc's qsort, which both libraries call, mallocs such a buffer for a large
 * array too.
 * How: the GOT slots of libdw and libelf for malloc, calloc, realloc, free,
 * posix_memalign and qsort point at functions of this module, set once right after
 * dw_api loads them and before any of their code runs: blocks of DW_MEMORY_MAP_MIN bytes
 * and more come from common/big_alloc.h (mapped, unmapped when freed, glibc never sees
 * them), each remembered until it is freed; smaller ones from malloc, as before; a block
 * freed or reallocated here that was not given out here (libc's strdup, realpath) goes
 * back to free or realloc. qsort is common/sort.h's.
 * A library the application had loaded before the profiler did is shared with it: left
 * alone (its calls are the application's), counted.
 * Only libdw and libelf: libz, liblzma and libbz2, loaded with them, are often the
 * application's too; their allocations for libdw are a few KiB of stream state.
 *
 * Context: dw_memory_install on the uploader thread (dw_api's load); the replacements
 * on whatever thread calls into libdw (the uploader thread; unit tests), under a mutex
 * of their own for the registry. Never a signal handler.
 */
#ifndef DDPROF_AGENT_DW_MEMORY_H
#define DDPROF_AGENT_DW_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Blocks of this size and more are mapped: half glibc's default mmap threshold. */
#define DW_MEMORY_MAP_MIN ((size_t)64 * 1024)

/* Before dlopen of libdw: notes which of libdw and libelf the process holds already
 * (the application's). */
void dw_memory_before_load(void);

/* After a successful dlopen of libdw (its handle): points the slots of libdw and libelf
 * (when dw_memory_before_load did not find them loaded) here. Returns the number of
 * modules whose slots were set. */
int dw_memory_install(void *libdw_handle);

/* Before dlclose of libdw: the modules go back to the hooks' walks (agent/alloc/got_patch.h),
 * as another library may be loaded at their address. Blocks still remembered stay valid
 * (they are the profiler's, freed here when libdw's destructors free them). */
void dw_memory_uninstall(void);

struct dw_memory_stats {
	uint64_t modules;	 /* modules whose slots point here (installs, cumulative) */
	uint64_t modules_shared; /* left alone: the application had loaded them */
	uint64_t slots;		 /* slots set */
	uint64_t slot_failures;	 /* slots left as they were: a RELRO page not writable */
	uint64_t blocks_mapped;	 /* large blocks given out (cumulative) */
	uint64_t live_blocks;	 /* remembered now */
	uint64_t peak_bytes;	 /* most bytes of large blocks live at once */
	uint64_t fallbacks;	 /* large requests served by malloc: the registry was full */
};
void dw_memory_get_stats(struct dw_memory_stats *out);

/* The debug log line of the stats, when debug logging is on. */
void dw_memory_log(void);

/* The replacements, exposed for the unit tests. */
void *dw_memory_malloc(size_t size);
void *dw_memory_calloc(size_t n, size_t size);
void *dw_memory_realloc(void *p, size_t size);
void dw_memory_free(void *p);
int dw_memory_posix_memalign(void **out, size_t align, size_t size);
/* Whether p is a large block given out here and not freed yet. */
bool dw_memory_owns(const void *p);

#endif
