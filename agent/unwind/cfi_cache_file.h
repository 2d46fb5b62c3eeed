/*
 * cfi_cache_file.h - the format of one unwind cache file, and the checks a file must
 * pass before a process spends memory on it.
 *
 * Owns: the file layout (one page of header, then the rows and the page index exactly
 * as a shared in-memory table holds them, cfi_table.c), the identity a file is keyed by
 * (struct cfi_cache_key), writing a table to a descriptor and reading one back.
 * agent/unwind/cfi_cache.c owns the directory: names, opening, the cleanup, counters, logging.
 *
 * A cache file is untrusted input: whoever can write the directory decides its bytes
 * (another program of the user, a restored backup, a disk that filled up, a
 * misconfigured shared directory). cfi_cache_file_read checks, before it allocates
 * anything:
 *   - what was opened (fstat on the descriptor, not on a path that could change): a
 *     regular file of this euid that nobody else may write, at most
 *     CFI_CACHE_HEADER_BYTES + CFI_CACHE_MAX_TABLE_BYTES long;
 *   - the header: magic, format version, row size, the module's identity, a row count
 *     within CFI_CACHE_MAX_TABLE_BYTES and within the module's own size (a row comes
 *     from at least one byte of the module's CFI: an instruction, or the FDE that
 *     starts or ends it), a page count that 32-bit pcs can reach, and a file size
 *     equal to what the counts give.
 * Then it reads the rows in steps of CFI_CACHE_READ_STEP, each checked before the next
 * is read: pcs strictly increasing (a sparse file of zeros costs one step of memory,
 * not its claimed size). Last, the page index must be exactly the one cfi_table.c
 * builds from those rows. A loaded table is thus one the builder could have made, so
 * every lookup stays within its rows (wrong rules give wrong unwinding, never a read
 * out of bounds: the unwinder checks each address against the stack).
 *
 * Does not: lock the file (files are written once, to a temporary name, then renamed:
 * readers never see a partial one), or map it (see cfi_cache.h).
 * Context: normal context only (uploader or module thread, tests, fuzzer). No state:
 * every call works on the descriptor it is given.
 */
#ifndef DDPROF_AGENT_CFI_CACHE_FILE_H
#define DDPROF_AGENT_CFI_CACHE_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/unwind/cfi_table.h"

/* The header takes one page: the rows start page-aligned in the file. */
#define CFI_CACHE_HEADER_BYTES 4096
/* Bumped with any change to struct cfi_row, the page index or the header. */
#define CFI_CACHE_VERSION 2
/*
 * The most table bytes (rows and page index) a cache file may make a process allocate
 * and read. The biggest table of a Debian 12 library is libLLVM-15's: 11.3 MiB (979k
 * rows, from a 112 MiB file); 64 MiB leaves it room to grow fivefold. A module with a
 * bigger table is built in each process and never kept.
 */
#define CFI_CACHE_MAX_TABLE_BYTES (64u << 20)
/* Rows are read and checked this many bytes at a time: the most memory a file whose
 * rows turn out bad can make us touch. */
#define CFI_CACHE_READ_STEP (256u << 10)

/* The identity of a module's file: a file rewritten in place has a new ctime, another
 * file with the same bytes another inode. path_hash: FNV-1a of the path it was loaded
 * from. */
struct cfi_cache_key {
	uint64_t dev, ino, size, mtime_ns, ctime_ns;
	uint64_t path_hash;
};

/* The start of the file's first page (the rest of the page is zeros). */
struct cfi_cache_header {
	char magic[8]; /* CFI_CACHE_MAGIC */
	uint32_t version;
	uint32_t row_size; /* sizeof(struct cfi_row) */
	struct cfi_cache_key key;
	uint64_t base;	/* struct cfi_table's */
	uint64_t nrows; /* rows after the header, then npages uint32_t of page index */
	uint32_t npages, fdes, fdes_skipped, rows_unsupported;
};
#define CFI_CACHE_MAGIC "DDPCFI\0"

/* The identity of the file at path now (stat: a module's path may be a link); false
 * when it is not a regular file. */
bool cfi_cache_file_key(const char *path, struct cfi_cache_key *k);

/* A 64-bit hash of the whole key (the cache file's name). */
uint64_t cfi_cache_file_key_hash(const struct cfi_cache_key *k);

/*
 * Checks the file open on fd (see the top of this file) as the cache file of the module
 * k identifies, then reads its table into anonymous memory of ours. On success, 0 and
 * *out a table cfi_table_free frees. Otherwise *out is zeroed, *why a static phrase
 * saying what was wrong, and the result:
 *   -EPERM   not a regular file, another user's, or writable by group or others;
 *   -EFBIG   the table would take more than CFI_CACHE_MAX_TABLE_BYTES, or more rows
 *            than the module has bytes;
 *   -ESTALE  another format version (what an upgrade of libddprof leaves behind);
 *   -EINVAL  anything else malformed (magic, module identity, sizes, rows, index);
 *   another negative errno when a system call failed (-EIO: shorter than fstat said).
 */
int cfi_cache_file_read(int fd, const struct cfi_cache_key *k, struct cfi_table *out,
			const char **why);

/* Writes t, built from the module k identifies, to fd (at its current offset, which
 * must be 0). 0 or a negative errno. */
int cfi_cache_file_write(int fd, const struct cfi_cache_key *k, const struct cfi_table *t);

#endif
