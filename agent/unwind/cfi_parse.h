/*
 * cfi_parse.h - decoding of DWARF call frame information into unsorted rows.
 *
 * Owns: the walk over a section's FDEs and the row buffer they fill (the decoding
 * itself is agent/unwind/cfi_decode.h). Each FDE's rows are appended to a row_buf as one chunk
 * (already in pc order), followed by an end marker row (fp_rule CFI_END_MARKER) at the
 * FDE's end; cfi_table.c sorts, merges and publishes.
 * Internal to the CFI table builder. Context: normal context only (malloc).
 */
#ifndef DDPROF_AGENT_CFI_PARSE_H
#define DDPROF_AGENT_CFI_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "agent/unwind/cfi_table.h"

/* fp_rule of an end-marker row: "no rule from here" unless an FDE starts at that pc. */
#define CFI_END_MARKER 0xff

struct chunk {
	uint32_t pc; /* first row's pc */
	uint32_t first, count;
};

struct row_buf {
	struct cfi_row *rows;
	size_t n, cap;
	size_t populated; /* rows[n..populated) are mapped already (mem_populate) */
	struct chunk *chunks;
	size_t nchunks, capchunks;
	uint64_t base;
	uint32_t unsupported;
	int err;
};

/* One pending row before sorting: the row plus a priority so an FDE's own first row
 * wins over the previous FDE's end marker at the same pc. */
/* Appends rows[first..n) as one chunk (no-op when empty). Sets b->err on ENOMEM. */
void cfi_parse_add_chunk(struct row_buf *b, size_t first);

/*
 * Parses every FDE of section s into b. FDEs starting where `cover` (sorted rows of an
 * earlier section, or NULL) already has a rule are skipped. Counts malformed or
 * unsupported FDEs in *skipped. Returns the number of FDEs used.
 */
uint32_t cfi_parse_section(struct row_buf *b, const struct cfi_section *s, uint32_t *skipped,
			   const struct cfi_row *cover, size_t ncover);

#endif
