/*
 * test_perf_map.c - the perf map reader (agent/symbolize/perf_map.c): lines that parse
 * and lines that do not, long lines and names, later lines winning over overlapping
 * earlier ones (checked against a reference written here from the rule), growth read
 * from where the last pass stopped and rewrites read whole, the trust rules (another
 * owner, group- or world-writable, a symbolic link, a FIFO, a directory, a sparse file
 * over the cap: refused with one warning), a fork child that does not use its parent's
 * map; and the symbolizer's use of it (JIT pcs named, their mapping "[jit]").
 * Context: test process (root in CI: chown to nobody works); files under /tmp.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/symbolize/perf_map.h"
#include "agent/symbolize/symbolizer.h"
#include "check_run.h"

#define NOBODY_UID 65534

static char dir[64], path[128];
static struct perf_map *pm;

static void setup(void)
{
	strcpy(dir, "/tmp/perf-map-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/perf.map", dir);
	pm = perf_map_new();
	ck_assert_ptr_nonnull(pm);
}

static void teardown(void)
{
	perf_map_free(pm);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void write_at(const char *p, const void *data, size_t len, int flags, mode_t mode)
{
	int fd = open(p, O_WRONLY | O_CREAT | flags, mode);
	ck_assert_msg(fd >= 0, "open %s: %s", p, strerror(errno));
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static void write_file(const char *text)
{
	write_at(path, text, strlen(text), O_TRUNC, 0600);
}

static void append_file(const char *text)
{
	write_at(path, text, strlen(text), O_APPEND, 0600);
}

static struct perf_map_stats stats(void)
{
	struct perf_map_stats st;
	perf_map_get_stats(pm, &st);
	return st;
}

static void assert_name(uintptr_t addr, const char *want)
{
	const char *got = perf_map_find(pm, addr);
	if (!want)
		ck_assert_msg(got == NULL, "0x%lx: expected no name, got \"%s\"",
			      (unsigned long)addr, got);
	else
		ck_assert_msg(got && strcmp(got, want) == 0, "0x%lx: expected \"%s\", got \"%s\"",
			      (unsigned long)addr, want, got ? got : "(none)");
}

START_TEST(valid_lines_name_their_ranges)
{
	write_file("1000 10 plain\n"
		   "0x2000 0x20 with 0x prefixes\n"
		   "3000\t8\ttabs and  inner  spaces\r\n"
		   "0X4000 0X1 LazyCompile:*fib /app/x.js:3\n"
		   "ffffffffffff0000 ffff at the top of the address space\n");
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 5);
	assert_name(0x0fff, NULL);
	assert_name(0x1000, "plain");
	assert_name(0x100f, "plain");
	assert_name(0x1010, NULL);
	assert_name(0x201f, "with 0x prefixes");
	assert_name(0x3004, "tabs and  inner  spaces");
	assert_name(0x4000, "LazyCompile:*fib /app/x.js:3");
	assert_name(0x4001, NULL);
	assert_name(UINTPTR_MAX - 1, "at the top of the address space");
	assert_name(UINTPTR_MAX, NULL); /* an end of 2^64 does not fit: the range stops before */
	ck_assert(perf_map_overlaps(pm, 0x100f, 0x1010));
	ck_assert(!perf_map_overlaps(pm, 0x1010, 0x2000));
	ck_assert_uint_eq(stats().bad_lines, 0);
	ck_assert_uint_eq(stats().lines, 5);
}
END_TEST

/* Runs one refresh with stderr in a file: the refresh's result, and the number of
 * warning lines about the perf map it wrote into *warnings. */
static int refresh_counting_warnings(int *warnings)
{
	char errpath[160];
	snprintf(errpath, sizeof(errpath), "%s/stderr", dir);
	int efd = open(errpath, O_RDWR | O_CREAT | O_TRUNC, 0600);
	int saved = dup(2);
	ck_assert(efd >= 0 && saved >= 0);
	dup2(efd, 2);
	int rc = perf_map_refresh_path(pm, path);
	dup2(saved, 2);
	close(saved);
	char buf[4096] = {0};
	ssize_t n = pread(efd, buf, sizeof(buf) - 1, 0);
	close(efd);
	*warnings = 0;
	for (const char *p = buf; n > 0 && (p = strstr(p, "perf map")) != NULL; p++)
		(*warnings)++;
	return rc;
}

START_TEST(garbage_lines_are_skipped_and_counted)
{
	static const char text[] = "\n"				    /* empty */
				   "1000\n"			    /* no size */
				   "1000 10\n"			    /* no name */
				   "1000 10    \n"		    /* blanks only */
				   "xyz 10 name\n"		    /* not hex */
				   "1000 zz name\n"		    /* size not hex */
				   "1000 0 zero size\n"		    /* empty range */
				   "1000-10 name\n"		    /* no blank after START */
				   "0x 10 name\n"		    /* prefix, no digit */
				   "10000000000000000 10 too big\n" /* 17 digits */
				   "ffffffffffffff00 101 wraps\n"   /* start + size > 2^64 */
				   "5000 10 good\n"
				   "6000 10 ctl\001\177 bad \xff\xc3\x28 utf8 \xc3\xa9 ok\n";
	write_file(text);
	int warnings;
	ck_assert_int_eq(refresh_counting_warnings(&warnings), 2);
	ck_assert_uint_eq(stats().bad_lines, 11);
	ck_assert_msg(warnings == 1, "%d warning lines for bad lines, expected 1", warnings);
	append_file("zz\n");
	ck_assert_int_eq(refresh_counting_warnings(&warnings), 2);
	ck_assert_uint_eq(stats().bad_lines, 12);
	ck_assert_msg(warnings == 0, "warned again for bad lines");
	assert_name(0x1000, NULL);
	assert_name(0x5008, "good");
	/* Control bytes and broken UTF-8 become '?'; a well-formed é stays. */
	assert_name(0x6000, "ctl?? bad ?"
			    "?( utf8 \xc3\xa9 ok");

	/* Random bytes, NULs included: no crash, whatever parses is kept. */
	srand(27);
	for (int round = 0; round < 50; round++) {
		char junk[8192];
		for (size_t i = 0; i < sizeof(junk); i++)
			junk[i] = (char)(rand() % 7 == 0 ? '\n' : rand());
		write_at(path, junk, sizeof(junk), O_TRUNC, 0600);
		ck_assert_int_ge(perf_map_refresh_path(pm, path), 0);
		for (uintptr_t a = 0; a < 4096; a += 7)
			perf_map_find(pm, a);
	}
}
END_TEST

START_TEST(long_lines_are_skipped_and_long_names_cut)
{
	size_t big = 100000;
	char *line = malloc(big + 64);
	memset(line, 'a', big);
	memcpy(line, "1000 10 ", 8);
	strcpy(line + big, "\n2000 10 after the long line\n");
	write_file(line);
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 1);
	ck_assert_uint_eq(stats().bad_lines, 1);
	assert_name(0x1000, NULL);
	assert_name(0x2000, "after the long line");

	/* A name longer than PERF_MAP_NAME_MAX in a line shorter than PERF_MAP_LINE_MAX. */
	memset(line, 'n', 3000);
	memcpy(line, "3000 10 ", 8);
	strcpy(line + 3000, "\n");
	append_file(line);
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 2);
	ck_assert_uint_eq(strlen(perf_map_find(pm, 0x3000)), PERF_MAP_NAME_MAX);

	/* A long line written in two passes, without its newline at the first: counted once,
	 * and the line after it parsed. */
	memset(line, 'b', 3000);
	line[3000] = 0;
	append_file(line);
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 2);
	append_file(line);
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 2);
	append_file("\n4000 10 after the split line\n");
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 3);
	ck_assert_uint_eq(stats().bad_lines, 2);
	assert_name(0x4000, "after the split line");
	free(line);
}
END_TEST

START_TEST(later_lines_win_over_overlapping_ones)
{
	write_file("1000 2000 old\n"	  /* [0x1000, 0x3000) */
		   "1800 800 new\n"	  /* [0x1800, 0x2000): splits old */
		   "2800 1000 newer\n"	  /* [0x2800, 0x3800): cuts old's end */
		   "2800 1000 newest\n"); /* the same range again */
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 4);
	assert_name(0x17ff, "old");
	assert_name(0x1800, "new");
	assert_name(0x1fff, "new");
	assert_name(0x2000, "old");
	assert_name(0x27ff, "old");
	assert_name(0x2800, "newest");
	assert_name(0x37ff, "newest");
	assert_name(0x3800, NULL);
	/* An older line does not come back over a newer one in a later pass... */
	append_file("1000 100 reused\n");
	ck_assert_int_ge(perf_map_refresh_path(pm, path), 0);
	assert_name(0x1000, "reused");
	assert_name(0x1100, "old");
	assert_name(0x1800, "new");
}
END_TEST

static void assert_name_at(uintptr_t addr, uint32_t epoch, const char *want)
{
	const char *got = perf_map_find_at(pm, addr, epoch);
	ck_assert_msg(got && strcmp(got, want) == 0, "0x%lx at epoch %u: %s, want %s",
		      (unsigned long)addr, epoch, got ? got : "(none)", want);
}

/* A pass that gives code another name starts an epoch; each epoch's name stays findable
 * (the earliest retirement after it), a line naming the same code again starts none,
 * and pruning forgets what only older epochs need. */
START_TEST(renamed_code_keeps_its_name_per_epoch)
{
	write_file("1000 100 a\n2000 100 untouched\n");
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 2);
	ck_assert_uint_eq(perf_map_epoch(pm), 0);
	append_file("1000 100 a\n"); /* written again, same name: no epoch */
	ck_assert_int_ge(perf_map_refresh_path(pm, path), 0);
	ck_assert_uint_eq(perf_map_epoch(pm), 0);
	append_file("1000 100 b\n"); /* reused */
	ck_assert_int_ge(perf_map_refresh_path(pm, path), 0);
	ck_assert_uint_eq(perf_map_epoch(pm), 1);
	assert_name_at(0x1050, 0, "a");
	assert_name_at(0x1050, 1, "b");
	ck_assert(perf_map_renamed_since(pm, 0x1050, 0));
	ck_assert(!perf_map_renamed_since(pm, 0x1050, 1));
	ck_assert(!perf_map_renamed_since(pm, 0x2050, 0));
	assert_name_at(0x2050, 0, "untouched");
	append_file("1050 10 c\n"); /* part of b's range */
	ck_assert_int_ge(perf_map_refresh_path(pm, path), 0);
	ck_assert_uint_eq(perf_map_epoch(pm), 2);
	assert_name_at(0x1055, 0, "a");
	assert_name_at(0x1055, 1, "b");
	assert_name_at(0x1055, 2, "c");
	assert_name_at(0x1040, 1, "b"); /* b's part that c left */
	assert_name_at(0x1040, 0, "a");
	ck_assert(perf_map_renamed_since(pm, 0x1055, 1));
	ck_assert(!perf_map_renamed_since(pm, 0x1040, 1));
	perf_map_prune(pm, 1); /* epoch 0 is no longer needed */
	assert_name_at(0x1055, 1, "b");
	assert_name_at(0x1040, 1, "b");
	perf_map_prune(pm, 2);
	ck_assert(!perf_map_renamed_since(pm, 0x1055, 1));
	assert_name_at(0x1055, 1, "c"); /* forgotten: named as now */
}
END_TEST

#define REF_SPACE 320

/* Random overlapping lines in several appended passes against a reference painted line
 * by line in file order (the header's rule: the last line covering an address wins). */
START_TEST(overlaps_match_a_reference_over_random_passes)
{
	srand(2027);
	for (int round = 0; round < 200; round++) {
		int ref[REF_SPACE];
		for (int a = 0; a < REF_SPACE; a++)
			ref[a] = -1;
		write_file("");
		perf_map_free(pm);
		pm = perf_map_new();
		int lines = 1 + rand() % 40, passes = 1 + rand() % 4;
		for (int i = 0; i < lines; i++) {
			int start = rand() % 256, size = 1 + rand() % 64;
			char buf[64];
			snprintf(buf, sizeof(buf), "%x %x n%d\n", start, size, i);
			append_file(buf);
			for (int a = start; a < start + size; a++)
				ref[a] = i;
			if (i == lines - 1 || rand() % lines < passes)
				ck_assert_int_ge(perf_map_refresh_path(pm, path), 0);
		}
		ck_assert_uint_eq(stats().rereads, 0);
		for (int a = 0; a < REF_SPACE; a++) {
			char want[16];
			snprintf(want, sizeof(want), "n%d", ref[a]);
			assert_name((uintptr_t)a, ref[a] < 0 ? NULL : want);
		}
	}
}
END_TEST

START_TEST(growth_is_read_from_where_the_last_pass_stopped)
{
	write_file("1000 10 first\n2000 10 sec");
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 1); /* a line counts at its newline */
	uint64_t read1 = stats().bytes_read;
	ck_assert_uint_eq(read1, strlen("1000 10 first\n2000 10 sec"));
	assert_name(0x2000, NULL);
	append_file("ond\n3000 10 third\n");
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 3);
	/* Only the unfinished line and what was appended were read again. */
	ck_assert_uint_eq(stats().bytes_read - read1, strlen("2000 10 second\n3000 10 third\n"));
	assert_name(0x2000, "second");
	ck_assert_uint_eq(stats().rereads, 0);
	/* Unchanged: nothing read. */
	uint64_t read2 = stats().bytes_read;
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 3);
	ck_assert_uint_eq(stats().bytes_read, read2);

	/* Shrunk: read whole, the old names gone. */
	write_file("4000 10 after truncation\n");
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 1);
	ck_assert_uint_eq(stats().rereads, 1);
	assert_name(0x1000, NULL);
	assert_name(0x4000, "after truncation");

	/* Rewritten in place, larger than before: the bytes before the stopping point
	 * changed, so it is not taken for growth. */
	write_file("5000 10 rewritten, and longer than the file was\n");
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 1);
	ck_assert_uint_eq(stats().rereads, 2);
	assert_name(0x4000, NULL);
	assert_name(0x5000, "rewritten, and longer than the file was");

	/* Replaced by another file (rename over it: another inode), same size. */
	char other[160];
	snprintf(other, sizeof(other), "%s/other", dir);
	static const char same_size[] = "6000 10 rewritten, and longer than the file wa2\n";
	write_at(other, same_size, strlen(same_size), O_TRUNC, 0600);
	ck_assert_int_eq(rename(other, path), 0);
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 1);
	ck_assert_uint_eq(stats().rereads, 3);
	assert_name(0x5000, NULL);
	assert_name(0x6000, "rewritten, and longer than the file wa2");

	/* Removed: the names read so far stay. */
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 1);
	assert_name(0x6000, "rewritten, and longer than the file wa2");
}
END_TEST

/* A trusted map, then the change applied: refused, its entries dropped, counted. */
static void check_refused(void (*make_untrusted)(void), const char *why)
{
	perf_map_free(pm); /* a new one: its warning not spent */
	pm = perf_map_new();
	write_file("1000 10 trusted\n");
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 1);
	make_untrusted();
	int warnings;
	uint64_t rejects = stats().rejects;
	ck_assert_msg(refresh_counting_warnings(&warnings) == -EPERM, "%s: not refused", why);
	ck_assert_msg(warnings == 1, "%s: %d warning lines, expected 1", why, warnings);
	ck_assert_uint_eq(stats().rejects, rejects + 1);
	assert_name(0x1000, NULL);
	ck_assert_int_eq(refresh_counting_warnings(&warnings), -EPERM);
	ck_assert_msg(warnings == 0, "%s: warned again", why);
}

static void chown_nobody(void)
{
	ck_assert_int_eq(chown(path, NOBODY_UID, NOBODY_UID), 0);
}

static void chmod_group_writable(void)
{
	ck_assert_int_eq(chmod(path, 0620), 0);
}

static void chmod_world_writable(void)
{
	ck_assert_int_eq(chmod(path, 0602), 0);
}

static void replace_by_symlink(void)
{
	char target[160];
	snprintf(target, sizeof(target), "%s/target", dir);
	write_at(target, "1000 10 through a link\n", 23, O_TRUNC, 0600);
	unlink(path);
	ck_assert_int_eq(symlink(target, path), 0);
}

static void replace_by_fifo(void)
{
	unlink(path);
	ck_assert_int_eq(mkfifo(path, 0600), 0); /* opened O_NONBLOCK: no writer, no wait */
}

static void replace_by_directory(void)
{
	unlink(path);
	ck_assert_int_eq(mkdir(path, 0700), 0);
}

static void grow_sparse_past_cap(void)
{
	ck_assert_int_eq(truncate(path, (off_t)PERF_MAP_FILE_MAX + 1), 0);
}

START_TEST(untrusted_files_are_refused_with_one_warning)
{
	ck_assert_int_eq(geteuid(), 0); /* chown needs root */
	check_refused(chown_nobody, "owned by nobody");
	unlink(path);
	check_refused(chmod_group_writable, "group-writable");
	unlink(path);
	check_refused(chmod_world_writable, "world-writable");
	unlink(path);
	check_refused(replace_by_symlink, "symbolic link");
	unlink(path);
	check_refused(replace_by_fifo, "FIFO");
	unlink(path);
	check_refused(replace_by_directory, "directory");
	rmdir(path);
	check_refused(grow_sparse_past_cap, "sparse file over the cap");
	/* Trusted again: read again. */
	unlink(path);
	write_file("2000 10 trusted again\n");
	ck_assert_int_eq(perf_map_refresh_path(pm, path), 1);
	assert_name(0x2000, "trusted again");
}
END_TEST

START_TEST(lines_past_the_entry_cap_are_dropped)
{
	size_t n = PERF_MAP_ENTRIES_MAX + 10, len = 0;
	char *text = malloc(n * 24 + 1);
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(text + len, "%zx 10 f%zu\n", (size_t)0x1000 + i * 0x10, i);
	write_at(path, text, len, O_TRUNC, 0600);
	free(text);
	ck_assert_int_eq(perf_map_refresh_path(pm, path), (int)PERF_MAP_ENTRIES_MAX);
	ck_assert_uint_eq(stats().dropped, 10);
	assert_name(0x1000, "f0");
	char last[32];
	snprintf(last, sizeof(last), "f%zu", PERF_MAP_ENTRIES_MAX - 1);
	assert_name(0x1000 + (PERF_MAP_ENTRIES_MAX - 1) * 0x10, last);
	assert_name(0x1000 + PERF_MAP_ENTRIES_MAX * 0x10, NULL);
}
END_TEST

static void pid_map_path(char *out, size_t size, int pid)
{
	snprintf(out, size, "/tmp/perf-%d.map", pid);
}

START_TEST(a_fork_child_does_not_use_its_parents_map)
{
	char own[64];
	pid_map_path(own, sizeof(own), (int)getpid());
	write_at(own, "1000 10 parent\n", 15, O_TRUNC, 0600);
	ck_assert_int_eq(perf_map_refresh(pm), 1);
	assert_name(0x1000, "parent");
	pid_t child = fork();
	if (child == 0) {
		/* The child's own map: none yet, then one. */
		int rc = perf_map_refresh(pm);
		bool none = rc == 0 && perf_map_find(pm, 0x1000) == NULL;
		char mine[64];
		pid_map_path(mine, sizeof(mine), (int)getpid());
		int fd = open(mine, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		bool wrote = fd >= 0 && write(fd, "1000 10 child\n", 14) == 14;
		close(fd);
		rc = perf_map_refresh(pm);
		const char *name = perf_map_find(pm, 0x1000);
		bool own_name = rc == 1 && name && strcmp(name, "child") == 0;
		unlink(mine);
		_exit(none && wrote && own_name ? 0 : 1);
	}
	int status;
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	unlink(own);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child saw its parent's map, or not its own (status %d)", status);
	ck_assert_int_eq(perf_map_refresh(pm), 1); /* the parent's unchanged */
	assert_name(0x1000, "parent");
}
END_TEST

START_TEST(symbolizer_names_jit_pcs_and_their_mapping)
{
	size_t len = 3 * 4096;
	uint8_t *code = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert(code != MAP_FAILED);
	memset(code, 0xc3, len); /* ret */
	ck_assert_int_eq(mprotect(code, len, PROT_READ | PROT_EXEC), 0);
	/* The first page is named; the third, an executable mapping of its own after the
	 * second is made non-executable, is not. */
	ck_assert_int_eq(mprotect(code + 4096, 4096, PROT_READ), 0);
	char own[64], text[128];
	pid_map_path(own, sizeof(own), (int)getpid());
	snprintf(text, sizeof(text), "%lx 20 jit_outer\n%lx 20 jit_inner\n%lx 10 jit_gone\n",
		 (unsigned long)code, (unsigned long)(code + 0x20), (unsigned long)(code + 4096));
	write_at(own, text, strlen(text), O_TRUNC, 0600);

	struct symbolizer *s = symbolizer_new();
	ck_assert_int_gt(symbolizer_refresh(s), 0);
	struct sym_frame fr[SYM_MAX_FRAMES];
	ck_assert_uint_eq(symbolizer_frames(s, (uintptr_t)code + 5, false, fr, SYM_MAX_FRAMES), 1);
	ck_assert_str_eq(fr[0].function, "jit_outer");
	ck_assert_ptr_null(fr[0].file);
	/* A return address at the start of jit_inner is a call at the end of jit_outer. */
	ck_assert_uint_eq(symbolizer_frames(s, (uintptr_t)code + 0x20, true, fr, SYM_MAX_FRAMES),
			  1);
	ck_assert_str_eq(fr[0].function, "jit_outer");
	ck_assert_str_eq(symbolizer_function(s, (uintptr_t)code + 0x21, true), "jit_inner");
	int m = symbolizer_find_mapping(s, (uintptr_t)code);
	ck_assert_int_ge(m, 0);
	ck_assert_str_eq(symbolizer_mapping(s, m)->path, "[jit]");
	int third = symbolizer_find_mapping(s, (uintptr_t)code + 2 * 4096);
	ck_assert_int_ge(third, 0);
	ck_assert_str_eq(symbolizer_mapping(s, third)->path, "[anon]");
	/* Memory not executable (or unmapped) by the time of the upload: named all the same. */
	ck_assert_int_lt(symbolizer_find_mapping(s, (uintptr_t)code + 4096), 0);
	ck_assert_str_eq(symbolizer_function(s, (uintptr_t)code + 4096, false), "jit_gone");
	struct symbolizer_stats st;
	symbolizer_get_stats(s, &st);
	ck_assert_uint_eq(st.jit_frames, 4);
	symbolizer_free(s);
	unlink(own);
	munmap(code, len);
}
END_TEST

START_TEST(symbolizer_without_a_map_is_unchanged)
{
	char own[64];
	pid_map_path(own, sizeof(own), (int)getpid());
	unlink(own);
	struct symbolizer *s = symbolizer_new();
	ck_assert_int_gt(symbolizer_refresh(s), 0);
	for (size_t i = 0; i < symbolizer_mapping_count(s); i++)
		ck_assert_str_ne(symbolizer_mapping(s, (int)i)->path, "[jit]");
	ck_assert_ptr_null(symbolizer_function(s, 0x1000, false));
	symbolizer_free(s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("perf_map");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, valid_lines_name_their_ranges);
	tcase_add_test(tc, garbage_lines_are_skipped_and_counted);
	tcase_add_test(tc, long_lines_are_skipped_and_long_names_cut);
	tcase_add_test(tc, later_lines_win_over_overlapping_ones);
	tcase_add_test(tc, overlaps_match_a_reference_over_random_passes);
	tcase_add_test(tc, growth_is_read_from_where_the_last_pass_stopped);
	tcase_add_test(tc, untrusted_files_are_refused_with_one_warning);
	tcase_add_test(tc, lines_past_the_entry_cap_are_dropped);
	tcase_add_test(tc, a_fork_child_does_not_use_its_parents_map);
	tcase_add_test(tc, renamed_code_keeps_its_name_per_epoch);
	suite_add_tcase(s, tc);
	TCase *ts = tcase_create("symbolizer");
	tcase_add_checked_fixture(ts, setup, teardown);
	tcase_set_timeout(ts, 60);
	tcase_add_test(ts, symbolizer_names_jit_pcs_and_their_mapping);
	tcase_add_test(ts, symbolizer_without_a_map_is_unchanged);
	suite_add_tcase(s, ts);
	return check_run_suite(s);
}
