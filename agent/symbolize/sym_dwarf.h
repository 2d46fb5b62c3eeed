/*
 * sym_dwarf.h - one module file seen through libdwfl: its symbols (with those of its
 * separate debug file), and the inlined frames, files and lines of an address.
 *
 * Owns: one Dwfl session per module file (dwfl_begin .. dwfl_end), the file reported at
 * its own link-time addresses (bias 0), so lookups take file virtual addresses and the
 * session does not depend on where, or whether, the file is mapped now. Separate debug
 * info is found on this machine the way dwfl_standard_find_debuginfo does: by build id
 * under /usr/lib/debug/.build-id, then by .gnu_debuglink next to the file, in its
 * .debug/ and under /usr/lib/debug (a candidate must match the build id, or the link's
 * CRC when either file has no build id). Never through debuginfod: the standard
 * callback ends with a server query when DEBUGINFOD_URLS is set, which would put
 * network downloads (of gigabytes, possibly) inside the profiled process.
 * Context: uploader thread only (and unit tests); libdw allocates and mmaps. Strings
 * returned point into libdw's data of this session: valid until sym_dwarf_close.
 */
#ifndef DDPROF_AGENT_SYM_DWARF_H
#define DDPROF_AGENT_SYM_DWARF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/symbolize/dw_api.h"
#include "agent/symbolize/sym_table.h"
#include "agent/symbolize/symbolizer.h"

struct sym_dwarf;

/* Opens a session on the file at path. NULL when libdwfl cannot read it (not ELF,
 * missing, malformed) or on allocation failure. */
struct sym_dwarf *sym_dwarf_open(const struct dw_api *api, const char *path);
void sym_dwarf_close(struct sym_dwarf *d);

/* Adds the module's function symbols (its .symtab, else its debug file's, plus .dynsym
 * and MiniDebugInfo as libdwfl finds them) to t (not finished). 0, -EINVAL, -ENOMEM. */
int sym_dwarf_read_symbols(struct sym_dwarf *d, struct sym_table *t);

/* True when DWARF debug info was found for the module (in it or a debug file). */
bool sym_dwarf_has_debug_info(struct sym_dwarf *d);

/*
 * Frames at file virtual address vaddr from DWARF, innermost first: one per inlined
 * subroutine, then the containing function. The innermost frame's file and line come
 * from the line table at vaddr; each outer frame's from the call site (DW_AT_call_file,
 * DW_AT_call_line) of the frame it inlines. Names are DWARF's (linkage name when there
 * is one, so possibly mangled; else DW_AT_name, through abstract origins). A frame's
 * function is NULL when DWARF has only a line there (assembly without a subprogram).
 * At most max frames (max >= 1): the innermost inlined ones and the containing
 * function are kept, middle ones dropped. Returns the count, 0 when no DWARF covers
 * vaddr; *error is set when libdw reported an error on the way.
 */
size_t sym_dwarf_frames(struct sym_dwarf *d, uint64_t vaddr, struct sym_frame *out, size_t max,
			bool *error);

#endif
