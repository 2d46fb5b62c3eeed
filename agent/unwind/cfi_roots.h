/*
 * cfi_roots.h - outermost frames that a module's CFI does not mark as such: the Go
 * runtime's, as unwind rules of their own.
 *
 * Why: a goroutine's stack begins at runtime.goexit (its function returns there), a Go
 * thread's at runtime.mstart or runtime.rt0_go; Go marks none of them in .eh_frame (Go
 * code has no .eh_frame at all, and its .debug_frame is compressed), so a walk that
 * reaches them by frame pointers went on into whatever lay above and ended
 * [incomplete]: 95% of a cgo program's CPU. Their ranges, from the symbol table, become
 * an extra CFI section of FDEs whose return address is undefined (rows CFI_ROOT), read
 * before the module's own sections (cfi_table_build: later sections only fill gaps).
 * Context: normal context (the table builder); parses untrusted bytes bounds-checked.
 */
#ifndef DDPROF_AGENT_CFI_ROOTS_H
#define DDPROF_AGENT_CFI_ROOTS_H

#include <stdint.h>

#include "agent/unwind/cfi_table.h"
#include "agent/unwind/elf_image.h"

/* A .debug_frame-format section marking the roots of im (a Go binary: it has
 * .go.buildinfo or .note.go.buildid) in *out, its bytes malloc'd in *buf (the caller
 * frees them once the table is built). Returns how many roots it holds: 0 (and *buf
 * NULL) for a module that is not Go or whose symbol table names none. */
int cfi_roots_go(const struct elf_image *im, struct cfi_section *out, uint8_t **buf);

#endif
