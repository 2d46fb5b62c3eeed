/*
 * cfi_table.c - sorted unwind tables and their lookup (see cfi_table.h).
 *
 * Context: normal context only (the ddprof-modules thread, tests). The lookup the
 * signal handler uses, cfi_table_find, is inline in cfi_table.h.
 *
 * The rows come from cfi_parse.c one FDE at a time; here they are ordered (FDE chunks
 * sorted and concatenated: much cheaper than sorting every row), merged, and trimmed.
 * elf_image.c finds the sections in files and in-memory images (the vdso).
 */
#include "agent/unwind/cfi_table.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <elf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent/unwind/cfi_parse.h"
#include "agent/unwind/cfi_roots.h"
#include "common/sort.h"
#include "common/big_alloc.h"
#include "common/mem_populate.h"
#include "agent/unwind/elf_image.h"

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

static int chunk_cmp(const void *a, const void *b)
{
	const struct chunk *x = a, *y = b;
	return x->pc < y->pc ? -1 : x->pc > y->pc;
}

/* Puts the FDE chunks in pc order (much cheaper than sorting every row) and checks that
 * reading them in that order gives the rows sorted; otherwise (FDEs overlapping: bad
 * input) every row is sorted in place and read as one chunk. Returns the highest pc. */
static uint32_t order_chunks(struct row_buf *b)
{
	sort_inplace(b->chunks, b->nchunks, sizeof(*b->chunks), chunk_cmp);
	size_t total = 0;
	const struct cfi_row *prev = NULL;
	bool sorted = true;
	for (size_t c = 0; c < b->nchunks && sorted; c++) {
		total += b->chunks[c].count;
		for (uint32_t i = 0; i < b->chunks[c].count && sorted; i++) {
			const struct cfi_row *r = &b->rows[b->chunks[c].first + i];
			sorted = !prev || row_cmp(prev, r) <= 0;
			prev = r;
		}
	}
	if (!sorted || total != b->n) {
		sort_inplace(b->rows, b->n, sizeof(*b->rows), row_cmp);
		b->nchunks = 0;
		cfi_parse_add_chunk(b, 0); /* b->n > 0: the array holds one already */
		prev = &b->rows[b->n - 1];
	}
	return prev ? prev->pc : 0;
}

/*
 * Writes b's rows, in the order order_chunks gave, into dst (room for b->n rows; not
 * b->rows): keeps the last row of each pc (a real row over an end marker), turns end
 * markers into CFI_NONE rows, merges neighbours with equal rules and drops leading
 * "no rule" rows. Returns the number written. Straight into the table's final memory:
 * each page a build touches first costs a page fault, and a large table (libc's) spans
 * many pages; a sorted copy in between would touch one more table's worth.
 */
static size_t finish_rows(const struct row_buf *b, struct cfi_row *dst)
{
	size_t w = 0;
	for (size_t c = 0; c < b->nchunks; c++) {
		const struct cfi_row *in = b->rows + b->chunks[c].first;
		for (uint32_t i = 0; i < b->chunks[c].count; i++) {
			struct cfi_row r = in[i];
			if (r.fp_rule == CFI_END_MARKER) {
				r.fp_rule = CFI_FP_SAME;
				r.kind = CFI_NONE;
				r.cfa_off = 0;
				r.fp_off = 0;
			}
			if (w > 0 && dst[w - 1].pc == r.pc) {
				dst[w - 1] = r;
				if (w > 1 && same_rule(&dst[w - 2], &dst[w - 1]))
					w--;
				continue;
			}
			if (w > 0 && same_rule(&dst[w - 1], &r))
				continue;
			dst[w++] = r;
		}
	}
	/* A leading "no rule" row says nothing the absence of a row does not. */
	size_t first = 0;
	while (first < w && dst[first].kind == CFI_NONE)
		first++;
	memmove(dst, dst + first, (w - first) * sizeof(*dst));
	return w - first;
}

/* Between sections: b's rows become one sorted run that later sections add to. */
static void finish_in_buffer(struct row_buf *b)
{
	if (b->n == 0)
		return;
	order_chunks(b);
	struct cfi_row *dst = big_malloc(b->n * sizeof(*dst));
	if (!dst) {
		b->err = -ENOMEM;
		return;
	}
	size_t n = finish_rows(b, dst);
	big_free(b->rows);
	b->rows = dst;
	b->cap = b->n;
	b->n = b->populated = n;
	b->nchunks = 0;
	cfi_parse_add_chunk(b, 0);
}

/*
 * A finished table never changes, so big ones live in a MAP_SHARED mapping: fork then
 * copies no page-table entries for them (shared mappings are not copied; a child maps
 * the pages it reads on first touch), where malloc'd tables cost every fork a copy of
 * their page tables (python3's tables are ~1.3 MiB). Small tables stay in malloc'd
 * memory: a mapping per table would cost fork more than it saves.
 */
#define CFI_SHARED_MIN (64 * 1024)

static void build_page_index(struct cfi_table *t, uint32_t *page)
{
	size_t r = 0;
	for (uint32_t p = 0; p < t->npages; p++) {
		uint32_t start = p << CFI_PAGE_SHIFT;
		while (r + 1 < t->nrows && t->rows[r + 1].pc <= start)
			r++;
		page[p] = (uint32_t)r;
	}
	t->page = page;
}

/* The table from b's rows: rows, then the page index, in a shared mapping (big ones) or
 * big_malloc'd memory. b's buffer is left to the caller. */
static int finish_table(struct row_buf *b, struct cfi_table *t)
{
	uint32_t max_pc = order_chunks(b);
	size_t rows_max = b->n * sizeof(struct cfi_row);
	size_t index_max = (size_t)((max_pc >> CFI_PAGE_SHIFT) + 1) * sizeof(uint32_t);
	size_t len_max = (rows_max + index_max + 4095) & ~(size_t)4095;
	void *m = MAP_FAILED;
	if (rows_max + index_max >= CFI_SHARED_MIN) {
		m = mmap(NULL, len_max, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m != MAP_FAILED)
			mem_populate(m, rows_max); /* written in order below: one call, no faults */
	}
	struct cfi_row *dst = m != MAP_FAILED ? m : big_malloc(rows_max);
	if (!dst)
		return -ENOMEM;
	t->rows = dst;
	t->nrows = finish_rows(b, dst);
	if (t->nrows == 0) { /* nothing but "no rule" rows */
		if (m != MAP_FAILED)
			munmap(m, len_max);
		else
			big_free(dst);
		t->rows = NULL;
		return -ENOENT;
	}
	t->npages = (t->rows[t->nrows - 1].pc >> CFI_PAGE_SHIFT) + 1;
	if (m == MAP_FAILED) {
		struct cfi_row *exact = big_realloc(dst, t->nrows * sizeof(*dst));
		t->rows = exact ? exact : dst;
		uint32_t *page = big_malloc(t->npages * sizeof(*page));
		if (page) /* without it (ENOMEM) lookups search every row */
			build_page_index(t, page);
		else
			t->npages = 0;
		return 0;
	}
	/* struct cfi_row is 12 bytes: the index after the rows is 4-byte aligned. */
	build_page_index(t, (uint32_t *)(dst + t->nrows));
	size_t len =
	    (t->nrows * sizeof(*dst) + t->npages * sizeof(uint32_t) + 4095) & ~(size_t)4095;
	if (len < len_max)
		munmap((uint8_t *)m + len, len_max - len); /* what merging left unused */
	mprotect(m, len, PROT_READ);			   /* immutable from now on */
	t->shared_len = len;
	return 0;
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
			finish_in_buffer(&b);
			if (b.err)
				break;
			cover = big_malloc(b.n * sizeof(*cover));
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
	big_free(cover);
	int rc = b.err;
	if (!rc)
		rc = used == 0 || b.n == 0 ? -ENOENT : finish_table(&b, out);
	big_free(b.chunks);
	big_free(b.rows);
	if (rc == -ENOENT)
		out->fdes_skipped = skipped;
	if (rc < 0)
		return rc;
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
		big_free(t->rows);
		big_free(t->page);
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
	/* First the roots the module's CFI does not mark (cfi_roots.h): the sections after
	 * it only fill the pcs it leaves. */
	struct cfi_section secs[3];
	memset(secs, 0, sizeof(secs));
	uint8_t *roots_buf;
	cfi_roots_go(&im, &secs[2], &roots_buf);
	for (int slot = 0; slot < 2; slot++) {
		struct elf_section sec;
		/* A compressed .debug_frame is not inflated: skipped. lld types
		 * .eh_frame SHT_X86_64_UNWIND, GNU ld SHT_PROGBITS: any type. */
		if (!elf_image_section(&im, names[slot], slot == 0 ? 0 : SHT_PROGBITS, &sec) ||
		    sec.len == 0 || (sec.flags & SHF_COMPRESSED))
			continue;
		secs[slot].data = sec.data;
		secs[slot].len = sec.len;
		secs[slot].vaddr = sec.vaddr;
		secs[slot].is_debug_frame = slot == 1;
	}
	struct cfi_section ordered[3] = {secs[2], secs[0], secs[1]};
	rc = cfi_table_build(ordered, 3, elf_image_load_base(&im), out);
	free(roots_buf);
	elf_image_close(&im);
	return rc;
}
