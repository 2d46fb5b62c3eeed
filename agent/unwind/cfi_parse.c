/*
 * cfi_parse.c - DWARF call frame information to unsorted unwind rows (see cfi_parse.h).
 *
 * Context: normal context (the ddprof-modules thread, tests); never a signal handler:
 * rows are appended with realloc and mapped ahead with mem_populate.
 *
 * The walk over a section's entries: the decoding itself (cursor, CIEs, FDE headers,
 * the CFA program interpreter) is agent/unwind/cfi_decode.c, shared with the signal handler's
 * single-pc lookup (agent/unwind/cfi_lookup.c) so both give the same rows. Here the
 * interpreter runs in its table mode, writing each FDE's rows straight into the row
 * buffer (no call per row); a malformed entry skips that FDE (counted in fdes_skipped).
 */
#include "agent/unwind/cfi_parse.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "agent/unwind/cfi_decode.h"
#include "common/big_alloc.h"
#include "common/mem_populate.h"

/* How far ahead of the rows written the row buffer is mapped. */
#define POPULATE_STEP (256 * 1024)

/*
 * Makes room for at least one more row: rows[n..populated) is then allocated and mapped
 * (populated > n). False (b->err set) on ENOMEM. Rows are written one by one: the next
 * ones are mapped in one go (common/mem_populate.h: a large table such as libc's spans
 * many pages, each a fault when touched one by one), a bounded step ahead, never memory
 * that will not be written.
 */
static bool make_room(struct row_buf *b)
{
	if (b->err)
		return false;
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;
		struct cfi_row *r = big_realloc(b->rows, cap * sizeof(*r));
		if (!r) {
			b->err = -ENOMEM;
			return false;
		}
		b->rows = r;
		b->cap = cap;
		b->populated = b->n; /* the rest is fresh memory (or moved) */
	}
	if (b->n >= b->populated) {
		size_t step = POPULATE_STEP / sizeof(*b->rows);
		size_t end = b->n + step < b->cap ? b->n + step : b->cap;
		mem_populate(b->rows + b->n, (end - b->n) * sizeof(*b->rows));
		b->populated = end;
	}
	return true;
}

/* Appends one row at link-time pc. False when it was not (outside the table's 4 GiB,
 * or ENOMEM). */
static bool push_row(struct row_buf *b, uint64_t pc, const struct cfi_row *row)
{
	if (!make_room(b) || pc < b->base || pc - b->base > UINT32_MAX)
		return false;
	b->rows[b->n] = *row;
	b->rows[b->n].pc = (uint32_t)(pc - b->base);
	b->n++;
	return true;
}

/* Runs an FDE's program in table mode, its rows appended to b (the rows are already in
 * pc order: sorting FDEs, 10k in python3, and concatenating is much cheaper than
 * sorting every row, 64k). False when the program is malformed (or on ENOMEM). */
static bool run_fde(struct row_buf *b, struct cfi_prog *pg, struct cfi_state *st)
{
	pg->base = b->base;
	for (;;) {
		if (!make_room(b))
			return false;
		pg->out = b->rows + b->n;
		pg->room = b->populated - b->n;
		pg->n = 0;
		pg->unsupported = 0;
		int rc = cfi_decode_prog_run(pg, st);
		b->n += pg->n;
		b->unsupported += pg->unsupported;
		if (rc != CFI_PROG_FULL)
			return rc == CFI_PROG_END;
	}
}

void cfi_parse_add_chunk(struct row_buf *b, size_t first)
{
	if (b->err || b->n == first)
		return;
	if (b->nchunks == b->capchunks) {
		size_t cap = b->capchunks ? b->capchunks * 2 : 256;
		struct chunk *c = big_realloc(b->chunks, cap * sizeof(*c));
		if (!c) {
			b->err = -ENOMEM;
			return;
		}
		b->chunks = c;
		b->capchunks = cap;
	}
	b->chunks[b->nchunks++] =
	    (struct chunk){b->rows[first].pc, (uint32_t)first, (uint32_t)(b->n - first)};
}

/* Parses every FDE of one section, emitting rows into b. Returns FDEs used. */
uint32_t cfi_parse_section(struct row_buf *b, const struct cfi_section *s, uint32_t *skipped,
			   const struct cfi_row *cover, size_t ncover)
{
	uint32_t used = 0;
	uint64_t off = 0;
	uint64_t cached_cie_off = ~(uint64_t)0;
	bool cached_ok = false;
	struct cfi_cie cie;
	struct cfi_state cie_state;
	struct cfi_prog pg;
	while (off + 4 <= s->len && !b->err) {
		struct cfi_entry e;
		int kind = cfi_decode_entry_read(s, off, &e);
		if (kind == CFI_ENTRY_ZERO) {
			if (!s->is_debug_frame)
				break; /* .eh_frame terminator */
			off = e.next;
			continue;
		}
		if (kind == CFI_ENTRY_TRUNCATED)
			break;
		off = e.next;
		if (kind == CFI_ENTRY_CIE)
			continue;
		if (kind == CFI_ENTRY_FDE_BAD_CIE) {
			(*skipped)++;
			continue;
		}
		if (e.cie_off != cached_cie_off) {
			cached_cie_off = e.cie_off;
			cached_ok = cfi_decode_cie_read(s, e.cie_off, &cie, &cie_state);
		}
		struct cfi_fde fde;
		if (!cached_ok || !cfi_decode_fde_read(s, &e, &cie, &fde)) {
			(*skipped)++;
			continue;
		}
		uint64_t start = fde.start, range = fde.range;
		if (!fde.aug_ok || range == 0 || start + range < start || start < b->base ||
		    start + range - b->base > UINT32_MAX) {
			/* range 0: discarded by the linker (garbage-collected section). */
			if (range != 0)
				(*skipped)++;
			continue;
		}
		if (cover && cfi_table_find(&(struct cfi_table){.base = b->base,
								.rows = (struct cfi_row *)cover,
								.nrows = ncover},
					    start) != NULL)
			continue; /* .eh_frame already describes this code */
		struct cfi_state st = cie_state;
		cfi_decode_prog_start(&pg, &cie, s, &cie_state, fde.insns, fde.insns_end, start,
				      start + range);
		size_t mark = b->n;
		if (!run_fde(b, &pg, &st)) {
			if (b->err)
				break;
			b->n = mark; /* drop this FDE's partial rows */
			(*skipped)++;
			continue;
		}
		struct cfi_row row;
		if (pg.loc < pg.end) {
			bool ok = cfi_decode_row_from_state(&st, cie.signal, 0, &row);
			if (push_row(b, pg.loc, &row) && !ok)
				b->unsupported++;
		}
		/* "No rule" from the FDE's end, unless a row of another FDE starts there. */
		row = (struct cfi_row){.kind = CFI_NONE, .fp_rule = CFI_END_MARKER};
		push_row(b, start + range, &row);
		cfi_parse_add_chunk(b, mark);
		used++;
	}
	return used;
}
