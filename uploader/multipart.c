/*
 * multipart.c - multipart/form-data bodies (see multipart.h for why not curl_mime).
 *
 * Context: uploader thread and tests.
 */
#include "uploader/multipart.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define BOUNDARY_PREFIX "libddprof-"
#define BOUNDARY_RANDOM_BYTES 16 /* 128 bits, printed as 32 hex digits */
#define CRLF "\r\n"

static void put(struct pb_buf *pb, const char *s)
{
	pb_raw(pb, s, strlen(s));
}

void multipart_random_boundary(char out[MULTIPART_BOUNDARY_MAX])
{
	uint8_t r[BOUNDARY_RANDOM_BYTES];
	if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		/* No entropy yet (early boot): uniqueness, not secrecy, is what matters. */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t x =
		    (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)getpid();
		for (size_t i = 0; i < sizeof(r); i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL; /* LCG step */
			r[i] = (uint8_t)(x >> 56);
		}
	}
	size_t n = (size_t)snprintf(out, MULTIPART_BOUNDARY_MAX, "%s", BOUNDARY_PREFIX);
	for (size_t i = 0; i < sizeof(r); i++)
		n += (size_t)snprintf(out + n, MULTIPART_BOUNDARY_MAX - n, "%02x", r[i]);
}

void multipart_begin(struct multipart *mp, struct pb_buf *out, const char *boundary)
{
	mp->out = out;
	snprintf(mp->boundary, sizeof(mp->boundary), "%s", boundary);
	pb_clear(out);
}

void multipart_add(struct multipart *mp, const char *name, const char *filename,
		   const char *content_type, const void *data, size_t len)
{
	struct pb_buf *pb = mp->out;
	put(pb, "--");
	put(pb, mp->boundary);
	put(pb, CRLF "Content-Disposition: form-data; name=\"");
	put(pb, name);
	put(pb, "\"");
	if (filename) {
		put(pb, "; filename=\"");
		put(pb, filename);
		put(pb, "\"");
	}
	put(pb, CRLF);
	if (content_type) {
		put(pb, "Content-Type: ");
		put(pb, content_type);
		put(pb, CRLF);
	}
	put(pb, CRLF);
	pb_raw(pb, data, len);
	put(pb, CRLF);
}

int multipart_end(struct multipart *mp)
{
	put(mp->out, "--");
	put(mp->out, mp->boundary);
	put(mp->out, "--" CRLF);
	return mp->out->failed ? -ENOMEM : 0;
}

void multipart_content_type(const struct multipart *mp, char out[MULTIPART_CONTENT_TYPE_MAX])
{
	snprintf(out, MULTIPART_CONTENT_TYPE_MAX, "multipart/form-data; boundary=%s", mp->boundary);
}
