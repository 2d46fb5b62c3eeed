/*
 * fs_util.h - the two file-system helpers the exporters and the unwind cache share.
 *
 * Owns: fs_make_dirs (mkdir -p) and fs_write_all (write until done).
 * Context: normal context (the constructor, the uploader thread); no allocation.
 */
#ifndef DDPROF_COMMON_FS_UTIL_H
#define DDPROF_COMMON_FS_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdir -p with mode for what it creates: the directory itself first, which is all it
 * takes when it exists (one system call); its parents only when they are missing.
 * 0 or a negative errno. */
int fs_make_dirs(const char *dir, mode_t mode);

/* Writes all len bytes (retrying short writes and EINTR). 0 or a negative errno. */
int fs_write_all(int fd, const uint8_t *data, size_t len);

#endif
