/*
 * export_file.c - the file exporter: one gzip pprof per upload per process.
 *
 * Files are named libddprof_<pid>_<seq>.pprof, created 0600 with O_EXCL|O_NOFOLLOW
 * under a temporary name and renamed into place, so a reader never sees half a
 * profile and a planted symlink is never followed.
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

#define PROFILE_FILE_MODE 0600
#define PROFILE_DIR_MODE 0700

struct file_exporter {
	struct exporter base;
	char dir[PATH_MAX];
};

static int file_send(struct exporter *e, const struct export_item *item)
{
	struct file_exporter *fe = (struct file_exporter *)e;
	char tmp[PATH_MAX], final[PATH_MAX];
	int n1 = snprintf(final, sizeof(final), "%s/libddprof_%d_%06llu.pprof", fe->dir, item->pid,
			  (unsigned long long)item->seq);
	int n2 = snprintf(tmp, sizeof(tmp), "%s/.libddprof_%d_%06llu.pprof.tmp", fe->dir, item->pid,
			  (unsigned long long)item->seq);
	if (n1 >= (int)sizeof(final) || n2 >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	/* The directory may have been removed since start-up. */
	fs_make_dirs(fe->dir, PROFILE_DIR_MODE);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, PROFILE_FILE_MODE);
	if (fd < 0 && errno == EEXIST) {
		/* A leftover of a crashed process with our pid: ours to replace. */
		unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			  PROFILE_FILE_MODE);
	}
	if (fd < 0)
		return -errno;
	int rc = fs_write_all(fd, item->pprof_gz, item->len);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, final) != 0)
		rc = -errno;
	if (rc != 0)
		unlink(tmp);
	else
		log_debug("wrote %s (%zu bytes)", final, item->len);
	return rc;
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
	fe->base.destroy = file_destroy;
	return &fe->base;
}
