/*
 * cfi_table.c - sorted unwind tables and their lookup (see cfi_table.h).
 *
 * Context: normal context only (the ddprof-modules thread, tests). The lookup the
 * signal handler uses, cfi_table_find, is agent/cfi_find.c.
 *
 * The rows come from cfi_parse.c one FDE at a time; here they are ordered (FDE chunks
 * sorted and concatenated: much cheaper than sorting every row), merged, and trimmed.
 * elf_image.c finds the sections in files and in-memory images (the vdso).
 */
#include "cfi_table.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <elf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent/cfi_parse.h"
#include "common/mem_populate.h"
#include "agent/elf_image.h"

/* Sort by pc; at equal pcs the end marker first so a real row wins. */
static int row_cmp(const void *a, const void *b)
{
	const struct cfi_row *x = a, *y = b;
	if (x->pc != y->pc)
		return x->pc < y->pc ? -1 : 1;
	bool xm = x->fp_rule == CFI_END_MARKER, ym = y->fp_rule == CFI_END_MARKER;
	return xm == ym ? 0 : xm ? -1 : 1;
}

static bool same_rule(const struct cfi_row *a, const struct cfi_row *b)
{
	return a->kind == b->kind && a->cfa_off == b->cfa_off && a->fp_rule == b->fp_rule &&
	       a->fp_off == b->fp_off;
}

/* Sorts, keeps the last row of each pc (a real row over an end marker), turns end
 * markers into CFI_NONE rows and merges neighbours with equal rules. */
static int chunk_cmp(const void *a, const void *b)
{
	const struct chunk *x = a, *y = b;
	return x->pc < y->pc ? -1 : x->pc > y->pc;
}

/* Orders the rows by pc: FDE chunks sorted and concatenated, then a linear check (FDEs
 * may overlap in bad input) with qsort of all rows as the fallback. */
static void sort_rows(struct row_buf *b)
{
	struct cfi_row *sorted = b->nchunks > 1 ? malloc(b->n * sizeof(*sorted)) : NULL;
	if (sorted) {
		mem_populate(sorted, b->n * sizeof(*sorted)); /* written in full below */
		qsort(b->chunks, b->nchunks, sizeof(*b->chunks), chunk_cmp);
		size_t w = 0;
		for (size_t i = 0; i < b->nchunks; i++) {
			memcpy(sorted + w, b->rows + b->chunks[i].first,
			       b->chunks[i].count * sizeof(*sorted));
			w += b->chunks[i].count;
		}
		if (w == b->n) {
			free(b->rows);
			b->rows = sorted;
			b->cap = b->n;
		} else {
			free(sorted); /* rows outside chunks: cannot happen, but be safe */
		}
	}
	for (size_t i = 1; i < b->n; i++) {
		if (row_cmp(&b->rows[i - 1], &b->rows[i]) > 0) {
			qsort(b->rows, b->n, sizeof(*b->rows), row_cmp);
			break;
		}
	}
}

static void finish_rows(struct row_buf *b)
{
	if (b->n == 0)
		return;
	sort_rows(b);
	size_t w = 0;
	for (size_t i = 0; i < b->n; i++) {
		struct cfi_row r = b->rows[i];
		if (r.fp_rule == CFI_END_MARKER) {
			r.fp_rule = CFI_FP_SAME;
			r.kind = CFI_NONE;
			r.cfa_off = 0;
			r.fp_off = 0;
		}
		if (w > 0 && b->rows[w - 1].pc == r.pc) {
			b->rows[w - 1] = r;
			if (w > 1 && same_rule(&b->rows[w - 2], &b->rows[w - 1]))
				w--;
			continue;
		}
		if (w > 0 && same_rule(&b->rows[w - 1], &r))
			continue;
		b->rows[w++] = r;
	}
	/* A leading "no rule" row says nothing the absence of a row does not. */
	size_t first = 0;
	while (first < w && b->rows[first].kind == CFI_NONE)
		first++;
	memmove(b->rows, b->rows + first, (w - first) * sizeof(*b->rows));
	b->n = w - first;
	b->nchunks = 0;
	cfi_rows_add_chunk(b, 0); /* now one sorted run: later sections add their FDEs to it */
}

/*
 * A finished table never changes, so big ones move to a MAP_SHARED mapping: fork then
 * copies no page-table entries for them (shared mappings are not copied; a child maps
 * the pages it reads on first touch), where malloc'd tables cost every fork a copy of
 * their page tables (python3's tables are ~1.3 MiB). Small tables stay in malloc'd
 * memory: a mapping per table would cost fork more than it saves.
 */
#define CFI_SHARED_MIN (64 * 1024)

static void move_to_shared(struct cfi_table *t)
{
	size_t rows = t->nrows * sizeof(*t->rows), pages = t->npages * sizeof(*t->page);
	if (rows + pages < CFI_SHARED_MIN)
		return;
	size_t len = (rows + pages + 4095) & ~(size_t)4095;
	/* Populated: it is written in full at once (common/mem_populate.h). */
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE,
		       -1, 0);
	if (m == MAP_FAILED)
		return; /* keep the malloc'd copy */
	memcpy(m, t->rows, rows);
	bool indexed = t->page != NULL;
	if (indexed)
		memcpy((uint8_t *)m + rows, t->page, pages);
	mprotect(m, len, PROT_READ); /* immutable from now on */
	free(t->rows);
	free(t->page);
	t->rows = m;
	t->page = indexed ? (uint32_t *)((uint8_t *)m + rows) : NULL;
	t->shared_len = len;
}

static void build_page_index(struct cfi_table *t)
{
	uint32_t npages = (t->rows[t->nrows - 1].pc >> CFI_PAGE_SHIFT) + 1;
	uint32_t *page = malloc(npages * sizeof(*page));
	if (!page)
		return;
	size_t r = 0;
	for (uint32_t p = 0; p < npages; p++) {
		uint32_t start = p << CFI_PAGE_SHIFT;
		while (r + 1 < t->nrows && t->rows[r + 1].pc <= start)
			r++;
		page[p] = (uint32_t)r;
	}
	t->page = page;
	t->npages = npages;
}

int cfi_table_build(const struct cfi_section *secs, size_t nsecs, uint64_t base,
		    struct cfi_table *out)
{
	memset(out, 0, sizeof(*out));
	out->base = base;
	struct row_buf b = {.base = base};
	uint32_t skipped = 0, used = 0;
	struct cfi_row *cover = NULL;
	size_t ncover = 0;
	for (size_t i = 0; i < nsecs && !b.err; i++) {
		if (!secs[i].data || secs[i].len == 0)
			continue;
		if (b.n > 0 && !cover) {
			/* Later sections only fill gaps: look them up in a copy of what the
			 * first one gave (b.rows moves as rows are appended). */
			finish_rows(&b);
			cover = malloc(b.n * sizeof(*cover));
			if (!cover) {
				b.err = -ENOMEM;
				break;
			}
			mem_populate(cover, b.n * sizeof(*cover));
			memcpy(cover, b.rows, b.n * sizeof(*cover));
			ncover = b.n;
		}
		used += cfi_parse_section(&b, &secs[i], &skipped, cover, ncover);
	}
	free(cover);
	if (!b.err)
		finish_rows(&b);
	free(b.chunks);
	if (b.err) {
		free(b.rows);
		return b.err;
	}
	if (used == 0 || b.n == 0) {
		free(b.rows);
		out->fdes_skipped = skipped;
		return -ENOENT;
	}
	struct cfi_row *exact = realloc(b.rows, b.n * sizeof(*b.rows));
	out->rows = exact ? exact : b.rows;
	out->nrows = b.n;
	build_page_index(out); /* without it (ENOMEM) lookups search every row */
	move_to_shared(out);
	out->fdes = used;
	out->fdes_skipped = skipped;
	out->rows_unsupported = b.unsupported;
	return 0;
}

void cfi_table_free(struct cfi_table *t)
{
	if (t->shared_len) {
		munmap(t->rows, t->shared_len);
	} else {
		free(t->rows);
		free(t->page);
	}
	memset(t, 0, sizeof(*t));
}

/* ---------------------------------------------------------------- ELF input */

int cfi_table_build_elf(const char *path, const void *image, size_t image_len,
			struct cfi_table *out)
{
	memset(out, 0, sizeof(*out));
	struct elf_image im;
	int rc = elf_image_load(&im, path, image, image_len, EM_X86_64);
	if (rc < 0)
		return rc;
	static const char *const names[2] = {".eh_frame", ".debug_frame"};
	struct cfi_section secs[2];
	memset(secs, 0, sizeof(secs));
	for (int slot = 0; slot < 2; slot++) {
		struct elf_section sec;
		/* A compressed .debug_frame is not inflated: skipped, as before. lld
		 * types .eh_frame SHT_X86_64_UNWIND, GNU ld SHT_PROGBITS: any type. */
		if (!elf_image_section(&im, names[slot], slot == 0 ? 0 : SHT_PROGBITS, &sec) ||
		    sec.len == 0 || (sec.flags & SHF_COMPRESSED))
			continue;
		secs[slot].data = sec.data;
		secs[slot].len = sec.len;
		secs[slot].vaddr = sec.vaddr;
		secs[slot].is_debug_frame = slot == 1;
	}
	rc = cfi_table_build(secs, 2, elf_image_load_base(&im), out);
	elf_image_close(&im);
	return rc;
}
