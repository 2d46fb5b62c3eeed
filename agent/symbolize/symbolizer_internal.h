/*
 * symbolizer_internal.h - what the symbolizer's files share (symbolizer.c, the
 * symbolizer; sym_short.c, a short process's naming): its modules, mappings and state.
 * Not for use outside agent/symbolize/.
 * Context: as symbolizer.h (the uploader thread).
 */
#ifndef DDPROF_AGENT_SYMBOLIZER_INTERNAL_H
#define DDPROF_AGENT_SYMBOLIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/symbolize/sym_cache.h"
#include "agent/symbolize/sym_dwarf.h"
#include "agent/symbolize/sym_elf.h"
#include "agent/symbolize/sym_table.h"
#include "agent/symbolize/symbolizer.h"

#define ENTRY_CODE_MAX 64 /* bytes of entry code named _start (see above) */
#define START_NAME "_start"
/* Names only: a module's lookups answered by searching its file in place before its
 * table is built (each reads every symbol: cheaper for a few pcs, not for many). */
#define SCAN_LOOKUPS_MAX 32
#define SCAN_NAME_MAX 1024 /* bytes of a name found that way (C++ names can be long) */
/* A libdwfl session unused for this many refreshes is ended (its DWARF data and
 * mmaps freed); the next miss in its module reopens it. */
#define DWFL_IDLE_REFRESHES 4
/* A module neither mapped nor noted for this many refreshes is forgotten. */
#define MODULE_IDLE_REFRESHES 16
#define MAPS_LINE_MAX (4096 + 128) /* PATH_MAX plus the fields before the path */
#define VDSO_NAME "[vdso]"
#define ANON_NAME "[anon]" /* anonymous executable memory the perf map does not cover */
#define JIT_NAME "[jit]"   /* ... and memory it covers */

struct module {
	char *path;
	unsigned long inode;
	const void *image; /* the vdso: read from this process's memory, not a file */
	size_t image_size;
	struct sym_elf_info elf;
	bool symbols_read;
	struct sym_table syms;
	/* Names only (a short process's one profile): its first lookups search the file in
	 * place (names_only_scan), then the table is built. */
	struct sym_elf_scan *scan;
	unsigned scan_lookups;
	bool scan_failed;
	struct sym_dwarf *dw; /* NULL: not opened yet, ended while idle, or failed */
	bool dw_failed;	      /* libdwfl cannot read the file: symbols from libelf, no retry */
	int debug_info;	      /* -1 unknown, 0 no DWARF, 1 DWARF */
	struct sym_cache cache;
	uint64_t seen_gen;    /* last refresh that mapped (or noted) it */
	uint64_t dw_used_gen; /* last refresh generation its session was used in */
};

struct mapping_entry {
	struct sym_mapping pub;
	struct module *mod; /* NULL for anonymous ([vdso], JIT), or not read yet: */
	/* A file not seen before: its module is read (headers, build id) when a pc first
	 * falls in it (symbolizer_find_mapping), not for every mapping of the process. */
	char *pending_path;
	unsigned long pending_inode;
	int64_t vaddr_delta; /* vaddr = pc + vaddr_delta */
	bool delta_known;
};

struct symbolizer {
	struct module **mods;
	size_t nmods, capmods;
	struct mapping_entry *maps; /* sorted by start, never overlapping */
	size_t nmaps, capmaps;
	const struct dw_api *api;
	bool api_tried;
	bool names_only;      /* symbolizer_set_names_only */
	struct perf_map *jit; /* the perf map; NULL until the first refresh, or no memory */
	uint64_t gen;	      /* refresh count */
	size_t cache_limit;
	struct symbolizer_stats st;
};

/* A short process's naming (sym_short.c): m's table from its debug file or itself by
 * libelf (0, or a negative errno: then libdw is asked); one address searched in place
 * (false: not this way, the table is needed). */
int sym_short_symbols(struct module *m);
/* Opens m's in-place search (m->scan) if it may still be used: true when it is open. */
bool sym_short_open(struct module *m);
bool sym_short_scan(struct module *m, uint64_t vaddr, struct sym_frame *fr, char *buf, size_t len);

#endif
