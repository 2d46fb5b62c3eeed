/*
 * symbolizer.h - from pcs to modules, functions (inlined ones too), files and lines.
 *
 * Owns: the executable mappings of the process (from /proc/self/maps, plus mappings
 * the caller notes because they were unmapped before serialization), one entry per
 * module file (ELF facts, function symbols, a libdwfl session, a pc -> frames cache),
 * kept across uploads so steady-state symbolization does almost no ELF or DWARF work.
 *  - With libdw (dlopen'd on the first symbolization, never linked): function names
 *    from the symbol tables of the module and of its separate debug file, inlined
 *    frames, files and lines from DWARF. Without it: names from the module's own
 *    .symtab/.dynsym (libelf), one frame per pc.
 *  - The vdso (no file) is named from its image in this process's memory, by libelf.
 *  - JIT code (a pc in no module file) is named from the process's perf map,
 *    /tmp/perf-<pid>.map (agent/symbolize/perf_map.h), read at each refresh; the
 *    anonymous mappings it covers are shown as "[jit]".
 *  - C++ names are demangled. A pc of a program's entry code that no symbol covers is
 *    named "_start" (stripped programs; see symbolizer.c for the rule).
 *  - Memory: the pc caches have a byte budget, checked at each refresh: past it every
 *    cache is cleared (and refilled by the next upload). libdwfl sessions unused for a
 *    few refreshes are ended, modules unmapped for longer are forgotten.
 * One owner (the uploader thread) creates, refreshes, queries and frees it, as libdwfl's
 * dwfl_begin/dwfl_end. Context: uploader thread only; never a signal handler.
 */
#ifndef DDPROF_AGENT_SYMBOLIZER_H
#define DDPROF_AGENT_SYMBOLIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Frames kept per pc (inlining deeper than this keeps the innermost and the function). */
#define SYM_MAX_FRAMES 32
/* Default byte budget of the pc caches of all modules together. */
#define SYM_CACHE_DEFAULT_LIMIT ((size_t)16 << 20)

struct symbolizer;

struct sym_mapping {
	uintptr_t start, end, offset; /* as in /proc/self/maps */
	const char *path;	      /* module file, or "[vdso]" etc.; owned by the symbolizer */
	const char *build_id;	      /* lowercase hex, "" when unknown; owned by the symbolizer */
};

/* One frame of a pc. Strings are owned by the symbolizer. */
struct sym_frame {
	const char *function; /* demangled; never NULL in symbolizer_frames results */
	const char *file;     /* source file as DWARF names it, NULL when unknown */
	int line;	      /* 1-based, 0 when unknown */
};

struct symbolizer_stats {
	uint64_t lookups;	      /* symbolizer_frames calls on pcs inside a module */
	uint64_t cache_hits;	      /* ... answered from the cache */
	uint64_t dwarf_lookups;	      /* misses resolved with libdw (the DWARF work) */
	uint64_t elf_lookups;	      /* misses resolved from symbol tables only */
	uint64_t errors;	      /* unreadable files, libdw errors, allocation failures */
	uint64_t cache_flushes;	      /* times the budget was exceeded and the caches cleared */
	uint64_t dwfl_sessions_ended; /* idle libdwfl sessions ended */
	uint64_t resolve_cpu_ns;      /* uploader CPU time spent resolving misses */
	uint64_t resolve_wall_ns;     /* ... and wall time (includes waiting for a core) */
	uint64_t tables_read;	      /* module symbol tables read (once per module file) */
	uint64_t jit_frames;	      /* pcs named from the perf map (JIT code) */
	size_t cache_entries;	      /* pcs cached now */
	size_t cache_bytes;	      /* bytes of the pc caches now */
	bool libdw;		      /* libdw was loaded */
};

struct symbolizer *symbolizer_new(void);
void symbolizer_free(struct symbolizer *s);

/* Re-reads the executable mappings (modules may have been loaded or unloaded) and drops
 * the noted ones, and reads what is new in the perf map. Module caches survive. Applies
 * the memory budget (see above). Returns
 * the number of mappings or a negative errno. Invalidates strings of earlier results. */
int symbolizer_refresh(struct symbolizer *s);
/* Reads what is new in the process's perf map (names of JIT code), without the
 * mappings: names read now stay when the map is later removed or rewritten. Between
 * refreshes, on the symbolizer's thread. */
void symbolizer_refresh_jit(struct symbolizer *s);
/* Ends every libdwfl session now, giving back the DWARF data they hold (often several
 * MiB of decompressed debug sections), and unloads libdw (agent/symbolize/dw_api.h); the pc
 * caches stay, and sessions reopen when a new pc needs them. Each fork copies the page
 * tables of all that memory and those libraries, and the child may copy pages. */
void symbolizer_release_dwarf(struct symbolizer *s);
/* On: misses are named from the symbol tables only (the separate debug file's
 * included), without DWARF's files, lines and inlined frames, whose sections a first
 * use decompresses (long, for a debug file as large as libc's). For the last profile
 * of a process that holds little: a short-lived fork child must not spend that long in
 * its exit.
 * Such results are cached like the others: nothing symbolizes after a last profile. */
void symbolizer_set_names_only(struct symbolizer *s, bool on);
/* Names only: names pcs[0..n) (is_return[i]: pcs[i] is a return address) module by
 * module, each module's in one pass over its symbols, into the caches symbolizer_frames
 * then answers from. Nothing otherwise. */
void symbolizer_prime(struct symbolizer *s, const uintptr_t *pcs, const bool *is_return, size_t n);
bool symbolizer_names_only(const struct symbolizer *s);

/*
 * Adds an executable mapping that /proc/self/maps no longer shows (a library dlopen'd
 * and dlclose'd within one upload period), read from the file at path: start..end
 * mapped file_offset of it. Usable by symbolizer_find_mapping and symbolizer_frames
 * until the next refresh; call it after symbolizer_refresh. A mapping that overlaps one
 * already known is refused (-EEXIST: a live mapping of /proc/self/maps, or the first
 * one noted, wins: pcs there cannot tell which file they ran in); noting the same
 * mapping twice is harmless. Returns the mapping index or a negative errno (-EINVAL for
 * a bad range or a relative path, -ENOMEM).
 */
int symbolizer_note_module(struct symbolizer *s, const char *path, uintptr_t start, uintptr_t end,
			   uintptr_t file_offset);

/* Mapping index (into symbolizer_mapping) holding pc, or -1. The mapping's module is
 * read the first time (its build id, its segments). */
int symbolizer_find_mapping(struct symbolizer *s, uintptr_t pc);
const struct sym_mapping *symbolizer_mapping(const struct symbolizer *s, int idx);
size_t symbolizer_mapping_count(const struct symbolizer *s);
/* 1 when the module of mapping idx has DWARF (so its pcs carry inlined frames and
 * lines), 0 when it has none, -1 when not known yet (no pc of it was looked up). */
int symbolizer_mapping_debug_info(const struct symbolizer *s, int idx);

/*
 * Frames of pc, innermost (inlined) first, the function holding the code last; at most
 * max (SYM_MAX_FRAMES is always enough). Returns the count, 0 when the pc cannot be
 * named (no module, or no symbol or DWARF covers it): the caller keeps the mapping and
 * address. is_return_address: pc came from a caller frame; it is looked up at pc - 1 so
 * a call at the very end of a function is attributed to that function and to the line
 * of the call. A pc in no module file gets its perf map name, if any (one frame, no
 * file). Strings stay valid until the next symbolizer_refresh or symbolizer_free.
 */
size_t symbolizer_frames(struct symbolizer *s, uintptr_t pc, bool is_return_address,
			 struct sym_frame *out, size_t max);

/*
 * Reads the symbol table of the module holding pc now, as its first miss would, without
 * looking anything up (nothing is cached, no DWARF is read for lines). For the code a
 * forking process's children run: a child adopts its parent's symbolizer, and one that
 * exits after a few samples then names them without reading a table (libc's, with its
 * debug file, is 13k symbols: milliseconds added to each sampled child's exit).
 * Returns 1 when the table was read now (or found unreadable: it is not tried again),
 * 0 when it had been, -ENOENT when no module file holds pc.
 */
int symbolizer_warm(struct symbolizer *s, uintptr_t pc);

/* JIT names by epoch (agent/symbolize/perf_map.h, Epochs): the perf map's epoch now
 * (0 without a map); whether pc was named otherwise at epoch; its frame as named then
 * (0 or 1 frame); forgetting names only epochs before epoch need. */
uint32_t symbolizer_jit_epoch(const struct symbolizer *s);
bool symbolizer_jit_renamed(const struct symbolizer *s, uintptr_t pc, bool is_return_address,
			    uint32_t epoch);
size_t symbolizer_jit_frames_at(struct symbolizer *s, uintptr_t pc, bool is_return_address,
				uint32_t epoch, struct sym_frame *out, size_t max);
void symbolizer_jit_prune(struct symbolizer *s, uint32_t epoch);
/* The span of the addresses the perf map's last renaming pass renamed (empty: none). */
void symbolizer_jit_last_span(const struct symbolizer *s, uint64_t *lo, uint64_t *hi);

/* Name of the function holding pc (the last of its frames), or NULL. Same lifetime. */
const char *symbolizer_function(struct symbolizer *s, uintptr_t pc, bool is_return_address);

/* Budget of the pc caches in bytes (default SYM_CACHE_DEFAULT_LIMIT), applied at the
 * next refresh. */
void symbolizer_set_cache_limit(struct symbolizer *s, size_t bytes);

/* Cache statistics. */
void symbolizer_get_stats(const struct symbolizer *s, struct symbolizer_stats *out);
size_t symbolizer_module_count(const struct symbolizer *s);
/* Heap bytes held by the symbolizer itself: module tables, symbol tables, pc caches,
 * mappings (libdw's own memory for open sessions is not counted). */
size_t symbolizer_bytes(const struct symbolizer *s);

#endif
