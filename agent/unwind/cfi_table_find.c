/*
 * cfi_table_find.c - the signal handler's lookup in a CFI table (see cfi_table.h).
 *
 * This file is async-signal-safe: a binary search over an immutable array, narrowed by
 * the per-page index; no calls, no writes.
 */
#include "agent/unwind/cfi_table.h"

/* async-signal-safe */
const struct cfi_row *cfi_table_find(const struct cfi_table *t, uint64_t vaddr)
{
	if (!t || t->nrows == 0 || vaddr < t->base || vaddr - t->base > UINT32_MAX)
		return NULL;
	uint32_t pc = (uint32_t)(vaddr - t->base);
	size_t lo = 0, hi = t->nrows;
	if (pc < t->rows[0].pc)
		return NULL;
	uint32_t p = pc >> CFI_PAGE_SHIFT;
	if (t->page && p < t->npages) {
		/* The answer lies in [page[p], page[p + 1]]: page[p] has pc <= pc. */
		lo = t->page[p];
		if (p + 1 < t->npages)
			hi = (size_t)t->page[p + 1] + 1;
	} else if (t->page) {
		lo = t->nrows - 1; /* past the last page: the last row */
	}
	/* Last row with row.pc <= pc. */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->rows[mid].pc <= pc)
			lo = mid;
		else
			hi = mid;
	}
	const struct cfi_row *r = &t->rows[lo];
	return r->kind == CFI_NONE ? NULL : r;
}
