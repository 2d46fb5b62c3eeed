/*
 * z_api.h - zlib loaded at run time: the functions we call.
 *
 * Owns: the dlopen of libz.so.1 (closed again by z_api_unload between uploads, where
 * the fork guard allows it) and the function pointers resolved from it. zlib is not
 * linked: a profiled process maps it only once it serializes a profile (gzip) or
 * checks a .gnu_debuglink CRC, both on the uploader thread; a short process, or a fork
 * child that exits before its first upload, never does (start-up time, and five fewer
 * mappings for every fork to copy). A zlib the process already exports (its own, as
 * Node.js's, or libz it links) is used instead of loading libz beside it (z_api.c says
 * why). <zlib.h> is included for types only. When libz is missing, z_api_get returns
 * NULL and callers fail cleanly.
 * Context: uploader thread (and tests), one caller at a time; never a signal handler.
 */
#ifndef DDPROF_COMMON_Z_API_H
#define DDPROF_COMMON_Z_API_H

#include <stdbool.h>
#include <zlib.h>

#define Z_API_SONAME "libz.so.1"

struct z_api {
	int (*deflateInit2_)(z_streamp strm, int level, int method, int window_bits, int mem_level,
			     int strategy, const char *version, int stream_size);
	int (*deflate)(z_streamp strm, int flush);
	int (*deflateEnd)(z_streamp strm);
	uLong (*crc32)(uLong crc, const Bytef *buf, uInt len);
};

/* Loads zlib at the first call; NULL (warned once) when it cannot be. */
const struct z_api *z_api_get(void);

/* Whether zlib is loaded now (a z_api_get would not load it). */
bool z_api_loaded(void);

/* Unloads zlib (a fork copies every mapping of a loaded library); the next z_api_get
 * loads it again (a small library: cheap next to the compression that needs it).
 * Callers must not keep the table across it. */
void z_api_unload(void);

#endif
