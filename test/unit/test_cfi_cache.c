/*
 * test_cfi_cache.c - unit tests of agent/cfi_cache.c: unwind tables kept on disk.
 *
 * A table stored and loaded again must answer every lookup as the built one does; a
 * file changed since, a cache file that is not ours, writable by others, truncated or
 * with a page index pointing past the rows must be refused (counted), never mapped;
 * small tables are not kept, and a cache that cannot be written is counted, not fatal.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/cfi_cache.h"
#include "agent/cfi_table.h"
#include "check_run.h"

#define LIBC "/lib/x86_64-linux-gnu/libc.so.6"

static char root[64];	 /* per test: a fresh directory */
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

/* The only file in the cache directory (asserts there is exactly one). */
static void the_cache_file(char *out, size_t cap)
{
	DIR *d = opendir(cachedir);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		ck_assert_int_lt(snprintf(out, cap, "%s/%.64s", cachedir, e->d_name), (int)cap);
		n++;
	}
	closedir(d);
	ck_assert_int_eq(n, 1);
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

/* Stores libc's table, lets damage() change the file, and expects load to refuse it
 * with rc (counted) and to map nothing. */
static void expect_refused(void (*damage)(const char *file, const struct cfi_table *t), int rc)
{
	struct cfi_table t, l;
	ck_assert_int_eq(cfi_table_build_elf(LIBC, NULL, 0, &t), 0);
	ck_assert_int_eq(cfi_cache_store(LIBC, &t), 0);
	char file[256];
	the_cache_file(file, sizeof(file));
	damage(file, &t);
	struct cfi_cache_stats s0, s1;
	cfi_cache_get_stats(&s0);
	ck_assert_int_eq(cfi_cache_load(LIBC, &l), rc);
	cfi_cache_get_stats(&s1);
	ck_assert_uint_eq(s1.refused - s0.refused, 1);
	ck_assert_uint_eq(s1.hits, s0.hits);
	ck_assert_ptr_null(l.rows);
	ck_assert_uint_eq(l.nrows, 0);
	cfi_table_free(&t);
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

START_TEST(test_damaged_or_foreign_files_are_refused)
{
	expect_refused(writable_by_group, -EPERM);
	expect_refused(truncated, -EINVAL);
	expect_refused(index_past_the_rows, -EINVAL);
	expect_refused(index_going_back, -EINVAL);
	expect_refused(other_key_in_header, -EINVAL);
	if (geteuid() == 0) /* only root can give a file away */
		expect_refused(not_ours, -EPERM);
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
	tcase_add_test(tc, test_small_tables_are_not_kept_and_write_failures_are_counted);
	tcase_add_test(tc, test_a_store_removes_files_nobody_loaded_for_30_days);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(cfi_cache_suite());
}
