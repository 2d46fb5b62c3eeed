/*
 * file_spool.c - the kept output directory, the spool of a process that gave up root,
 * and the sweep that empties spools into the directory (see file_spool.h).
 *
 * Context: file_spool_before_* in an application thread (its set*id or chroot call,
 * normal context: a few system calls, no lock, no allocation); the rest on the uploader
 * thread. Two application threads preparing at once: the first claims the work, the
 * other returns (a drop happens once per process; glibc applies it to every thread).
 */
#include "uploader/file_spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"
#include "common/log.h"

#define SPOOL_ROOT_MODE 0711 /* others pass through to their own spool, list nothing */
#define SPOOL_USER_MODE 0700
#define OUTPUT_DIR_MODE 0700 /* as the file exporter makes it */
/* Profiles one sweep moves at most: the rest wait for the next. */
#define SWEEP_MAX 1000

/* A kept directory: its descriptor (-1: none) and identity. The descriptor is published
 * last, with release; readers load it with acquire, then read dev and ino. */
struct kept {
	_Atomic int fd;
	dev_t dev;
	ino_t ino;
};

static struct kept out_dir = {.fd = -1};
static struct kept spool = {.fd = -1};
static _Atomic bool claimed_dir, claimed_spool;

static _Atomic uint64_t st_made, st_failed, st_moved, st_refused;

static void count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static void keep(struct kept *k, int fd)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return;
	}
	k->dev = st.st_dev;
	k->ino = st.st_ino;
	/* Release pairs with kept_fd's acquire: dev and ino are written. */
	atomic_store_explicit(&k->fd, fd, memory_order_release);
}

/* The descriptor if it is still the directory kept: a program may close descriptors it
 * does not know (a daemon after fork) and open something else under the number. */
static int kept_fd(struct kept *k)
{
	/* Acquire pairs with keep's release. */
	int fd = atomic_load_explicit(&k->fd, memory_order_acquire);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_dev != k->dev || st.st_ino != k->ino) {
		/* Not ours any more: forgotten, never closed. */
		atomic_store_explicit(&k->fd, -1, memory_order_relaxed);
		return -1;
	}
	return fd;
}

static void hold_dir(const char *dir)
{
	if (!dir[0] || atomic_exchange_explicit(&claimed_dir, true, memory_order_relaxed))
		return;
	fs_make_dirs(dir, OUTPUT_DIR_MODE); /* the exporter may not have made it yet */
	int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0)
		keep(&out_dir, fd);
}

void file_spool_before_chroot(const char *dir)
{
	hold_dir(dir);
}

/* Opens (making it when missing) the directory name under at, which must then be owned
 * by owner and writable by no one else. A directory is made under a name of this
 * process's, given to owner (as root) with its mode (whatever the umask), and only then
 * renamed into place, never replacing one: another process making the same directory at
 * the same moment finds it complete or makes its own. Returns a descriptor (read-only)
 * or -1. */
static int own_dir(int at, const char *name, mode_t mode, uid_t owner)
{
	char tmp[64];
	snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
	if (mkdirat(at, tmp, mode) == 0) {
		int t = openat(at, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		bool ready = t >= 0 && (owner == 0 || fchown(t, owner, (gid_t)-1) == 0) &&
			     fchmod(t, mode) == 0;
		if (t >= 0)
			close(t);
		if (!ready || renameat2(at, tmp, at, name, RENAME_NOREPLACE) != 0)
			unlinkat(at, tmp, AT_REMOVEDIR);
	}
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_uid != owner || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		close(fd);
		return -1;
	}
	return fd;
}

void file_spool_before_drop(const char *dir, uid_t uid)
{
	if (!dir[0] || uid == 0 || uid == (uid_t)-1 || geteuid() != 0)
		return;
	hold_dir(dir);
	if (atomic_exchange_explicit(&claimed_spool, true, memory_order_relaxed))
		return;
	int dfd = kept_fd(&out_dir);
	int root = dfd >= 0 ? own_dir(dfd, FILE_SPOOL_DIR, SPOOL_ROOT_MODE, 0) : -1;
	char name[24];
	snprintf(name, sizeof(name), "%u", (unsigned)uid);
	int fd = root >= 0 ? own_dir(root, name, SPOOL_USER_MODE, uid) : -1;
	if (root >= 0)
		close(root);
	if (fd < 0) {
		count(&st_failed, 1);
		log_debug("no spool for user %u under %s: its profiles may not reach it",
			  (unsigned)uid, dir);
		return;
	}
	keep(&spool, fd);
	count(&st_made, 1);
}

int file_spool_dir_fd(void)
{
	return kept_fd(&out_dir);
}

int file_spool_fd(void)
{
	return kept_fd(&spool);
}

/* A completed profile's name: libddprof_<pid>_<seq>.pprof (export_file.c). */
static bool profile_name(const char *n)
{
	size_t len = strlen(n);
	return strncmp(n, "libddprof_", 10) == 0 && len > 16 &&
	       strcmp(n + len - 6, ".pprof") == 0 && !strchr(n, '/');
}

/* Moves the profiles of one user's spool (ud, owned by uid) into (dst, dst_prefix). */
static int sweep_user(int ud, uid_t uid, int dst, const char *dst_prefix, int budget)
{
	DIR *d = fdopendir(ud);
	if (!d) {
		close(ud);
		return 0;
	}
	int moved = 0;
	struct dirent *e;
	while (moved < budget && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue; /* ., .., and files being written */
		if (!profile_name(e->d_name)) {
			count(&st_refused, 1);
			continue;
		}
		/* O_NONBLOCK: a FIFO planted under the name must not block the open. */
		int fd =
		    openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		struct stat st, moved_st;
		if (fd < 0)
			continue;
		if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
		    st.st_uid != uid) {
			count(&st_refused, 1);
			close(fd);
			continue;
		}
		char target[PATH_MAX];
		int n = snprintf(target, sizeof(target), "%s%s", dst_prefix, e->d_name);
		if (n < 0 || (size_t)n >= sizeof(target) ||
		    renameat2(dirfd(d), e->d_name, dst, target, RENAME_NOREPLACE) != 0) {
			close(fd);
			continue;
		}
		/* What was moved must be what was checked: an entry swapped in between (its
		 * user owns the spool) is taken out of the directory again. */
		if (fstatat(dst, target, &moved_st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    moved_st.st_dev != st.st_dev || moved_st.st_ino != st.st_ino) {
			unlinkat(dst, target, 0);
			count(&st_refused, 1);
			close(fd);
			continue;
		}
		/* Root's, 0600, like every profile of the directory. */
		if (fchown(fd, geteuid(), getegid()) != 0 || fchmod(fd, 0600) != 0)
			log_debug("%s: ownership kept (%s)", target, strerror(errno));
		close(fd);
		moved++;
	}
	closedir(d);
	return moved;
}

int file_spool_sweep(int dir_fd, const char *dir)
{
	if (geteuid() != 0)
		return 0;
	char path[PATH_MAX], prefix[PATH_MAX];
	int at = dir_fd >= 0 ? dir_fd : AT_FDCWD;
	const char *p = FILE_SPOOL_DIR;
	prefix[0] = 0;
	if (dir_fd < 0) {
		int n1 = snprintf(path, sizeof(path), "%s/%s", dir, FILE_SPOOL_DIR);
		int n2 = snprintf(prefix, sizeof(prefix), "%s/", dir);
		if (n1 < 0 || (size_t)n1 >= sizeof(path) || n2 < 0 || (size_t)n2 >= sizeof(prefix))
			return 0;
		p = path;
	}
	int sp = openat(at, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sp < 0)
		return 0; /* no process of this directory gave up root */
	struct stat st;
	if (fstat(sp, &st) != 0 || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		close(sp); /* not the spool this module makes: left alone */
		return 0;
	}
	DIR *d = fdopendir(sp);
	if (!d) {
		close(sp);
		return 0;
	}
	int moved = 0;
	struct dirent *e;
	while (moved < SWEEP_MAX && (e = readdir(d))) {
		char *end;
		errno = 0;
		unsigned long uid = strtoul(e->d_name, &end, 10);
		if (e->d_name[0] < '0' || e->d_name[0] > '9' || *end || errno || uid == 0 ||
		    uid >= (uid_t)-1)
			continue;
		int ud =
		    openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (ud < 0)
			continue;
		if (fstat(ud, &st) != 0 || st.st_uid != (uid_t)uid ||
		    (st.st_mode & (S_IWGRP | S_IWOTH))) {
			count(&st_refused, 1);
			close(ud);
			continue;
		}
		moved += sweep_user(ud, (uid_t)uid, at, prefix, SWEEP_MAX - moved);
	}
	closedir(d);
	count(&st_moved, (uint64_t)moved);
	if (moved)
		log_debug("%d spooled profiles moved into %s", moved, dir);
	return moved;
}

void file_spool_get_stats(struct file_spool_stats *out)
{
	*out = (struct file_spool_stats){
	    .spools_made = atomic_load_explicit(&st_made, memory_order_relaxed),
	    .spool_failures = atomic_load_explicit(&st_failed, memory_order_relaxed),
	    .moved = atomic_load_explicit(&st_moved, memory_order_relaxed),
	    .refused = atomic_load_explicit(&st_refused, memory_order_relaxed),
	};
}
