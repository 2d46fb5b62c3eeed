/*
 * gzip_store.h - a gzip stream whose deflate data are stored blocks (no compression).
 *
 * Why: a short process's only profile is a few kilobytes; loading zlib for it (a
 * dlopen: about 0.15 ms on these machines) and compressing it cost more of the process's
 * exit than the bytes saved are worth. Every gzip reader takes stored blocks (RFC 1951
 * 3.2.4). What: the header, stored blocks of at most 65535 bytes, the CRC-32 and the
 * length (RFC 1952). Context: normal context, any thread; no allocation but the
 * output buffer's.
 */
#ifndef DDPROF_COMMON_GZIP_STORE_H
#define DDPROF_COMMON_GZIP_STORE_H

#include <stddef.h>
#include <stdint.h>

/* The gzip stream's size for len bytes of input. */
size_t gzip_store_size(size_t len);
/* Writes the stream for in[0..len) to out (gzip_store_size(len) bytes). */
void gzip_store(const uint8_t *in, size_t len, uint8_t *out);
/* CRC-32 (the gzip and zlib one) of in[0..len), continuing from crc (0 to start). */
uint32_t gzip_crc32(uint32_t crc, const uint8_t *in, size_t len);

#endif
