/*
 * test_cfi_cache.c - unit tests of agent/unwind/cfi_cache.c: unwind tables kept on disk.
 *
 * A table stored and loaded again must answer every lookup as the built one does; a
 * file changed since, a cache file that is not ours, writable by others, truncated or
 * with a page index pointing past the rows must be refused (counted), never mapped;
 * small tables are not kept, and a cache that cannot be written is counted, not fatal.
 * Hostile files (agent/unwind/cfi_cache_file.h): a header claiming a huge table, rows of
 * zeros, a link, a FIFO, a directory that is a link or not ours: refused before the
 * process spends memory on them (its peak RSS is measured), counted, one warning.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "agent/unwind/cfi_cache.h"
#include "agent/unwind/cfi_cache_file.h"
#include "agent/unwind/cfi_table.h"
#include "check_run.h"

#define LIBC "/lib/x86_64-linux-gnu/libc.so.6"

static char root[64];	  /* per test: a fresh directory */
static char cachedir[96]; /* root/cache */

static void setup(void)
{
	strcpy(root, "/tmp/test_cfi_cache.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(cachedir, sizeof(cachedir), "%s/cache", root);
	cfi_cache_set_dir(cachedir);
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	ck_assert_int_eq(system(cmd), 0);
	cfi_cache_set_dir("");
}

/* The only file of dir not starting with '.' (asserts there is exactly one). */
static void the_file_in(const char *dir, char *out, size_t cap)
{
	DIR *d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		ck_assert_int_lt(snprintf(out, cap, "%s/%.64s", dir, e->d_name), (int)cap);
		n++;
	}
	closedir(d);
	ck_assert_int_eq(n, 1);
}

static void the_cache_file(char *out, size_t cap)
{
	the_file_in(cachedir, out, cap);
}

/* Copies src to root/name (a file of ours whose identity the test controls). */
static void copy_file(const char *src, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", root, name);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "cp %s %s", src, out);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_a_stored_table_loads_back_and_answers_the_same)
{
	struct cfi_table built, loaded;
	ck_assert_int_eq(cfi_table_build_elf(LIBC, NULL, 0, &built), 0);
	ck_assert_uint_ge(cfi_table_bytes(&built), CFI_CACHE_MIN_BYTES);
	struct cfi_cache_stats s0, s1;
	cfi_cache_get_stats(&s0);
	ck_assert_int_eq(cfi_cache_load(LIBC, &loaded), -ENOENT); /* empty cache: a miss */
	ck_assert_int_eq(cfi_cache_store(LIBC, &built), 0);
	char file[256];
	the_cache_file(file, sizeof(file));
	struct stat st;
	ck_assert_int_eq(stat(file, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	ck_assert_int_eq(stat(cachedir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0700);

	ck_assert_int_eq(cfi_cache_load(LIBC, &loaded), 0);
	cfi_cache_get_stats(&s1);
	ck_assert_uint_eq(s1.misses - s0.misses, 1);
	ck_assert_uint_eq(s1.stored - s0.stored, 1);
	ck_assert_uint_eq(s1.hits - s0.hits, 1);
	ck_assert_uint_eq(loaded.base, built.base);
	ck_assert_uint_eq(loaded.nrows, built.nrows);
	ck_assert_uint_eq(loaded.npages, built.npages);
	ck_assert_uint_eq(loaded.fdes, built.fdes);
	ck_assert_uint_eq(loaded.fdes_skipped, built.fdes_skipped);
	ck_assert_uint_eq(loaded.rows_unsupported, built.rows_unsupported);
	ck_assert_mem_eq(loaded.rows, built.rows, built.nrows * sizeof(struct cfi_row));
	ck_assert_mem_eq(loaded.page, built.page, built.npages * sizeof(uint32_t));
	/* The file cut under us (a user editing it in place): the table is our own copy,
	 * so the lookups below cannot fault (a mapping of the file would raise SIGBUS). */
	ck_assert_int_eq(truncate(file, 0), 0);
	/* Every pc of the module, a few bytes apart: the same row, or none in both. */
	uint64_t end = built.base + built.rows[built.nrows - 1].pc + 64;
	for (uint64_t pc = built.base; pc < end; pc += 13) {
		const struct cfi_row *a = cfi_table_find(&built, pc);
		const struct cfi_row *b = cfi_table_find(&loaded, pc);
		ck_assert(!a == !b);
		if (a)
			ck_assert_int_eq(a - built.rows, b - loaded.rows);
	}
	/* Read-only: a stray write in our process cannot change what others load. */
	ck_assert_uint_gt(loaded.shared_len, 0);
	cfi_table_free(&loaded);
	cfi_table_free(&built);
}
END_TEST

START_TEST(test_a_changed_file_misses_and_an_off_cache_does_nothing)
{
	char lib[128];
	copy_file(LIBC, "libc-copy.so", lib, sizeof(lib));
	struct cfi_table t, l;
	ck_assert_int_eq(cfi_table_build_elf(lib, NULL, 0, &t), 0);
	ck_assert_int_eq(cfi_cache_store(lib, &t), 0);
	ck_assert_int_eq(cfi_cache_load(lib, &l), 0);
	cfi_table_free(&l);
	/* Rewritten in place (same inode, same size): a new ctime, so a new key. */
	int fd = open(lib, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, "\x7f", 1, 0), 1);
	close(fd);
	ck_assert_int_eq(cfi_cache_load(lib, &l), -ENOENT);
	/* Another file with the same contents: not the same key either. */
	char lib2[128];
	copy_file(LIBC, "libc-copy2.so", lib2, sizeof(lib2));
	ck_assert_int_eq(cfi_cache_load(lib2, &l), -ENOENT);
	/* Off: nothing loaded, nothing written. */
	cfi_cache_set_dir("");
	ck_assert_int_eq(cfi_cache_store(lib2, &t), 0);
	ck_assert_int_eq(cfi_cache_load(lib, &l), -ENOENT);
	cfi_cache_set_dir(cachedir);
	ck_assert_int_eq(cfi_cache_load(lib2, &l), -ENOENT);
	cfi_table_free(&t);
}
END_TEST

/* A field of /proc/self/status ("VmHWM", "VmPeak"...), in KiB. */
static long status_kib(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	ck_assert_ptr_nonnull(f);
	char line[256];
	long v = -1;
	size_t n = strlen(field);
	while (v < 0 && fgets(line, sizeof(line), f)) {
		if (strncmp(line, field, n) == 0 && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	}
	fclose(f);
	ck_assert_msg(v >= 0, "no %s in /proc/self/status", field);
	return v;
}

/* VmHWM (peak RSS) from now on: reset to the current RSS (Linux 4.0). */
static void reset_peak_rss(void)
{
	int fd = open("/proc/self/clear_refs", O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "5", 1), 1);
	close(fd);
}

/* What a refused file may cost the process's peak RSS: the capture's file buffers, and
 * at most one read step (CFI_CACHE_READ_STEP) or libc's whole table (340 KiB, whose
 * page index is checked last). */
#define REFUSED_RSS_MAX_KIB 1024
/* ... and its peak mappings: nothing of the claimed table is mapped. */
#define REFUSED_VM_MAX_KIB 4096

static int capture_saved = -1;
static FILE *capture_file;

/* Until end_capture, our stderr goes to a file. */
static void begin_capture(void)
{
	capture_file = tmpfile();
	ck_assert_ptr_nonnull(capture_file);
	capture_saved = dup(STDERR_FILENO);
	ck_assert_int_ge(capture_saved, 0);
	ck_assert_int_eq(dup2(fileno(capture_file), STDERR_FILENO), STDERR_FILENO);
}

/* The number of warning lines written since begin_capture (the text into out). */
static int end_capture(char *out, size_t cap)
{
	ck_assert_int_eq(dup2(capture_saved, STDERR_FILENO), STDERR_FILENO);
	close(capture_saved);
	rewind(capture_file);
	size_t n = fread(out, 1, cap - 1, capture_file);
	out[n] = '\0';
	fclose(capture_file);
	int lines = 0;
	for (const char *p = out; (p = strstr(p, "libddprof: warning: ")); p++)
		lines++;
	return lines;
}

/* Loads LIBC expecting refusal rc: counted once, no hit, nothing returned, no memory
 * spent on the file (peak RSS measured around the load), and peak mappings grown by at
 * most vm_kib. */
static void load_expect_refused_vm(int rc, const char *what, long vm_kib)
{
	struct cfi_table l;
	struct cfi_cache_stats s0, s1;
	cfi_cache_get_stats(&s0);
	long vm0 = status_kib("VmPeak");
	reset_peak_rss();
	long rss0 = status_kib("VmHWM");
	int got = cfi_cache_load(LIBC, &l);
	long rss = status_kib("VmHWM") - rss0, vm = status_kib("VmPeak") - vm0;
	cfi_cache_get_stats(&s1);
	ck_assert_msg(got == rc, "%s: load gave %d (%s), expected %d (%s)", what, got,
		      strerror(-got), rc, strerror(-rc));
	ck_assert_msg(s1.refused - s0.refused == 1, "%s: refused counted %llu times", what,
		      (unsigned long long)(s1.refused - s0.refused));
	ck_assert_uint_eq(s1.hits, s0.hits);
	ck_assert_ptr_null(l.rows);
	ck_assert_uint_eq(l.nrows, 0);
	ck_assert_msg(rss <= REFUSED_RSS_MAX_KIB, "%s: peak RSS grew by %ld KiB", what, rss);
	ck_assert_msg(vm <= vm_kib, "%s: peak mappings grew by %ld KiB", what, vm);
}

static void load_expect_refused(int rc, const char *what)
{
	load_expect_refused_vm(rc, what, REFUSED_VM_MAX_KIB);
}

/* Stores libc's table, lets damage() change the file, and expects load to refuse it
 * with rc (counted), spending no memory on it and mapping at most vm_kib. */
static void expect_refused_vm(void (*damage)(const char *file, const struct cfi_table *t), int rc,
			      long vm_kib)
{
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build_elf(LIBC, NULL, 0, &t), 0);
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), 0);
	char file[256];
	the_cache_file(file, sizeof(file));
	damage(file, &t);
	cfi_table_free(&t);
	load_expect_refused_vm(rc, file, vm_kib);
}

static void expect_refused(void (*damage)(const char *file, const struct cfi_table *t), int rc)
{
	expect_refused_vm(damage, rc, REFUSED_VM_MAX_KIB);
}

static void writable_by_group(const char *file, const struct cfi_table *t)
{
	ck_assert_int_eq(chmod(file, 0620), 0);
}

static void truncated(const char *file, const struct cfi_table *t)
{
	ck_assert_int_eq(truncate(file, 4096 + 12 * 100), 0);
}

/* Offset of the page index in the file. */
static off_t index_at(const struct cfi_table *t)
{
	return (off_t)(4096 + t->nrows * sizeof(struct cfi_row));
}

static void index_past_the_rows(const char *file, const struct cfi_table *t)
{
	int fd = open(file, O_WRONLY);
	uint32_t bad = (uint32_t)t->nrows + 5;
	ck_assert_int_eq(pwrite(fd, &bad, sizeof(bad), index_at(t) + 4 * (t->npages / 2)), 4);
	close(fd);
}

static void index_going_back(const char *file, const struct cfi_table *t)
{
	int fd = open(file, O_WRONLY);
	uint32_t zero = 0;
	ck_assert_int_eq(pwrite(fd, &zero, 4, index_at(t) + 4 * (t->npages - 1)), 4);
	close(fd);
}

static void other_key_in_header(const char *file, const struct cfi_table *t)
{
	int fd = open(file, O_WRONLY);
	uint64_t ino = 12345; /* the key's inode, after magic, version and row size */
	ck_assert_int_eq(pwrite(fd, &ino, 8, 8 + 4 + 4 + 8), 8);
	close(fd);
}

static void not_ours(const char *file, const struct cfi_table *t)
{
	ck_assert_int_eq(chown(file, 65534, 65534), 0);
}

static void bad_magic(const char *file, const struct cfi_table *t)
{
	int fd = open(file, O_WRONLY);
	ck_assert_int_eq(pwrite(fd, "NOTCFI\0", 8, 0), 8);
	close(fd);
}

static void other_version(const char *file, const struct cfi_table *t)
{
	int fd = open(file, O_WRONLY);
	uint32_t v = CFI_CACHE_VERSION + 1;
	ck_assert_int_eq(pwrite(fd, &v, 4, offsetof(struct cfi_cache_header, version)), 4);
	close(fd);
}

static void rows_out_of_order(const char *file, const struct cfi_table *t)
{
	int fd = open(file, O_WRONLY);
	/* Row 2 written over row 1: two equal pcs. */
	ck_assert_int_eq(
	    pwrite(fd, &t->rows[2], sizeof(struct cfi_row), 4096 + sizeof(struct cfi_row)),
	    (ssize_t)sizeof(struct cfi_row));
	close(fd);
}

/* A FIFO in place of the file: an open without O_NONBLOCK would wait for a writer. */
static void a_fifo(const char *file, const struct cfi_table *t)
{
	ck_assert_int_eq(unlink(file), 0);
	ck_assert_int_eq(mkfifo(file, 0600), 0);
}

/* The file moved next to the cache and a link left in its place: the target is a
 * valid cache file, so only not following the link refuses it. */
static void a_symlink(const char *file, const struct cfi_table *t)
{
	char moved[128];
	snprintf(moved, sizeof(moved), "%s/moved.cfi", root);
	ck_assert_int_eq(rename(file, moved), 0);
	ck_assert_int_eq(symlink(moved, file), 0);
}

START_TEST(test_damaged_or_foreign_files_are_refused)
{
	expect_refused(writable_by_group, -EPERM);
	expect_refused(truncated, -EINVAL);
	expect_refused(index_past_the_rows, -EINVAL);
	expect_refused(index_going_back, -EINVAL);
	expect_refused(other_key_in_header, -EINVAL);
	expect_refused(bad_magic, -EINVAL);
	expect_refused(other_version, -ESTALE);
	expect_refused(rows_out_of_order, -EINVAL);
	expect_refused(a_fifo, -EPERM);
	expect_refused(a_symlink, -ELOOP);
	if (geteuid() == 0) /* only root can give a file away */
		expect_refused(not_ours, -EPERM);
}
END_TEST

/* Rewrites the file's header to claim nrows rows and npages pages, and sets the file's
 * size to what they take (sparse: no block is written), its rows zeros when asked. */
static void claim(const char *file, uint64_t nrows, uint32_t npages, bool size_too, bool zeros)
{
	int fd = open(file, O_RDWR);
	ck_assert_int_ge(fd, 0);
	struct cfi_cache_header h;
	ck_assert_int_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	h.nrows = nrows;
	h.npages = npages;
	ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	if (zeros)
		ck_assert_int_eq(ftruncate(fd, 4096), 0);
	if (size_too)
		ck_assert_int_eq(ftruncate(fd, (off_t)(4096 + nrows * sizeof(struct cfi_row) +
						       npages * sizeof(uint32_t))),
				 0);
	close(fd);
}

static off_t libc_size(void)
{
	struct stat st;
	ck_assert_int_eq(stat(LIBC, &st), 0);
	return st.st_size;
}

/* 1 GiB of rows: an old loader mapped and prefaulted it all, then accepted the zeros. */
static void claims_a_gib(const char *file, const struct cfi_table *t)
{
	claim(file, (1u << 30) / sizeof(struct cfi_row), 1, true, true);
}

/* The most rows a header can count: 48 GiB. */
static void claims_48_gib(const char *file, const struct cfi_table *t)
{
	claim(file, UINT32_MAX, 1, true, true);
}

/* A header claiming 1 GiB in a file of the real table's size. */
static void header_claims_more_than_the_file(const char *file, const struct cfi_table *t)
{
	claim(file, (1u << 30) / sizeof(struct cfi_row), 1, false, false);
}

/* Under the cap, but more rows than libc has bytes. */
static void more_rows_than_the_module_has_bytes(const char *file, const struct cfi_table *t)
{
	claim(file, (uint64_t)libc_size() + 1, 1, true, true);
}

/* Within every bound (half a row per byte of libc: ~11 MiB), every row zero: refused at
 * its second row, having touched one read step of the table's reserved (not touched)
 * mapping. */
static void zero_rows_within_bounds(const char *file, const struct cfi_table *t)
{
	claim(file, (uint64_t)libc_size() / 2, 1, true, true);
}

START_TEST(test_a_file_claiming_a_huge_table_is_refused_before_any_allocation)
{
	expect_refused(claims_a_gib, -EFBIG);
	expect_refused(claims_48_gib, -EFBIG);
	expect_refused(header_claims_more_than_the_file, -EFBIG);
	expect_refused(more_rows_than_the_module_has_bytes, -EFBIG);
	long claimed_kib = (long)((uint64_t)libc_size() / 2 * sizeof(struct cfi_row) >> 10);
	expect_refused_vm(zero_rows_within_bounds, -EINVAL, claimed_kib + REFUSED_VM_MAX_KIB);
}
END_TEST

/* Stores libc's table in root/real (a valid directory and file), then makes cachedir
 * what make() says, with real's file reachable through it if links were followed. */
static void stored_in_real(char *real, size_t cap)
{
	snprintf(real, cap, "%s/real", root);
	cfi_cache_set_dir(real);
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build_elf(LIBC, NULL, 0, &t), 0);
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), 0);
	cfi_table_free(&t);
	cfi_cache_set_dir(cachedir);
}

/* Files in dir not starting with '.'. */
static int files_in(const char *dir)
{
	DIR *d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

START_TEST(test_a_linked_or_foreign_directory_is_refused)
{
	char real[128], file[256], moved[160];
	stored_in_real(real, sizeof(real));
	ck_assert_int_eq(symlink(real, cachedir), 0);
	load_expect_refused(-ELOOP, "cache directory a symbolic link");
	/* Refused once for the process: not tried, nor counted, again. */
	struct cfi_cache_stats s0, s1;
	cfi_cache_get_stats(&s0);
	struct cfi_table l, t;
	ck_assert_int_eq(cfi_cache_load(LIBC, &l), -ENOENT);
	ck_assert_int_eq(cfi_table_build_elf(LIBC, NULL, 0, &t), 0);
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), 0); /* off: nothing attempted */
	cfi_cache_get_stats(&s1);
	ck_assert_uint_eq(s1.refused, s0.refused);
	ck_assert_uint_eq(s1.stored, s0.stored);
	/* A store that meets the link first fails, writing nothing through it (real's
	 * file moved out first, so that a write would show). */
	cfi_cache_set_dir(cachedir); /* set again: new chances */
	the_file_in(real, file, sizeof(file));
	snprintf(moved, sizeof(moved), "%s/old.cfi", root);
	ck_assert_int_eq(rename(file, moved), 0);
	cfi_cache_get_stats(&s0);
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), -ELOOP);
	cfi_cache_get_stats(&s1);
	ck_assert_uint_eq(s1.store_failures - s0.store_failures, 1);
	ck_assert_uint_eq(s1.refused - s0.refused, 1);
	ck_assert_int_eq(files_in(real), 0);
	ck_assert_int_eq(rename(moved, file), 0);
	/* real itself as the cache directory, writable by its group. */
	ck_assert_int_eq(unlink(cachedir), 0);
	ck_assert_int_eq(rename(real, cachedir), 0);
	ck_assert_int_eq(chmod(cachedir, 0770), 0);
	cfi_cache_set_dir(cachedir);
	load_expect_refused(-EPERM, "cache directory writable by its group");
	/* The control: mode 0700, it loads. */
	ck_assert_int_eq(chmod(cachedir, 0700), 0);
	cfi_cache_set_dir(cachedir);
	ck_assert_int_eq(cfi_cache_load(LIBC, &l), 0);
	cfi_table_free(&l);
	if (geteuid() == 0) { /* another user's: only root can give it away */
		ck_assert_int_eq(chown(cachedir, 65534, 65534), 0);
		cfi_cache_set_dir(cachedir);
		load_expect_refused(-EPERM, "cache directory of another user");
	}
	cfi_table_free(&t);
}
END_TEST

START_TEST(test_refusals_cost_one_warning_per_process)
{
	char err[4096];
	struct cfi_table t, l;
	ck_assert_int_eq(cfi_table_build_elf(LIBC, NULL, 0, &t), 0);
	char file[256];
	/* Another format version (an upgrade's leftover): counted, not a warning. */
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), 0);
	the_cache_file(file, sizeof(file));
	other_version(file, &t);
	begin_capture();
	ck_assert_int_eq(cfi_cache_load(LIBC, &l), -ESTALE);
	ck_assert_msg(end_capture(err, sizeof(err)) == 0, "a stale version warned: %s", err);
	/* Three refusals of three kinds: one warning, naming the first. */
	void (*damage[])(const char *, const struct cfi_table *) = {bad_magic, a_symlink,
								    writable_by_group};
	begin_capture();
	for (size_t i = 0; i < sizeof(damage) / sizeof(damage[0]); i++) {
		ck_assert_int_eq(cfi_cache_store(LIBC, &t), 0); /* replaces what is there */
		the_cache_file(file, sizeof(file));
		damage[i](file, &t);
		ck_assert_int_lt(cfi_cache_load(LIBC, &l), 0);
	}
	int warnings = end_capture(err, sizeof(err));
	ck_assert_msg(warnings == 1, "%d warnings for three refusals: %s", warnings, err);
	ck_assert_msg(strstr(err, "(not a cache file (magic))") != NULL, "warning: %s", err);
	cfi_table_free(&t);
}
END_TEST

START_TEST(test_a_table_over_the_cap_is_not_kept)
{
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build_elf(LIBC, NULL, 0, &t), 0);
	size_t nrows = t.nrows;
	/* Claimed only: the store must give up on the size before reading a row. */
	t.nrows = CFI_CACHE_MAX_TABLE_BYTES / sizeof(struct cfi_row) + 1;
	struct cfi_cache_stats s0, s1;
	cfi_cache_get_stats(&s0);
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), 0);
	cfi_cache_get_stats(&s1);
	ck_assert_uint_eq(s1.stored, s0.stored);
	ck_assert_uint_eq(s1.store_failures, s0.store_failures);
	ck_assert_int_eq(access(cachedir, F_OK), -1); /* not even the directory */
	t.nrows = nrows;
	cfi_table_free(&t);
}
END_TEST

START_TEST(test_small_tables_are_not_kept_and_write_failures_are_counted)
{
	/* ld.so's table is ~28 KiB; a table cut to a few rows is well under the bar. */
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build_elf(LIBC, NULL, 0, &t), 0);
	size_t nrows = t.nrows;
	t.nrows = 8;
	ck_assert_uint_lt(cfi_table_bytes(&t), CFI_CACHE_MIN_BYTES);
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), 0);
	ck_assert_int_eq(access(cachedir, F_OK), -1); /* not even the directory */
	t.nrows = nrows;
	/* A directory others may write to is not used. */
	ck_assert_int_eq(mkdir(cachedir, 0777), 0);
	ck_assert_int_eq(chmod(cachedir, 0777), 0);
	struct cfi_cache_stats s0, s1;
	cfi_cache_get_stats(&s0);
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), -EPERM);
	/* Nor one that cannot be created (a regular file is in the way). */
	/* Static: the cache keeps the string, not a copy, until teardown sets another. */
	static char blocked[160];
	snprintf(blocked, sizeof(blocked), "%s/file/cache", root);
	char file[128];
	snprintf(file, sizeof(file), "%s/file", root);
	FILE *f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	cfi_cache_set_dir(blocked);
	ck_assert_int_lt(cfi_cache_store(LIBC, &t), 0);
	cfi_cache_get_stats(&s1);
	ck_assert_uint_eq(s1.store_failures - s0.store_failures, 2);
	ck_assert_uint_eq(s1.stored, s0.stored);
	cfi_table_free(&t);
}
END_TEST

/* Creates cachedir/name with its access and modification times days_ago days back. */
static void aged_file(const char *name, int days_ago, char *path, size_t cap)
{
	snprintf(path, cap, "%s/%s", cachedir, name);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("x", f);
	fclose(f);
	struct timespec ts[2];
	clock_gettime(CLOCK_REALTIME, &ts[0]);
	ts[0].tv_sec -= (time_t)days_ago * 24 * 3600;
	ts[1] = ts[0];
	ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
}

START_TEST(test_a_store_removes_files_nobody_loaded_for_30_days)
{
	ck_assert_int_eq(mkdir(cachedir, 0700), 0);
	char old[160], fresh[160], tmp_old[160], tmp_new[160], other[160];
	aged_file("0000000000000001.cfi", 31, old, sizeof(old));
	aged_file("0000000000000002.cfi", 29, fresh, sizeof(fresh));
	aged_file(".tmp-1-0000000000000003.cfi", 2, tmp_old, sizeof(tmp_old));
	aged_file(".tmp-2-0000000000000004.cfi", 0, tmp_new, sizeof(tmp_new));
	aged_file("notes.txt", 400, other, sizeof(other));
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build_elf(LIBC, NULL, 0, &t), 0);
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), 0);
	ck_assert_int_eq(access(old, F_OK), -1);
	ck_assert_int_eq(access(tmp_old, F_OK), -1);
	ck_assert_int_eq(access(fresh, F_OK), 0);
	ck_assert_int_eq(access(tmp_new, F_OK), 0); /* maybe another process's, writing */
	ck_assert_int_eq(access(other, F_OK), 0);   /* not ours */
	struct cfi_table l;
	ck_assert_int_eq(cfi_cache_load(LIBC, &l), 0);
	cfi_table_free(&l);
	cfi_table_free(&t);
}
END_TEST

static Suite *cfi_cache_suite(void)
{
	Suite *s = suite_create("cfi_cache");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_a_stored_table_loads_back_and_answers_the_same);
	tcase_add_test(tc, test_a_changed_file_misses_and_an_off_cache_does_nothing);
	tcase_add_test(tc, test_damaged_or_foreign_files_are_refused);
	tcase_add_test(tc, test_a_file_claiming_a_huge_table_is_refused_before_any_allocation);
	tcase_add_test(tc, test_a_linked_or_foreign_directory_is_refused);
	tcase_add_test(tc, test_refusals_cost_one_warning_per_process);
	tcase_add_test(tc, test_a_table_over_the_cap_is_not_kept);
	tcase_add_test(tc, test_small_tables_are_not_kept_and_write_failures_are_counted);
	tcase_add_test(tc, test_a_store_removes_files_nobody_loaded_for_30_days);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(cfi_cache_suite());
}
