/*
 * test_file_spool.c - unit tests of uploader/file_spool.c: the output directory kept
 * through a chroot-like loss of its path and a reused descriptor number; the spool made
 * for a user before root gives it up; the sweep that moves only that user's plain,
 * completed profiles into the directory and leaves everything else where it is.
 * Most need root (make check runs as root in CI): without it they say so and pass.
 */
#include "uploader/file_spool.h"

#include <check.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/unit/check_run.h"

#define NOBODY 65534

static char base[64];

static void make_base(void)
{
	strcpy(base, "/tmp/ddprof-spool-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(base));
}

static void cleanup(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
	ck_assert_int_eq(system(cmd), 0);
}

static void put(const char *dir, const char *name, const char *text)
{
	char p[512];
	snprintf(p, sizeof(p), "%.300s/%.100s", dir, name);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static bool exists(const char *dir, const char *name)
{
	char p[512];
	struct stat st;
	snprintf(p, sizeof(p), "%.300s/%.100s", dir, name);
	return lstat(p, &st) == 0;
}

/* The directory's descriptor survives the loss of its path (renamed away, as a chroot
 * hides it) and is dropped, not followed, once its number is another file's. */
START_TEST(test_the_kept_directory_outlives_its_path_and_never_a_reused_number)
{
	make_base();
	pid_t pid = fork();
	if (pid == 0) {
		char out[128], moved[128];
		snprintf(out, sizeof(out), "%s/out", base);
		snprintf(moved, sizeof(moved), "%s/elsewhere", base);
		file_spool_before_chroot(out); /* makes it, as the exporter would */
		int fd = file_spool_dir_fd();
		if (fd < 0)
			_exit(1);
		if (rename(out, moved) != 0)
			_exit(2);
		if (file_spool_dir_fd() != fd)
			_exit(3);
		int t = openat(fd, "x", O_WRONLY | O_CREAT | O_EXCL, 0600);
		if (t < 0 || !exists(moved, "x"))
			_exit(4);
		close(t);
		/* The program closes our descriptor and opens a file of its own there. */
		close(fd);
		int other = open("/dev/null", O_RDONLY);
		if (other != fd)
			_exit(5);
		_exit(file_spool_dir_fd() == -1 ? 0 : 6);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "status 0x%x (1 not kept, 2 rename, 3 lost with its path, 4 not written "
		      "through, 5 number not reused, 6 a reused number kept)",
		      st);
	cleanup();
}
END_TEST

/* Root gives up its user: the spool is made, root's 0711 and nobody's 0700, and the
 * process, now nobody, writes there and not in the 0755 root directory. */
START_TEST(test_a_drop_makes_the_users_spool_before_it)
{
	if (geteuid() != 0)
		return; /* needs root */
	make_base();
	char out[128];
	snprintf(out, sizeof(out), "%s/out", base);
	ck_assert_int_eq(mkdir(out, 0755), 0);
	pid_t pid = fork();
	if (pid == 0) {
		file_spool_before_drop(out, NOBODY);
		if (setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
			_exit(1);
		if (open(out, O_RDONLY) >= 0 && file_spool_fd() < 0)
			_exit(2);
		int dfd = file_spool_dir_fd();
		if (dfd < 0 || openat(dfd, "y", O_WRONLY | O_CREAT, 0600) >= 0)
			_exit(3); /* the directory is kept, and root's */
		int t =
		    openat(file_spool_fd(), "libddprof_1_000000.pprof", O_WRONLY | O_CREAT, 0600);
		_exit(t >= 0 ? 0 : 4);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "status 0x%x (1 setuid, 2 no spool, 3 dir, 4 not writable as nobody)", st);
	char spool[160], user[192];
	snprintf(spool, sizeof(spool), "%s/" FILE_SPOOL_DIR, out);
	snprintf(user, sizeof(user), "%s/65534", spool);
	struct stat s1, s2;
	ck_assert_int_eq(stat(spool, &s1), 0);
	ck_assert_int_eq(stat(user, &s2), 0);
	ck_assert_uint_eq(s1.st_uid, 0);
	ck_assert_uint_eq(s1.st_mode & 0777, 0711);
	ck_assert_uint_eq(s2.st_uid, NOBODY);
	ck_assert_uint_eq(s2.st_mode & 0777, 0700);
	ck_assert(exists(user, "libddprof_1_000000.pprof"));
	cleanup();
}
END_TEST

/* The sweep moves nobody's completed profiles, made root's and 0600; it leaves files
 * being written, other names, a symbolic link, a FIFO, a file with a second link and
 * a file of another user; a profile already in the directory is never replaced. */
START_TEST(test_the_sweep_moves_only_the_users_plain_completed_profiles)
{
	if (geteuid() != 0)
		return;
	make_base();
	char out[128], spool[160], user[192], p[512], q[512];
	snprintf(out, sizeof(out), "%s/out", base);
	snprintf(spool, sizeof(spool), "%s/" FILE_SPOOL_DIR, out);
	snprintf(user, sizeof(user), "%s/65534", spool);
	ck_assert_int_eq(mkdir(out, 0755), 0);
	ck_assert_int_eq(mkdir(spool, 0711), 0);
	ck_assert_int_eq(mkdir(user, 0700), 0);
	put(user, "libddprof_10_000000.pprof", "a");
	put(user, "libddprof_10_000001.pprof", "b");
	put(user, ".libddprof_10_000002.pprof.tmp", "being written");
	put(user, "notes.txt", "not a profile");
	put(user, "libddprof_11_000000.pprof", "hard");
	put(user, "libddprof_12_000000.pprof", "root's");
	put(user, "libddprof_13_000000.pprof", "new");
	put(out, "libddprof_13_000000.pprof", "already there");
	snprintf(p, sizeof(p), "%s/libddprof_11_000000.pprof", user);
	snprintf(q, sizeof(q), "%s/second-link", user);
	ck_assert_int_eq(link(p, q), 0);
	snprintf(p, sizeof(p), "%s/libddprof_14_000000.pprof", user);
	ck_assert_int_eq(symlink("/etc/shadow", p), 0);
	snprintf(p, sizeof(p), "%s/libddprof_15_000000.pprof", user);
	ck_assert_int_eq(mkfifo(p, 0600), 0);
	const char *nobodys[] = {"libddprof_10_000000.pprof", "libddprof_10_000001.pprof",
				 "libddprof_11_000000.pprof", "libddprof_13_000000.pprof",
				 "libddprof_15_000000.pprof", "second-link"};
	for (size_t i = 0; i < sizeof(nobodys) / sizeof(nobodys[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", user, nobodys[i]);
		ck_assert_int_eq(lchown(p, NOBODY, NOBODY), 0);
	}
	snprintf(p, sizeof(p), "%s/libddprof_10_000000.pprof", user);
	ck_assert_int_eq(chmod(p, 0644), 0);
	ck_assert_int_eq(chown(user, NOBODY, NOBODY), 0);

	ck_assert_int_eq(file_spool_sweep(-1, out), 2);
	ck_assert(exists(out, "libddprof_10_000000.pprof"));
	ck_assert(exists(out, "libddprof_10_000001.pprof"));
	snprintf(p, sizeof(p), "%s/libddprof_10_000000.pprof", out);
	struct stat st;
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_uint_eq(st.st_uid, 0);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	const char *stay[] = {".libddprof_10_000002.pprof.tmp", "notes.txt",
			      "libddprof_11_000000.pprof",	"libddprof_12_000000.pprof",
			      "libddprof_13_000000.pprof",	"libddprof_14_000000.pprof",
			      "libddprof_15_000000.pprof"};
	for (size_t i = 0; i < sizeof(stay) / sizeof(stay[0]); i++)
		ck_assert_msg(exists(user, stay[i]), "%s was moved", stay[i]);
	for (int i = 11; i <= 15; i++) {
		snprintf(q, sizeof(q), "libddprof_%d_000000.pprof", i);
		ck_assert_msg(i == 13 || !exists(out, q), "%s moved", q);
	}
	/* The one already there is the directory's own, unchanged. */
	snprintf(p, sizeof(p), "%s/libddprof_13_000000.pprof", out);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_int_eq(st.st_size, strlen("already there"));
	struct file_spool_stats s;
	file_spool_get_stats(&s);
	ck_assert_uint_ge(s.refused, 4);

	/* A spool that is not root's (or is writable by others) is not swept at all. */
	ck_assert_int_eq(chmod(spool, 0777), 0);
	put(user, "libddprof_16_000000.pprof", "x");
	snprintf(p, sizeof(p), "%s/libddprof_16_000000.pprof", user);
	ck_assert_int_eq(chown(p, NOBODY, NOBODY), 0);
	ck_assert_int_eq(file_spool_sweep(-1, out), 0);
	ck_assert_int_eq(chmod(spool, 0711), 0);
	/* Nor is a user's directory owned by another than its name says. */
	ck_assert_int_eq(chown(user, 1, 1), 0);
	ck_assert_int_eq(file_spool_sweep(-1, out), 0);
	ck_assert_int_eq(chown(user, NOBODY, NOBODY), 0);
	ck_assert_int_eq(file_spool_sweep(-1, out), 1);
	cleanup();
}
END_TEST

/* A process that is not root sweeps nothing. */
START_TEST(test_only_root_sweeps)
{
	if (geteuid() != 0)
		return;
	make_base();
	pid_t pid = fork();
	if (pid == 0) {
		if (setuid(NOBODY) != 0)
			_exit(1);
		_exit(file_spool_sweep(-1, base) == 0 ? 0 : 2);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	cleanup();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("file_spool");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_the_kept_directory_outlives_its_path_and_never_a_reused_number);
	tcase_add_test(tc, test_a_drop_makes_the_users_spool_before_it);
	tcase_add_test(tc, test_the_sweep_moves_only_the_users_plain_completed_profiles);
	tcase_add_test(tc, test_only_root_sweeps);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
