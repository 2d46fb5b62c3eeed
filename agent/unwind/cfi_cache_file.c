/*
 * cfi_cache_file.c - one unwind cache file: write, check, read (see cfi_cache_file.h).
 *
 * Context: normal context only (never a signal handler): it allocates with mmap and
 * reads files. No global state.
 */
#include "agent/unwind/cfi_cache_file.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/mem_populate.h"

/* The highest page a 32-bit row pc can fall in, plus one. */
#define MAX_PAGES ((UINT32_MAX >> CFI_PAGE_SHIFT) + 1)
/* Whole rows per read step. */
#define STEP_ROWS (CFI_CACHE_READ_STEP / sizeof(struct cfi_row))

static const char cache_magic[8] = CFI_CACHE_MAGIC;

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
	const uint8_t *p = data;
	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

#define FNV1A_INIT 0xcbf29ce484222325ULL

bool cfi_cache_file_key(const char *path, struct cfi_cache_key *k)
{
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return false;
	memset(k, 0, sizeof(*k));
	k->dev = (uint64_t)st.st_dev;
	k->ino = (uint64_t)st.st_ino;
	k->size = (uint64_t)st.st_size;
	k->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ULL + (uint64_t)st.st_mtim.tv_nsec;
	k->ctime_ns = (uint64_t)st.st_ctim.tv_sec * 1000000000ULL + (uint64_t)st.st_ctim.tv_nsec;
	k->path_hash = fnv1a(FNV1A_INIT, path, strlen(path));
	return true;
}

uint64_t cfi_cache_file_key_hash(const struct cfi_cache_key *k)
{
	return fnv1a(FNV1A_INIT, k, sizeof(*k));
}

/* The file itself, from fstat on what was opened: its size, or a negative errno. */
static int64_t check_file(int fd, const char **why)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		*why = "fstat failed";
		return -errno;
	}
	if (!S_ISREG(st.st_mode)) {
		*why = "not a regular file";
		return -EPERM;
	}
	if (st.st_uid != geteuid()) {
		*why = "owned by another user";
		return -EPERM;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		*why = "writable by group or others";
		return -EPERM;
	}
	if (st.st_size < CFI_CACHE_HEADER_BYTES) {
		*why = "shorter than its header";
		return -EINVAL;
	}
	if ((uint64_t)st.st_size > CFI_CACHE_HEADER_BYTES + (uint64_t)CFI_CACHE_MAX_TABLE_BYTES) {
		*why = "bigger than the cap on a table";
		return -EFBIG;
	}
	return (int64_t)st.st_size;
}

/* The header against the module's key and the file's size: the table's length in
 * bytes, or a negative errno. Nothing is allocated before this passes. */
static int64_t check_header(const struct cfi_cache_header *h, const struct cfi_cache_key *k,
			    int64_t file_size, const char **why)
{
	if (memcmp(h->magic, cache_magic, sizeof(cache_magic)) != 0) {
		*why = "not a cache file (magic)";
		return -EINVAL;
	}
	if (h->version != CFI_CACHE_VERSION) {
		*why = "another format version";
		return -ESTALE;
	}
	if (h->row_size != sizeof(struct cfi_row)) {
		*why = "wrong row size for its version";
		return -EINVAL;
	}
	if (memcmp(&h->key, k, sizeof(*k)) != 0) {
		*why = "made for another module file";
		return -EINVAL;
	}
	if (h->nrows == 0 || h->npages == 0 || h->npages > MAX_PAGES) {
		*why = "row or page count out of range";
		return -EINVAL;
	}
	/* Both bounds keep the products below from overflowing: nrows <= 64 MiB / 12. */
	if (h->nrows > CFI_CACHE_MAX_TABLE_BYTES / sizeof(struct cfi_row) || h->nrows > k->size) {
		*why = "more rows than the cap or its module allow";
		return -EFBIG;
	}
	uint64_t len = h->nrows * sizeof(struct cfi_row) + (uint64_t)h->npages * sizeof(uint32_t);
	if (len > CFI_CACHE_MAX_TABLE_BYTES) {
		*why = "bigger than the cap on a table";
		return -EFBIG;
	}
	if ((uint64_t)file_size != CFI_CACHE_HEADER_BYTES + len) {
		*why = "size does not match its row and page counts";
		return -EINVAL;
	}
	return (int64_t)len;
}

/* Reads the rows step by step into rows[0..nrows), each step checked before the next
 * is read: pcs strictly increasing. 0 or a negative errno. */
static int read_rows(int fd, struct cfi_row *rows, size_t nrows, const char **why)
{
	for (size_t first = 0; first < nrows; first += STEP_ROWS) {
		size_t n = nrows - first < STEP_ROWS ? nrows - first : STEP_ROWS;
		mem_populate(rows + first, n * sizeof(*rows)); /* written in full just below */
		int rc = fs_read_all(fd, (uint8_t *)(rows + first), n * sizeof(*rows),
				     (off_t)(CFI_CACHE_HEADER_BYTES + first * sizeof(*rows)));
		if (rc < 0) {
			*why = "read failed";
			return rc;
		}
		for (size_t i = first == 0 ? 1 : first; i < first + n; i++) {
			if (rows[i].pc <= rows[i - 1].pc) {
				*why = "rows out of order";
				return -EINVAL;
			}
		}
	}
	return 0;
}

/* True when page[0..npages) is exactly the index cfi_table.c builds from the rows: for
 * each page, the last row at or below its start (0 when none). */
static bool index_exact(const struct cfi_row *rows, size_t nrows, const uint32_t *page,
			uint32_t npages)
{
	if (npages != (rows[nrows - 1].pc >> CFI_PAGE_SHIFT) + 1)
		return false;
	size_t r = 0;
	for (uint32_t p = 0; p < npages; p++) {
		uint32_t start = p << CFI_PAGE_SHIFT;
		while (r + 1 < nrows && rows[r + 1].pc <= start)
			r++;
		if (page[p] != r)
			return false;
	}
	return true;
}

int cfi_cache_file_read(int fd, const struct cfi_cache_key *k, struct cfi_table *out,
			const char **why)
{
	memset(out, 0, sizeof(*out));
	*why = "";
	int64_t size = check_file(fd, why);
	if (size < 0)
		return (int)size;
	struct cfi_cache_header h;
	int rc = fs_read_all(fd, (uint8_t *)&h, sizeof(h), 0);
	if (rc < 0) {
		*why = "header unreadable";
		return rc;
	}
	int64_t len = check_header(&h, k, size, why);
	if (len < 0)
		return (int)len;
	/* Read into memory of ours, not mapped from the file: the signal handler must never
	 * fault on it (a file truncated under us raises SIGBUS; a page of a network file
	 * system may take seconds to come). Anonymous and shared, as the tables built here
	 * are (cfi_table.c): fork copies no page table for it. Reserved only: read_rows
	 * touches it a step at a time. */
	void *m = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) {
		*why = "no memory";
		return -errno;
	}
	struct cfi_row *rows = m;
	size_t nrows = (size_t)h.nrows;
	uint32_t *page = (uint32_t *)(rows + nrows); /* 12-byte rows: 4-byte aligned */
	rc = read_rows(fd, rows, nrows, why);
	if (rc == 0 && h.npages != (rows[nrows - 1].pc >> CFI_PAGE_SHIFT) + 1) {
		*why = "page count does not match its last row";
		rc = -EINVAL;
	}
	if (rc == 0) {
		size_t index_len = (size_t)h.npages * sizeof(uint32_t);
		mem_populate(page, index_len);
		rc = fs_read_all(fd, (uint8_t *)page, index_len,
				 (off_t)(CFI_CACHE_HEADER_BYTES + nrows * sizeof(*rows)));
		if (rc < 0)
			*why = "read failed";
		else if (!index_exact(rows, nrows, page, h.npages)) {
			*why = "page index does not match its rows";
			rc = -EINVAL;
		}
	}
	if (rc < 0) {
		munmap(m, (size_t)len);
		return rc;
	}
	mprotect(m, (size_t)len, PROT_READ); /* immutable from now on */
	out->base = h.base;
	out->rows = rows;
	out->nrows = nrows;
	out->page = page;
	out->npages = h.npages;
	out->fdes = h.fdes;
	out->fdes_skipped = h.fdes_skipped;
	out->rows_unsupported = h.rows_unsupported;
	out->shared_len = (size_t)len;
	*why = NULL;
	return 0;
}

int cfi_cache_file_write(int fd, const struct cfi_cache_key *k, const struct cfi_table *t)
{
	uint8_t header[CFI_CACHE_HEADER_BYTES];
	memset(header, 0, sizeof(header));
	struct cfi_cache_header h = {.version = CFI_CACHE_VERSION,
				     .row_size = sizeof(struct cfi_row),
				     .key = *k,
				     .base = t->base,
				     .nrows = t->nrows,
				     .npages = t->npages,
				     .fdes = t->fdes,
				     .fdes_skipped = t->fdes_skipped,
				     .rows_unsupported = t->rows_unsupported};
	memcpy(h.magic, cache_magic, sizeof(cache_magic));
	memcpy(header, &h, sizeof(h));
	int rc = fs_write_all(fd, header, sizeof(header));
	if (rc == 0)
		rc = fs_write_all(fd, (const uint8_t *)t->rows, t->nrows * sizeof(struct cfi_row));
	if (rc == 0)
		rc = fs_write_all(fd, (const uint8_t *)t->page, t->npages * sizeof(uint32_t));
	return rc;
}
