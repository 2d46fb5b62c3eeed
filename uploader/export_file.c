/*
 * export_file.c - the file exporter: one gzip pprof per upload per process.
 *
 * Files are named libddprof_<pid>_<seq>.pprof (libddprof_<pid>_<seq>_<k>.pprof when that
 * exists: an exec'd program's, a reused pid's), created 0600 with O_EXCL|O_NOFOLLOW
 * under a temporary name and renamed into place, so a reader never sees half a
 * profile and a planted symlink is never followed. A process that changes its root or
 * gives up root after start goes on writing there through file_spool.h.
 * Context: uploader thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"
#include "common/str_join.h"
#include "uploader/exporter.h"
#include "uploader/file_spool.h"

#define PROFILE_FILE_MODE 0600
#define PROFILE_DIR_MODE 0700
/* Names tried past an existing libddprof_<pid>_<seq>.pprof: _1, _2... */
#define PROFILE_NAME_TRIES 100

struct file_exporter {
	struct exporter base;
	char dir[PATH_MAX];
};

/* Writes the profile as name in the directory at (a descriptor; or AT_FDCWD with
 * prefix "dir/"): under a temporary name, renamed into place. 0 or a negative errno. */
static int write_profile(int at, const char *prefix, const struct export_item *item)
{
	char tmp[PATH_MAX], final[PATH_MAX];
	int n1 = snprintf(final, sizeof(final), "%slibddprof_%d_%06llu.pprof", prefix, item->pid,
			  (unsigned long long)item->seq);
	int n2 = snprintf(tmp, sizeof(tmp), "%s.libddprof_%d_%06llu.pprof.tmp", prefix, item->pid,
			  (unsigned long long)item->seq);
	if (n1 < 0 || n2 < 0 || n1 >= (int)sizeof(final) || n2 >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(at, tmp, flags, PROFILE_FILE_MODE);
	if (fd < 0 && errno == EEXIST) {
		/* A leftover of a crashed process with our pid: ours to replace. */
		unlinkat(at, tmp, 0);
		fd = openat(at, tmp, flags, PROFILE_FILE_MODE);
	}
	if (fd < 0)
		return -errno;
	int rc = fs_write_all(fd, item->pprof_gz, item->len);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	/* Never over an existing profile: the program this process execs has the same pid
	 * and numbers its profiles from 0 again (as does a later process given the pid). */
	for (unsigned k = 1; rc == 0; k++) {
		if (renameat2(at, tmp, at, final, RENAME_NOREPLACE) == 0)
			break;
		if (errno == EINVAL || errno == ENOSYS) { /* a file system without it */
			if (renameat(at, tmp, at, final) != 0)
				rc = -errno;
			break;
		}
		if (errno != EEXIST || k > PROFILE_NAME_TRIES) {
			rc = -errno;
			break;
		}
		n1 = snprintf(final, sizeof(final), "%slibddprof_%d_%06llu_%u.pprof", prefix,
			      item->pid, (unsigned long long)item->seq, k);
		if (n1 < 0 || n1 >= (int)sizeof(final))
			rc = -ENAMETOOLONG;
	}
	if (rc != 0)
		unlinkat(at, tmp, 0);
	else
		log_debug("wrote %s (%zu bytes)", final, item->len);
	return rc;
}

/* Through the directory kept open when the process changed its root or gave up root
 * (file_spool.h), else by path; a process that can no longer create files there writes
 * into its spool, which a process still running as root empties into the directory. */
static int file_send(struct exporter *e, const struct export_item *item)
{
	struct file_exporter *fe = (struct file_exporter *)e;
	char prefix[PATH_MAX];
	int dfd = file_spool_dir_fd();
	if (dfd < 0) {
		int n = snprintf(prefix, sizeof(prefix), "%s/", fe->dir);
		if (n < 0 || n >= (int)sizeof(prefix))
			return -ENAMETOOLONG;
		/* The directory may have been removed since start-up. */
		fs_make_dirs(fe->dir, PROFILE_DIR_MODE);
	}
	int rc = write_profile(dfd >= 0 ? dfd : AT_FDCWD, dfd >= 0 ? "" : prefix, item);
	int sfd;
	if ((rc == -EACCES || rc == -EPERM) && (sfd = file_spool_fd()) >= 0) {
		rc = write_profile(sfd, "", item);
		if (rc == 0)
			log_debug("profile %llu spooled for %s", (unsigned long long)item->seq,
				  fe->dir);
	}
	return rc;
}

/* Every upload cycle: a process running as root empties the spools of the processes
 * that gave root up into the directory. */
static void file_housekeep(struct exporter *e)
{
	struct file_exporter *fe = (struct file_exporter *)e;
	file_spool_sweep(file_spool_dir_fd(), fe->dir);
}

static void file_destroy(struct exporter *e)
{
	free(e);
}

struct exporter *export_file_new(const char *dir)
{
	struct file_exporter *fe = calloc(1, sizeof(*fe));
	if (!fe)
		return NULL;
	if (!str_join(fe->dir, sizeof(fe->dir), &dir, 1)) {
		free(fe);
		return NULL;
	}
	int rc = fs_make_dirs(dir, PROFILE_DIR_MODE);
	if (rc < 0) {
		log_warn("DD_PROFILING_OUTPUT_DIR=\"%s\" cannot be created (%s); profiles will "
			 "not be written there",
			 dir, strerror(-rc));
		free(fe);
		return NULL;
	}
	fe->base.name = "file";
	const char *label[] = {"file (", dir, ")"};
	str_join(fe->base.label, sizeof(fe->base.label), label, 3);
	ratelimit_init(&fe->base.warn, RATELIMIT_DEFAULT_INTERVAL_NS);
	fe->base.send = file_send;
	fe->base.housekeep = file_housekeep;
	fe->base.destroy = file_destroy;
	return &fe->base;
}
