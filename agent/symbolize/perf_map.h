/*
 * perf_map.h - names of JIT code from the process's perf map, /tmp/perf-<pid>.map.
 *
 * Owns: the entries of one perf map file (the format perf reads: one line per piece
 * of code, `START SIZE name`, START and SIZE hexadecimal with or without 0x, the name
 * to the end of the line), kept as a sorted array of non-overlapping ranges searched by
 * bisection, and what was read of the file (identity, size, modification time, offset
 * of the first line not parsed yet), so each pass reads only what was appended.
 *  - Later lines win: a JIT reuses memory, so a range that a later line covers takes
 *    that line's name, and the older range keeps only the parts nothing newer covers.
 *  - Growth is read from where the last pass stopped; a file that shrank, was rewritten
 *    in place (its bytes before that point changed) or was replaced (another device or
 *    inode) is read again from its start. A line counts once its newline is written.
 *  - The file is untrusted: it is used only when it is a regular file (not followed
 *    through a symbolic link), owned by the effective user, writable by nobody else,
 *    and at most PERF_MAP_FILE_MAX bytes; otherwise it is ignored, its entries dropped,
 *    with one warning per process (see perf_map_refresh) and a count. Lines longer
 *    than PERF_MAP_LINE_MAX, or that do not parse, are skipped and counted (the first
 *    pass that skips some says so in one warning per process); names are
 *    cut at PERF_MAP_NAME_MAX bytes and made printable UTF-8 (other bytes become '?').
 *    Lines are taken while the ranges kept and the pass's lines number fewer than
 *    PERF_MAP_ENTRIES_MAX (a line nested in an older range splits it in two, so ranges
 *    stay under twice that); later lines are counted and dropped.
 *  - What it does not do: it does not watch the file (the owner refreshes it once per
 *    upload), nor keep names of a map the process no longer has a right to (refused).
 * One owner, the symbolizer (agent/symbolize/symbolizer.c), creates, refreshes, queries
 * and frees it. Context: uploader thread only (and unit tests); malloc, file I/O; never a
 * signal handler. The process-wide counters (perf_map_get_totals) are relaxed atomics
 * any thread may read.
 */
#ifndef DDPROF_AGENT_PERF_MAP_H
#define DDPROF_AGENT_PERF_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Files larger than this are refused whole: a sparse or runaway file must cost neither
 * the memory nor the time of reading it. V8 with --perf-basic-prof writes ~100 bytes
 * per compiled function: 64 MiB is over half a million of them. */
#define PERF_MAP_FILE_MAX ((uint64_t)64 << 20)
/* A line longer than this is skipped (a name that long is not a name). */
#define PERF_MAP_LINE_MAX 4096
/* Names are cut to this many bytes (Java and JavaScript signatures stay under it). */
#define PERF_MAP_NAME_MAX 1024
/* Ranges kept at most (24 bytes each, 12 MiB; twice that while merging a read). */
#define PERF_MAP_ENTRIES_MAX ((size_t)1 << 19)

/* Retired entries kept at most (pruned as the profiles that need them are built). */
#define PERF_MAP_RETIRED_MAX ((size_t)1 << 16)

struct perf_map;

/*
 * Epochs: a JIT reuses memory for other code and writes a new line for it; what ran
 * there before the line was read must keep the old name. A pass that gives part of a
 * range another name keeps that part, with its old name, as retired, and starts a new
 * epoch (perf_map_epoch: the passes that retired something). A sample taken while the
 * epoch was e is named, for each pc, by the earliest entry retired after e that covers
 * it, else by the current ranges (perf_map_find_at). The owner records which epoch its
 * counts belong to (uploader/jit_splits.h) and prunes what no count needs any more.
 */
struct perf_map_retired {
	uint64_t start, end;
	uint32_t name;	/* offset in the name arena */
	uint32_t until; /* the epoch that retired it: it names epochs before */
};

/* What one perf map saw since it was created. */
struct perf_map_stats {
	uint64_t lines;	    /* lines parsed into entries */
	uint64_t bad_lines; /* lines skipped: malformed, too long, zero size, overflow */
	uint64_t dropped;   /* good lines dropped: past PERF_MAP_ENTRIES_MAX */
	uint64_t rejects;   /* passes that found the file and refused it (untrusted, huge) */
	uint64_t rereads;   /* passes that read the file from its start again */
	uint64_t bytes_read;
	size_t entries; /* ranges kept now */
};

/* Process-wide totals of every perf map, for ddprof_get_diagnostics. */
struct perf_map_totals {
	uint64_t rejects;   /* as perf_map_stats.rejects */
	uint64_t bad_lines; /* as perf_map_stats.bad_lines */
	uint64_t frames;    /* pcs named from a perf map (perf_map_find hits) */
};

/* NULL when out of memory. Nothing is read until the first refresh. */
struct perf_map *perf_map_new(void);
void perf_map_free(struct perf_map *pm);

/*
 * Reads what is new in /tmp/perf-<pid>.map, pid being getpid() now: in a fork child,
 * whose pid differs from the one of the last refresh, every entry of the parent's map
 * is dropped first and the child's own file read (the warning allowance too is the
 * child's). No file: nothing changes, silently (a process without JIT, or one that
 * removed its map keeps the names read so far). A refused file: its entries are
 * dropped and the first refusal of the process gets one warning line.
 * Returns the number of ranges kept, or a negative errno: -EPERM for a refused file,
 * -ENOMEM (the entries are dropped, and the next pass reads the file from its start).
 * Invalidates the names earlier perf_map_find calls returned.
 */
int perf_map_refresh(struct perf_map *pm);
/* The same for the file at path, whatever the pid (unit tests). */
int perf_map_refresh_path(struct perf_map *pm, const char *path);

/* The name of the range holding addr, or NULL. Valid until the next refresh or free. */
const char *perf_map_find(struct perf_map *pm, uintptr_t addr);
/* True when some range intersects [start, end). */
bool perf_map_overlaps(const struct perf_map *pm, uintptr_t start, uintptr_t end);
/* The name of addr at epoch (see Epochs above); perf_map_find at the current epoch. */
const char *perf_map_find_at(struct perf_map *pm, uintptr_t addr, uint32_t epoch);
/* Whether addr had another name at epoch than it has now. */
bool perf_map_renamed_since(const struct perf_map *pm, uintptr_t addr, uint32_t epoch);
uint32_t perf_map_epoch(const struct perf_map *pm);
/* [lo, hi): the addresses the last pass that retired something retired within (empty
 * before any). */
void perf_map_last_span(const struct perf_map *pm, uint64_t *lo, uint64_t *hi);
/* Forgets the retired entries that name only epochs before epoch. */
void perf_map_prune(struct perf_map *pm, uint32_t epoch);

void perf_map_get_stats(const struct perf_map *pm, struct perf_map_stats *out);
/* Heap bytes held: ranges and names. */
size_t perf_map_bytes(const struct perf_map *pm);
/* Any thread. */
void perf_map_get_totals(struct perf_map_totals *out);

#endif
