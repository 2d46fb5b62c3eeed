/*
 * file_spool.h - the output directory of a process that gives up root or changes its root
 * directory after start, and the spool that carries its profiles there.
 *
 * Why: a server started as root switches its workers to an unprivileged user (nginx,
 * apache's prefork, a root parent's setuid children); the worker can no longer create a
 * file in the root-owned output directory given at start. A process that calls chroot
 * no longer reaches the directory by its path.
 * How:
 * - Before such a change (preload/credentials.c, in the application's own set*id or
 *   chroot call), the output directory is opened (O_PATH) and kept: every later write
 *   goes through that descriptor, whatever the process's root (checked against the
 *   directory's device and inode before each use: a program that closes descriptors it
 *   does not know and reuses the number is never written through).
 * - Before root gives up its user for uid, it makes the spool <dir>/.libddprof-spool/
 *   (root's, mode 0711: others may pass, not list or create) and in it <uid>/ (owned by
 *   uid, mode 0700), and keeps that open too. A profile the process can no longer
 *   create in <dir> is written there, under its final name.
 * - Every process of libddprof still running as root with the same output directory (the
 *   server's master) moves the spooled profiles into <dir> when it writes its own, each
 *   period and at exit: regular files with one link, owned by the spool's user, opened
 *   without following links and checked after the move; made root's, 0600, like the
 *   others. When no such process is left, they stay in the spool.
 * Context: file_spool_before_* in the application's thread (normal context, its own
 * call); the rest on the uploader thread. The descriptors are published with release
 * stores and read with acquire loads.
 */
#ifndef DDPROF_UPLOADER_FILE_SPOOL_H
#define DDPROF_UPLOADER_FILE_SPOOL_H

#include <stdint.h>
#include <sys/types.h>

/* The spool's directory name in the output directory. */
#define FILE_SPOOL_DIR ".libddprof-spool"

/* Before the process changes its root directory: opens dir (absolute) and keeps it. */
void file_spool_before_chroot(const char *dir);

/* Before the effective user goes from root to uid: dir kept open, the spool for uid made
 * and kept open. Nothing when the process is not root or uid is root. */
void file_spool_before_drop(const char *dir, uid_t uid);

/* The output directory's descriptor when one was kept and still is that directory,
 * else -1 (then the path is used). */
int file_spool_dir_fd(void);

/* The spool's descriptor, or -1. */
int file_spool_fd(void);

/* Root only (else nothing): moves completed profiles from every user's spool under dir
 * (dir_fd when >= 0, else the path) into it. Returns the number moved. */
int file_spool_sweep(int dir_fd, const char *dir);

struct file_spool_stats {
	uint64_t spools_made;	 /* drops prepared */
	uint64_t spool_failures; /* drops whose spool could not be made */
	uint64_t moved;		 /* profiles moved into the directory */
	uint64_t refused;	 /* entries of a spool left alone: not a plain file of its user */
};
void file_spool_get_stats(struct file_spool_stats *out);

#endif
