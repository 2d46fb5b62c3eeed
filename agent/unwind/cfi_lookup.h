/*
 * cfi_lookup.h - the unwind row of one pc, read straight from a loaded module's
 * .eh_frame_hdr and .eh_frame in memory, with no table built.
 *
 * Owns: reading a module's .eh_frame_hdr search table as mapped in this process, and
 * turning the one FDE covering a pc into the row in effect there. The decoding is
 * agent/unwind/cfi_decode.h, the code the table builder runs too, so the row is the one
 * cfi_table_find gives on a table built from the same .eh_frame.
 * Context: every function here is async-signal-safe, for a signal handler that must
 * unwind before the module thread has built any table: no allocation, no locks, no
 * errno, no libc calls, under 1.3 KiB of stack (gcc -fstack-usage); every read is
 * bounds-checked against the memory struct cfi_lookup_module names (which the caller
 * guarantees is readable).
 * Cost: a binary search over the header's table, then one CIE and one FDE program
 * decoded up to pc: tens of bytes of CFI per call, nothing cached.
 *
 * What it deliberately does not do:
 *  - read .debug_frame: the table path fills code that .eh_frame leaves uncovered (or
 *    covers with an unusable rule at an FDE's start) from it; here such pcs have no row;
 *  - resolve overlapping FDEs as the table does: the header's last FDE starting at or
 *    before pc is the one used (linkers emit no overlaps);
 *  - validate the FDE's program past pc: an FDE malformed only after pc gives its row
 *    here, where the table builder drops the whole FDE;
 *  - accept a header other than GNU ld's and lld's (version 1, binary-search table
 *    encoded datarel|sdata4, count udata4, .eh_frame pointer pcrel or datarel sdata4).
 */
#ifndef DDPROF_AGENT_CFI_LOOKUP_H
#define DDPROF_AGENT_CFI_LOOKUP_H

#include <link.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/unwind/cfi_table.h"

/* The in-memory CFI of one loaded module. Every byte of [eh_frame_hdr, + hdr_len) and
 * of [eh_lo, eh_hi) must stay readable while cfi_lookup_pc runs (for a loaded module:
 * until it is unloaded). */
struct cfi_lookup_module {
	const uint8_t *eh_frame_hdr; /* runtime address of .eh_frame_hdr */
	size_t hdr_len;
	/* The readable memory .eh_frame (and so every CIE and FDE) must lie in: the
	 * PT_LOAD segment holding the header. */
	const uint8_t *eh_lo, *eh_hi;
	uint64_t bias; /* runtime address - link-time vaddr */
	/* Lowest PT_LOAD vaddr rounded down to 4 KiB (elf_image_load_base's base, that of
	 * the module's cfi_table): row pcs are link-time vaddr - base. */
	uint64_t base;
};

/*
 * async-signal-safe. Fills *out from a module's load bias and program headers as
 * dl_iterate_phdr reports them (dlpi_addr, dlpi_phdr, dlpi_phnum): .eh_frame_hdr from
 * PT_GNU_EH_FRAME, eh_lo/eh_hi from the file-backed bytes of the readable PT_LOAD
 * holding it. Returns 0, -ENOENT without PT_GNU_EH_FRAME, -EINVAL when no readable
 * PT_LOAD holds the header.
 */
int cfi_lookup_module_from_phdrs(uintptr_t bias, const ElfW(Phdr) * phdr, size_t phnum,
				 struct cfi_lookup_module *out);

/*
 * async-signal-safe. Fills *out with the row in effect at runtime pc `pc`: kind, cfa_off,
 * fp_rule and fp_off as cfi_table_find gives them on the module's table, where kind
 * CFI_NONE (returned as 0 here) is what cfi_table_find reports as NULL: an FDE covers
 * pc but with a rule the unwinder cannot evaluate. out->pc is the link-time vaddr where
 * the FDE's program starts this row, minus m->base (the table may start an equal row
 * earlier: it merges neighbours with equal rules).
 * Returns 0; -ENOENT when no FDE covers pc (or the table builder would not use the one
 * that does: an empty range, pcs outside base's 4 GiB); -EINVAL when the header or the
 * CFI is malformed, of an unsupported form, or needs more state than the interpreter's
 * bounded stack: the caller should then not trust this module's CFI at pc.
 */
int cfi_lookup_pc(const struct cfi_lookup_module *m, uintptr_t pc, struct cfi_row *out);

#endif
