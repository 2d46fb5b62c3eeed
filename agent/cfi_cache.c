/*
 * cfi_cache.c - unwind tables on disk (see cfi_cache.h).
 *
 * File layout: one page of header (struct file_header, zero-padded), then the rows and
 * the page index exactly as a shared in-memory table holds them (cfi_table.c), so that
 * one read-only MAP_SHARED mapping of the file from its second page is the table.
 * Context: normal context only (uploader thread, tests); never a signal handler.
 */
#include "agent/cfi_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fs_util.h"
#include "common/mem_populate.h"
#include "common/log.h"
#include "common/str_join.h"

#define HEADER_BYTES 4096
/* Files no process loaded for this long are removed (see evict_old_once), and temporary
 * files a crashed process left after a day. */
#define EVICT_AGE_S (30 * 24 * 3600)
#define TMP_AGE_S (24 * 3600)
/* Bumped with any change to struct cfi_row, the page index or the header. */
#define CFI_CACHE_VERSION 1
static const char cache_magic[8] = "DDPCFI\0";

struct cache_key {
	uint64_t dev, ino, size, mtime_ns, ctime_ns;
	uint64_t path_hash;
};

struct file_header {
	char magic[8];
	uint32_t version;
	uint32_t row_size;
	struct cache_key key;
	uint64_t base;
	uint64_t nrows;
	uint32_t npages, fdes, fdes_skipped, rows_unsupported;
};

/* "" = off. The caller's string (the configuration's, which lives as long as the
 * process): no copy, and no page of ours touched at start-up for it. */
static const char *cache_dir = "";
static atomic_bool store_failure_logged;
static atomic_bool store_off;	/* the directory could not be made ready: not again */
static atomic_bool evict_done; /* once per process */
static _Atomic uint64_t st_hits, st_misses, st_refused, st_stored, st_store_failures;

void cfi_cache_set_dir(const char *dir)
{
	bool replaced = cache_dir[0] != '\0';
	cache_dir = dir ? dir : "";
	/* A new directory gets its own chances (tests set several). Not at start-up: no
	 * page of ours is written for it there. */
	if (replaced) {
		atomic_store_explicit(&store_off, false, memory_order_relaxed);
		atomic_store_explicit(&evict_done, false, memory_order_relaxed);
	}
}

void cfi_cache_get_stats(struct cfi_cache_stats *out)
{
	out->hits = atomic_load_explicit(&st_hits, memory_order_relaxed);
	out->misses = atomic_load_explicit(&st_misses, memory_order_relaxed);
	out->refused = atomic_load_explicit(&st_refused, memory_order_relaxed);
	out->stored = atomic_load_explicit(&st_stored, memory_order_relaxed);
	out->store_failures = atomic_load_explicit(&st_store_failures, memory_order_relaxed);
}

static void count(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
	const uint8_t *p = data;
	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

/* The identity of the file at path now; false when it is not a regular file. */
static bool key_of(const char *path, struct cache_key *k)
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
	k->path_hash = fnv1a(0xcbf29ce484222325ULL, path, strlen(path));
	return true;
}

/* dir/<16 hex digits of the key's hash>.cfi, or with prefix ".tmp-<pid>-" for a
 * temporary file. False when it does not fit. */
static bool file_name(const struct cache_key *k, bool tmp, char *out, size_t cap)
{
	uint64_t h = fnv1a(0xcbf29ce484222325ULL, k, sizeof(*k));
	char hex[17], pid[24];
	for (int i = 15; i >= 0; i--, h >>= 4)
		hex[i] = "0123456789abcdef"[h & 15];
	hex[16] = '\0';
	unsigned long v = (unsigned long)getpid();
	size_t n = sizeof(pid) - 1;
	pid[n] = '\0';
	do {
		pid[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v && n > 0);
	const char *parts[] = {cache_dir, tmp ? "/.tmp-" : "/", tmp ? pid + n : "", tmp ? "-" : "",
			       hex, ".cfi"};
	return str_join(out, cap, parts, sizeof(parts) / sizeof(parts[0]));
}

/* The rows and page index of the file open on fd, checked against k: 0 or -EINVAL. */
static int map_checked(int fd, const struct cache_key *k, struct cfi_table *out)
{
	struct stat st;
	struct file_header h;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & (S_IWGRP | S_IWOTH)))
		return -EPERM;
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    memcmp(h.magic, cache_magic, sizeof(cache_magic)) != 0 ||
	    h.version != CFI_CACHE_VERSION || h.row_size != sizeof(struct cfi_row) ||
	    memcmp(&h.key, k, sizeof(*k)) != 0 || h.nrows == 0 || h.nrows > UINT32_MAX ||
	    h.npages == 0)
		return -EINVAL;
	size_t len = (size_t)h.nrows * sizeof(struct cfi_row) + (size_t)h.npages * sizeof(uint32_t);
	if ((uint64_t)st.st_size != HEADER_BYTES + (uint64_t)len)
		return -EINVAL;
	/* Read into memory of ours, not mapped from the file: the handler must never fault
	 * on it (a file truncated under us raises SIGBUS; a page of a network file system
	 * may take seconds to come). Anonymous and shared, as the tables built here are
	 * (cfi_table.c): fork copies no page table for it. */
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (m == MAP_FAILED)
		return -errno;
	mem_populate(m, len);
	int rc = fs_read_all(fd, m, len, HEADER_BYTES);
	if (rc < 0) {
		munmap(m, len);
		return rc;
	}
	const struct cfi_row *rows = m;
	const uint32_t *page = (const uint32_t *)(rows + h.nrows);
	/* What keeps every lookup within the rows (cfi_find.c): an index that never goes
	 * back nor past the last row, and a last page that is the last row's. */
	bool ok = h.npages == (rows[h.nrows - 1].pc >> CFI_PAGE_SHIFT) + 1;
	for (uint32_t p = 0; ok && p < h.npages; p++)
		ok = page[p] < h.nrows && (p == 0 || page[p] >= page[p - 1]);
	if (!ok) {
		munmap(m, len);
		return -EINVAL;
	}
	mprotect(m, len, PROT_READ); /* immutable from now on */
	memset(out, 0, sizeof(*out));
	out->base = h.base;
	out->rows = m;
	out->nrows = (size_t)h.nrows;
	out->page = (uint32_t *)page;
	out->npages = h.npages;
	out->fdes = h.fdes;
	out->fdes_skipped = h.fdes_skipped;
	out->rows_unsupported = h.rows_unsupported;
	out->shared_len = len;
	return 0;
}

int cfi_cache_load(const char *path, struct cfi_table *out)
{
	memset(out, 0, sizeof(*out));
	struct cache_key k;
	char name[PATH_MAX];
	if (!cache_dir[0] || !key_of(path, &k) || !file_name(&k, false, name, sizeof(name)))
		return -ENOENT;
	int fd = open(name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		count(&st_misses);
		return -ENOENT;
	}
	int rc = map_checked(fd, &k, out);
	close(fd);
	if (rc < 0) {
		count(&st_refused);
		log_debug("unwind cache: %s for %s refused (%s)", name, path, strerror(-rc));
		return rc;
	}
	count(&st_hits);
	return 0;
}

/* The directory, created if missing; it must be ours and writable by nobody else. */
static int dir_ready(void)
{
	int rc = fs_make_dirs(cache_dir, 0700);
	if (rc < 0)
		return rc;
	struct stat st;
	if (stat(cache_dir, &st) != 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return -EPERM;
	return 0;
}

/*
 * Once per process, at its first store: removes the cache files nobody loaded for
 * EVICT_AGE_S (atime: a load reads the file, and even under relatime the kernel
 * updates it once a day) and stale temporary files. The directory then holds what the
 * host used lately, not every library version it ever had. Only this user's regular
 * files with our names are looked at.
 */
static void evict_old_once(void)
{
	if (atomic_exchange_explicit(&evict_done, true, memory_order_relaxed))
		return;
	DIR *d = opendir(cache_dir);
	if (!d)
		return;
	int dfd = dirfd(d);
	time_t now = time(NULL);
	for (struct dirent *e; (e = readdir(d));) {
		const char *n = e->d_name;
		size_t len = strlen(n);
		bool tmp = strncmp(n, ".tmp-", 5) == 0;
		if (!tmp && !(len > 4 && strcmp(n + len - 4, ".cfi") == 0))
			continue;
		struct stat st;
		if (fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
		    st.st_uid != geteuid())
			continue;
		time_t last = st.st_atime > st.st_mtime ? st.st_atime : st.st_mtime;
		if (now - last > (tmp ? TMP_AGE_S : EVICT_AGE_S))
			unlinkat(dfd, n, 0);
	}
	closedir(d);
}

static int write_file(const char *tmp, const char *name, const struct cfi_table *t,
		      const struct cache_key *k)
{
	uint8_t header[HEADER_BYTES];
	memset(header, 0, sizeof(header));
	struct file_header h = {.version = CFI_CACHE_VERSION,
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
	unlink(tmp); /* left by a crashed process that had our pid */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	int rc = fs_write_all(fd, header, sizeof(header));
	if (rc == 0)
		rc = fs_write_all(fd, (const uint8_t *)t->rows, t->nrows * sizeof(struct cfi_row));
	if (rc == 0)
		rc = fs_write_all(fd, (const uint8_t *)t->page, t->npages * sizeof(uint32_t));
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, name) != 0)
		rc = -errno;
	if (rc < 0)
		unlink(tmp);
	return rc;
}

int cfi_cache_store(const char *path, const struct cfi_table *t)
{
	if (!cache_dir[0] || cfi_table_bytes(t) < CFI_CACHE_MIN_BYTES || !t->page ||
	    t->npages == 0 || t->nrows == 0 ||
	    atomic_load_explicit(&store_off, memory_order_relaxed))
		return 0;
	struct cache_key k;
	char name[PATH_MAX], tmp[PATH_MAX];
	if (!key_of(path, &k))
		return 0; /* gone, or not a file: nothing to key it by */
	int rc = -ENAMETOOLONG;
	if (file_name(&k, false, name, sizeof(name)) && file_name(&k, true, tmp, sizeof(tmp))) {
		rc = dir_ready();
		if (rc < 0) /* read-only or foreign: each later table would fail the same way */
			atomic_store_explicit(&store_off, true, memory_order_relaxed);
		if (rc == 0) {
			evict_old_once();
			rc = write_file(tmp, name, t, &k);
		}
	}
	if (rc < 0) {
		count(&st_store_failures);
		if (!atomic_exchange_explicit(&store_failure_logged, true, memory_order_relaxed))
			log_info("unwind cache: cannot keep tables in %s (%s); they are built in "
				 "each process",
				 cache_dir, strerror(-rc));
		return rc;
	}
	count(&st_stored);
	return 0;
}
