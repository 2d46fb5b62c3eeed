/*
 * fs.h - the two file-system helpers the exporters and the unwind cache share.
 *
 * Owns: fs_make_dirs (mkdir -p), fs_write_all and fs_read_all (until done).
 * Context: normal context (the constructor, the uploader thread); no allocation.
 */
#ifndef DDPROF_COMMON_FS_H
#define DDPROF_COMMON_FS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdir -p with mode for what it creates: the directory itself first, which is all it
 * takes when it exists (one system call); its parents only when they are missing.
 * 0 or a negative errno. */
int fs_make_dirs(const char *dir, mode_t mode);

/* Writes all len bytes (retrying short writes and EINTR). 0 or a negative errno. */
int fs_write_all(int fd, const uint8_t *data, size_t len);

/* Reads len bytes at offset off (retrying short reads and EINTR). 0, -EIO at the end
 * of the file, or a negative errno. */
int fs_read_all(int fd, uint8_t *buf, size_t len, off_t off);

#endif
