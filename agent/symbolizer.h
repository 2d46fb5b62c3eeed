/*
 * symbolizer.h - from pcs to modules and function names, with a per-module cache.
 *
 * Owns: the list of executable mappings of the process (from /proc/self/maps), one
 * cache entry per module file (ELF symbol tables from .symtab and .dynsym via libelf,
 * build id, PT_LOAD segments), kept across uploads so steady-state symbolization reads
 * no ELF. One owner (the uploader thread) creates it, refreshes it, and frees it, as
 * libdwfl's dwfl_begin/dwfl_end.
 * Context: uploader thread only; never a signal handler.
 */
#ifndef DDPROF_AGENT_SYMBOLIZER_H
#define DDPROF_AGENT_SYMBOLIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct symbolizer;

struct sym_mapping {
	uintptr_t start, end, offset; /* as in /proc/self/maps */
	const char *path; /* module file, or "[vdso]" etc.; owned by the symbolizer */
	const char *build_id; /* lowercase hex, "" when unknown; owned by the symbolizer */
};

struct symbolizer *symbolizer_new(void);
void symbolizer_free(struct symbolizer *s);

/* Re-reads the executable mappings (modules may have been loaded or unloaded). Module
 * caches survive. Returns the number of mappings or a negative errno. */
int symbolizer_refresh(struct symbolizer *s);

/* Mapping index (into symbolizer_mapping) holding pc, or -1. */
int symbolizer_find_mapping(const struct symbolizer *s, uintptr_t pc);
const struct sym_mapping *symbolizer_mapping(const struct symbolizer *s, int idx);
size_t symbolizer_mapping_count(const struct symbolizer *s);

/*
 * Name of the function holding pc (NULL when the module has no symbol covering it).
 * is_return_address: pc came from a caller frame; it is looked up at pc - 1 so a call
 * at the very end of a function is attributed to that function. The string is owned
 * by the symbolizer and valid until symbolizer_free.
 */
const char *symbolizer_function(struct symbolizer *s, uintptr_t pc, bool is_return_address);

/* Cache statistics. */
size_t symbolizer_module_count(const struct symbolizer *s);
size_t symbolizer_bytes(const struct symbolizer *s);

#endif
