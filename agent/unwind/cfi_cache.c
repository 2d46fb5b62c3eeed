/*
 * cfi_cache.c - unwind tables on disk: the directory (see cfi_cache.h; the file format
 * and its checks are cfi_cache_file.c).
 *
 * Every access goes through a descriptor of the directory opened with O_NOFOLLOW and
 * checked with fstat (ours, writable by nobody else): files are opened, created,
 * renamed and removed relative to it, never by a path that a symbolic link could send
 * elsewhere. The descriptor is opened per call and closed before it returns: the
 * descriptor table is the application's (a daemon that closes every descriptor, or a
 * dup2 onto ours, would leave a kept number naming another file).
 * Context: normal context only (uploader thread, module thread, tests); never a signal
 * handler.
 */
#include "agent/unwind/cfi_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h> /* renameat */
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/unwind/cfi_cache_file.h"
#include "common/fs.h"
#include "common/identity.h"
#include "common/log.h"
#include "common/str_join.h"

/* Files no process loaded for this long are removed (see evict_old_once), and temporary
 * files a crashed process left after a day. */
#define EVICT_AGE_S (30 * 24 * 3600)
#define TMP_AGE_S (24 * 3600)
/* ".tmp-" + a pid + "-" + 16 hex digits + ".cfi", with room to spare. */
#define NAME_MAX_LEN 64

/* "" = off. The caller's string (the configuration's, which lives as long as the
 * process): no copy, and no page of ours touched at start-up for it. */
static const char *cache_dir = "";
/* Relaxed flags throughout: each only decides whether one more attempt or one more log
 * line happens, and guards no data. */
static atomic_bool dir_refused;	   /* not ours, a link, writable by others: not used again */
static atomic_bool store_off;	   /* the directory could not be made: no store again */
static atomic_bool evict_done;	   /* once per process */
static atomic_bool refusal_logged; /* one warning per process, whatever was refused */
static atomic_bool store_failure_logged;
static _Atomic uint64_t st_hits, st_misses, st_refused, st_stored, st_store_failures;

void cfi_cache_set_dir(const char *dir)
{
	bool replaced = cache_dir[0] != '\0';
	cache_dir = dir ? dir : "";
	/* A new directory gets its own chances (tests set several). Not at start-up: no
	 * page of ours is written for it there. */
	if (replaced) {
		atomic_store_explicit(&dir_refused, false, memory_order_relaxed);
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

/* Counts a refused file or directory; the first refusal of the process is a warning,
 * the others debug lines (a directory full of bad files costs one line, not one each). */
static void refuse(const char *name, const char *why)
{
	count(&st_refused);
	/* A process that dropped its privileges since start cannot use the start user's
	 * cache: counted, not printed (common/identity.h). */
	bool first = !identity_changed() &&
		     !atomic_exchange_explicit(&refusal_logged, true, memory_order_relaxed);
	log_msg(first ? LOG_LEVEL_WARN : LOG_LEVEL_DEBUG,
		"unwind cache: %s%s%s refused (%s); unwind tables are built instead%s", cache_dir,
		name[0] ? "/" : "", name, why,
		first ? " (later refusals are counted, not logged)" : "");
}

/* <16 hex digits of the key's hash>.cfi, or with prefix ".tmp-<pid>-" for a temporary
 * file: a name in the cache directory. */
static void file_name(const struct cfi_cache_key *k, bool tmp, char out[NAME_MAX_LEN])
{
	uint64_t h = cfi_cache_file_key_hash(k);
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
	const char *parts[] = {tmp ? ".tmp-" : "", tmp ? pid + n : "", tmp ? "-" : "", hex, ".cfi"};
	str_join(out, NAME_MAX_LEN, parts, sizeof(parts) / sizeof(parts[0]));
}

/*
 * The cache directory, opened without following a symbolic link in its last component
 * and checked on what was opened: a directory of this euid that nobody else may write.
 * A descriptor the caller closes, or a negative errno; *why is set (the directory is
 * refused) unless it is merely missing or a system call failed.
 */
static int dir_open(const char **why)
{
	*why = NULL;
	int fd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		struct stat st;
		/* A link to a directory gives ENOTDIR (O_DIRECTORY is checked first): tell
		 * which it was, for the warning. */
		if (e == ELOOP ||
		    (e == ENOTDIR && lstat(cache_dir, &st) == 0 && S_ISLNK(st.st_mode))) {
			*why = "a symbolic link";
			e = ELOOP;
		} else if (e == ENOTDIR) {
			*why = "not a directory";
		} else if (e == EACCES) {
			*why = "not accessible to this user";
		}
		return -e;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	if (st.st_uid != geteuid())
		*why = "owned by another user";
	else if (st.st_mode & (S_IWGRP | S_IWOTH))
		*why = "writable by group or others";
	if (*why) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* The directory is refused: counted and logged once, and not tried again. */
static void refuse_dir(const char *why)
{
	atomic_store_explicit(&dir_refused, true, memory_order_relaxed);
	refuse("", why);
}

static bool cache_off(void)
{
	return !cache_dir[0] || atomic_load_explicit(&dir_refused, memory_order_relaxed);
}

int cfi_cache_load(const char *path, struct cfi_table *out)
{
	memset(out, 0, sizeof(*out));
	struct cfi_cache_key k;
	char name[NAME_MAX_LEN];
	if (cache_off() || !cfi_cache_file_key(path, &k))
		return -ENOENT;
	file_name(&k, false, name);
	const char *why;
	int dfd = dir_open(&why);
	if (dfd < 0) {
		if (why) {
			refuse_dir(why);
			return dfd;
		}
		count(&st_misses);
		return -ENOENT;
	}
	/* O_NONBLOCK: a FIFO put in place of a file must not block the open. */
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	int rc = fd < 0 ? -errno : 0;
	close(dfd);
	if (rc == -ELOOP) {
		refuse(name, "a symbolic link");
		return rc;
	}
	if (rc < 0) {
		count(&st_misses);
		return -ENOENT;
	}
	rc = cfi_cache_file_read(fd, &k, out, &why);
	close(fd);
	if (rc == -ESTALE) {
		/* What an upgrade leaves: the store that follows the build replaces it. */
		count(&st_refused);
		log_debug("unwind cache: %s/%s is another format version; built and replaced",
			  cache_dir, name);
		return rc;
	}
	if (rc < 0) {
		refuse(name, why);
		return rc;
	}
	count(&st_hits);
	return 0;
}

/*
 * Once per process, at its first store: removes the cache files nobody loaded for
 * EVICT_AGE_S (atime: a load reads the file, and even under relatime the kernel
 * updates it once a day) and stale temporary files. The directory then holds what the
 * host used lately, not every library version it ever had. Only this user's regular
 * files with our names are looked at (fstatat without following links).
 */
static void evict_old_once(int dfd)
{
	if (atomic_exchange_explicit(&evict_done, true, memory_order_relaxed))
		return;
	/* A descriptor of its own for readdir (closedir closes it): the same directory. */
	int lfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
	if (!d) {
		if (lfd >= 0)
			close(lfd);
		return;
	}
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

/* Writes the file under a temporary name, then renames it over the final one (which
 * replaces a link or a refused file there, never follows it). */
static int write_file(int dfd, const char *tmp, const char *name, const struct cfi_table *t,
		      const struct cfi_cache_key *k)
{
	unlinkat(dfd, tmp, 0); /* left by a crashed process that had our pid */
	int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	int rc = cfi_cache_file_write(fd, k, t);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && renameat(dfd, tmp, dfd, name) != 0)
		rc = -errno;
	if (rc < 0)
		unlinkat(dfd, tmp, 0);
	return rc;
}

int cfi_cache_store(const char *path, const struct cfi_table *t)
{
	size_t bytes = cfi_table_bytes(t);
	/* Over the cap, a file would be refused by every process: not written. */
	if (cache_off() || bytes < CFI_CACHE_MIN_BYTES || bytes > CFI_CACHE_MAX_TABLE_BYTES ||
	    !t->page || t->npages == 0 || t->nrows == 0 ||
	    atomic_load_explicit(&store_off, memory_order_relaxed))
		return 0;
	struct cfi_cache_key k;
	char name[NAME_MAX_LEN], tmp[NAME_MAX_LEN];
	if (!cfi_cache_file_key(path, &k))
		return 0; /* gone, or not a file: nothing to key it by */
	file_name(&k, false, name);
	file_name(&k, true, tmp);
	const char *why = NULL;
	int rc = fs_make_dirs(cache_dir, 0700);
	int dfd = rc < 0 ? rc : dir_open(&why);
	if (dfd < 0) {
		/* Read-only, foreign or a link: each later table would fail the same way. */
		atomic_store_explicit(&store_off, true, memory_order_relaxed);
		if (why)
			refuse_dir(why);
		rc = dfd;
	} else {
		evict_old_once(dfd);
		rc = write_file(dfd, tmp, name, t, &k);
		close(dfd);
	}
	if (rc < 0) {
		count(&st_store_failures);
		if (!why &&
		    !atomic_exchange_explicit(&store_failure_logged, true, memory_order_relaxed))
			log_info("unwind cache: cannot keep tables in %s (%s); they are built in "
				 "each process",
				 cache_dir, strerror(-rc));
		return rc;
	}
	count(&st_stored);
	return 0;
}
