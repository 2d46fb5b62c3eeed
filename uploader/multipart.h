/*
 * multipart.h - multipart/form-data bodies (RFC 7578), built in memory.
 *
 * Owns: the exact bytes of the bodies the HTTP exporters send (Datadog: event.json +
 * profile.pprof; Pyroscope: profile + sample_type_config).
 * Why not curl_mime: the body must be testable byte for byte without libcurl (unit
 * tests link no curl), its length is known before sending (Content-Length, no chunked
 * encoding), it needs no more dlsym'd functions, and a retry re-sends the same buffer
 * instead of rebuilding a MIME tree.
 * Boundary: 32 random hex digits (128 bits), "libddprof-" prefixed. The chance that it
 * occurs inside a gzip stream of n bytes is about n * 2^-128: never in practice, so
 * parts are not scanned for it.
 * Context: uploader thread and tests (allocates through pb_buf).
 */
#ifndef DDPROF_UPLOADER_MULTIPART_H
#define DDPROF_UPLOADER_MULTIPART_H

#include <stddef.h>

#include "common/pb.h"

/* "libddprof-" + 32 hex digits + NUL, rounded up. */
#define MULTIPART_BOUNDARY_MAX 48
/* "multipart/form-data; boundary=" + boundary. */
#define MULTIPART_CONTENT_TYPE_MAX (MULTIPART_BOUNDARY_MAX + 32)

struct multipart {
	struct pb_buf *out; /* not owned; cleared by multipart_begin */
	char boundary[MULTIPART_BOUNDARY_MAX];
};

/* Fills out with a fresh random boundary (getrandom; a clock-seeded mix if it fails). */
void multipart_random_boundary(char out[MULTIPART_BOUNDARY_MAX]);

/* Starts a body in out (cleared) with boundary (copied; at most 70 characters of
 * [A-Za-z0-9'()+_,-./:=?], as RFC 2046 allows). */
void multipart_begin(struct multipart *mp, struct pb_buf *out, const char *boundary);

/* Appends one part. filename and content_type may be NULL. name and filename must not
 * contain '"', CR or LF (ours are constants). */
void multipart_add(struct multipart *mp, const char *name, const char *filename,
		   const char *content_type, const void *data, size_t len);

/* Closes the body. 0, or -ENOMEM when the buffer could not grow. */
int multipart_end(struct multipart *mp);

/* The Content-Type header value for this body. */
void multipart_content_type(const struct multipart *mp, char out[MULTIPART_CONTENT_TYPE_MAX]);

#endif
