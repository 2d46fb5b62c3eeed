/*
 * dw_api.h - libdw/libdwfl loaded at run time: the table of the functions we call.
 *
 * Owns: the dlopen of libdw.so.1 and the function pointers resolved from it, and the
 * count of open libdwfl sessions: dw_api_unload closes the library (and libelf, libz,
 * liblzma and libbz2 with it) when none is open, so that a process that forks does not
 * copy their 25 mappings at every fork between two uploads; the next dw_api_get loads
 * it again (a small cost next to the symbolization that needs it). The library is not
 * linked (the injected library stays cheap to load: a process that never symbolizes
 * never maps it); <elfutils/libdwfl.h> is included for types only. The first
 * dw_api_get() loads it; when libdw is missing or lacks a function, every later call
 * returns NULL at once and the symbolizer falls back to libelf symbol tables.
 * Context: uploader thread only (and unit tests), one caller at a time: the state is a
 * plain static, no lock, so a fork can never inherit it locked. Never a signal handler.
 */
#ifndef DDPROF_AGENT_DW_API_H
#define DDPROF_AGENT_DW_API_H

#include <stdbool.h>

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

/* The soname loaded by default. */
#define DW_API_SONAME "libdw.so.1"

/* Every function of libdw/libdwfl the symbolizer uses; one member per function, of the
 * function's own type (taken from the elfutils headers), named like it. */
#define DW_API_FUNCS(X)                                                                            \
	X(dwfl_begin)                                                                              \
	X(dwfl_end)                                                                                \
	X(dwfl_errno)                                                                              \
	X(dwfl_errmsg)                                                                             \
	X(dwfl_report_begin)                                                                       \
	X(dwfl_report_elf)                                                                         \
	X(dwfl_report_end)                                                                         \
	X(dwfl_build_id_find_debuginfo)                                                            \
	X(dwfl_module_info)                                                                        \
	X(dwfl_module_getsymtab)                                                                   \
	X(dwfl_module_getsym_info)                                                                 \
	X(dwfl_module_getdwarf)                                                                    \
	X(dwfl_module_addrdie)                                                                     \
	X(dwfl_module_getsrc)                                                                      \
	X(dwfl_lineinfo)                                                                           \
	X(dwarf_getscopes)                                                                         \
	X(dwarf_tag)                                                                               \
	X(dwarf_attr)                                                                              \
	X(dwarf_attr_integrate)                                                                    \
	X(dwarf_formstring)                                                                        \
	X(dwarf_formudata)                                                                         \
	X(dwarf_diecu)                                                                             \
	X(dwarf_getsrcfiles)                                                                       \
	X(dwarf_filesrc)

struct dw_api {
#define DW_API_MEMBER(name) __typeof__(name) *name;
	DW_API_FUNCS(DW_API_MEMBER)
#undef DW_API_MEMBER
};

/* The loaded table, or NULL when libdw cannot be used (tried once). Valid until
 * dw_api_unload. */
const struct dw_api *dw_api_get(void);

/* Around every libdwfl session (sym_dwarf_open / sym_dwarf_close). */
void dw_api_session_opened(void);
void dw_api_session_closed(void);
/* Fork child whose uploader does not adopt the parent's symbolizer: the sessions
 * counted belong to a thread that is not here. */
void dw_api_forget_sessions(void);

/* Fork child, when the parent's uploader may have been inside libdw at the fork (it
 * was serializing or warming): this process never calls libdw (dw_api_get returns
 * NULL: names from symbol tables). */
void dw_api_forbid_after_fork(void);
/* Unloads libdw when it is loaded and no session is open; dw_api_get loads it again.
 * Returns whether it unloaded. */
bool dw_api_unload(void);

/*
 * Tests only: forget what was loaded (the handle stays open) so that the next
 * dw_api_get() tries again with soname (NULL: DW_API_SONAME). A soname that does not
 * exist forces the libelf fallback through the real failure path.
 */
void dw_api_test_reset(const char *soname);

#endif
