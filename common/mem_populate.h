/*
 * mem_populate.h - map in advance the pages of a buffer about to be written in full.
 *
 * Owns: one helper, for the big buffers the uploader thread builds (unwind tables,
 * symbol tables, pprof and gzip output). A page touched for the first time costs a
 * page fault (a trap into the kernel and back, per page); populated in one system call
 * (MADV_POPULATE_WRITE, Linux 5.14), a buffer's pages are mapped in one pass, for a
 * fraction of that each. Where the kernel lacks it, nothing happens.
 * Context: normal context, any thread; never a signal handler.
 */
#ifndef DDPROF_COMMON_MEM_POPULATE_H
#define DDPROF_COMMON_MEM_POPULATE_H

#include <stddef.h>

/* Below this, a buffer shares pages with others already mapped: not worth a call. */
#define MEM_POPULATE_MIN (64 * 1024)

/* Maps the whole pages inside [p, p + len) for writing, if len >= MEM_POPULATE_MIN.
 * Only memory the caller owns and is about to write: it is counted in its RSS. */
void mem_populate(void *p, size_t len);

/* Maps the whole pages inside [p, p + len) for reading (a file's mapping about to be
 * read in full: its pages from the page cache in one call), if len >= MEM_POPULATE_MIN. */
void mem_populate_read(const void *p, size_t len);

#endif
