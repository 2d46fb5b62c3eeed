/*
 * cfi_cache.h - unwind tables kept on disk, shared by every process that loads the same
 * file.
 *
 * Owns: one directory of table files (DD_PROFILING_UNWIND_CACHE_DIR) and their names
 * (the format of a file: cfi_cache_file.h).
 * Building the table of libc costs each new process milliseconds of CPU on the uploader
 * thread, early, while the application starts (BENCHMARKS.md); an exec-heavy workload (a
 * build, a shell script, a pre-fork server restarted often) pays it in every process.
 * A table loaded from the cache is two opens (directory, file), two fstats and a few
 * reads into memory of our own: never a mapping of the file, since the signal handler
 * reads tables and a mapped file can be truncated under it (SIGBUS) or live on a slow
 * network file system. Only tables of CFI_CACHE_MIN_BYTES or more are kept: a load has
 * a fixed cost (the opens, the reads, the page faults of our copy), more than building
 * a small table (ld.so's) takes, while a large one (libc's) takes several times longer
 * to build than to load.
 *
 * A file is named for its module's path and identity (device, inode, size, mtime and
 * ctime: a rewritten file has a new ctime) and holds them again in its header, with the
 * table format's version. Files are untrusted input (agent/unwind/cfi_cache_file.h lists what
 * is checked, on the opened descriptor, before any memory is spent on one); the
 * directory is opened without following a link and used only when it belongs to this
 * user and nobody else may write it. A refused file or directory is counted
 * (cfi_cache_get_stats: refused) and the process's first refusal logged as one
 * warning; its table is then built as without a cache (and a refused file replaced by
 * the store that follows). A file of another format version, what an upgrade leaves,
 * is counted but not warned about.
 * Files are written to a temporary name and renamed: readers see whole files only.
 * A process that stores also removes the files no process loaded for 30 days, once.
 * A directory that cannot be created is tried once per process.
 *
 * Context: uploader thread (and tests); one caller at a time is not required (every
 * call works on its own file descriptors), but cfi_cache_set_dir must come first.
 */
#ifndef DDPROF_AGENT_CFI_CACHE_H
#define DDPROF_AGENT_CFI_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/unwind/cfi_table.h"

#define CFI_CACHE_MIN_BYTES (64 * 1024)

/* The directory ("" turns the cache off), created (0700) at the first store. The string
 * is not copied: it must outlive every other call. */
void cfi_cache_set_dir(const char *dir);

/* The table of the file at path from the cache: 0, -ENOENT when there is none (or
 * the cache is off), or another negative errno when a file (or the directory) was
 * there but refused (counted: cfi_cache_get_stats). On success out is a table
 * cfi_table_free frees. */
int cfi_cache_load(const char *path, struct cfi_table *out);

/* Keeps t, built from the file at path, when its size is within CFI_CACHE_MIN_BYTES
 * and CFI_CACHE_MAX_TABLE_BYTES. 0 or a negative errno (failures are counted; the
 * first one is logged). */
int cfi_cache_store(const char *path, const struct cfi_table *t);

struct cfi_cache_stats {
	uint64_t hits, misses, refused, stored, store_failures;
};
void cfi_cache_get_stats(struct cfi_cache_stats *out);

#endif
