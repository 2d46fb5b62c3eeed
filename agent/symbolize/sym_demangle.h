/*
 * sym_demangle.h - C++ names made readable (Itanium ABI demangling).
 *
 * Owns: the lookup of __cxa_demangle, done once and only when a mangled name ("_Z...")
 * is first seen: in the process (dlsym RTLD_DEFAULT: any C++ program has libstdc++
 * loaded), else from a dlopen'd libstdc++.so.6, which a C program pays for only if one
 * of its modules has C++ symbols. Without either, names stay mangled.
 * Context: uploader thread only (and unit tests), one caller at a time; never a signal
 * handler (dlopen, malloc).
 */
#ifndef DDPROF_AGENT_SYM_DEMANGLE_H
#define DDPROF_AGENT_SYM_DEMANGLE_H

#include <stdbool.h>

/* True for names in the Itanium C++ mangling ("_Z" followed by more). */
bool sym_demangle_is_mangled(const char *name);

/*
 * Demangled copy of name (malloc'd, the caller frees it), or NULL when name is not
 * mangled, is malformed, or no demangler is available.
 */
char *sym_demangle(const char *name);

#endif
