/*
 * fs.c - mkdir -p and write-all (see fs.h).
 *
 * Context: normal context only (never a signal handler).
 */
#include "common/fs.h"

#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/str_join.h"
#include "common/sys_io.h"

int fs_make_dirs(const char *dir, mode_t mode)
{
	char path[PATH_MAX];
	if (!str_join(path, sizeof(path), &dir, 1))
		return -ENAMETOOLONG;
	if (mkdir(path, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -errno;
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(path, mode) != 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, mode) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int fs_write_all(int fd, const uint8_t *data, size_t len)
{
	while (len > 0) {
		ssize_t n = sys_write(fd, data, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

int fs_read_all(int fd, uint8_t *buf, size_t len, off_t off)
{
	while (len > 0) {
		ssize_t n = sys_pread(fd, buf, len, off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		buf += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}
