/*
 * gen_cfi_cache_seeds.c - writes the seed corpus of fuzz_cfi_cache.c into a directory:
 *   libm.cfi    libm's table, stored by cfi_cache_store (the real store code: its
 *               directory, name and file), the smallest Debian library whose table
 *               (74 KiB) is big enough to be kept;
 *   tiny.cfi    a three-row table written by cfi_cache_file_write (fast to mutate);
 *   stale.cfi   tiny.cfi with the next format version;
 *   short.cfi   tiny.cfi cut in the middle of its rows.
 * Context: a tool run by hand, when the format changes.
 *
 * Build and run, from the repository's root (after make):
 *   cc -D_GNU_SOURCE -I. test/fuzz/gen_cfi_cache_seeds.c build/libddprof_core.a \
 *     -o /tmp/gen_cfi_cache_seeds -lelf -ldl -lpthread -lrt
 *   /tmp/gen_cfi_cache_seeds test/fuzz/corpus/cfi_cache
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/unwind/cfi_cache.h"
#include "agent/unwind/cfi_cache_file.h"
#include "agent/unwind/cfi_table.h"

#define LIBM "/lib/x86_64-linux-gnu/libm.so.6"

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* Copies the one *.cfi file of dir to out. */
static void copy_stored(const char *dir, const char *out)
{
	DIR *d = opendir(dir);
	if (!d)
		die(dir);
	char cmd[1024] = "";
	for (struct dirent *e; (e = readdir(d));)
		if (strstr(e->d_name, ".cfi") && e->d_name[0] != '.')
			snprintf(cmd, sizeof(cmd), "cp %s/%s %s", dir, e->d_name, out);
	closedir(d);
	if (!cmd[0] || system(cmd) != 0)
		die("copy of the stored file");
}

static void write_tiny(const char *path, uint32_t version, size_t cut)
{
	struct cfi_row rows[3] = {
	    {.pc = 0x10, .cfa_off = 8, .kind = CFI_SP},
	    {.pc = 0x11, .cfa_off = 16, .kind = CFI_SP, .fp_rule = CFI_FP_SAVED, .fp_off = -16},
	    {.pc = 0x1040, .kind = CFI_NONE},
	};
	uint32_t page[2] = {0, 1};
	struct cfi_table t = {
	    .base = 0x1000, .rows = rows, .nrows = 3, .page = page, .npages = 2, .fdes = 1};
	struct cfi_cache_key k;
	if (!cfi_cache_file_key(LIBM, &k))
		die(LIBM);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || cfi_cache_file_write(fd, &k, &t) != 0)
		die(path);
	if (version != CFI_CACHE_VERSION &&
	    pwrite(fd, &version, 4, offsetof(struct cfi_cache_header, version)) != 4)
		die(path);
	if (cut && ftruncate(fd, (off_t)cut) != 0)
		die(path);
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
		return 2;
	}
	char tmp[] = "/tmp/gen_cfi_cache_seeds.XXXXXX", out[1024];
	if (!mkdtemp(tmp))
		die("mkdtemp");
	char dir[64];
	snprintf(dir, sizeof(dir), "%s/cache", tmp);
	cfi_cache_set_dir(dir);
	struct cfi_table t;
	if (cfi_table_build_elf(LIBM, NULL, 0, &t) != 0 || cfi_cache_store(LIBM, &t) != 0)
		die("libm's table");
	cfi_table_free(&t);
	snprintf(out, sizeof(out), "%s/libm.cfi", argv[1]);
	copy_stored(dir, out);
	snprintf(out, sizeof(out), "%s/tiny.cfi", argv[1]);
	write_tiny(out, CFI_CACHE_VERSION, 0);
	snprintf(out, sizeof(out), "%s/stale.cfi", argv[1]);
	write_tiny(out, CFI_CACHE_VERSION + 1, 0);
	snprintf(out, sizeof(out), "%s/short.cfi", argv[1]);
	write_tiny(out, CFI_CACHE_VERSION, CFI_CACHE_HEADER_BYTES + 18);
	snprintf(out, sizeof(out), "rm -rf %s", tmp);
	return system(out) == 0 ? 0 : 1;
}
