/*
 * pb.h - a minimal protocol-buffers wire-format writer.
 *
 * Owns: a growable byte buffer and the encodings pprof needs (varint, length-delimited,
 * packed repeated varints). Nested messages are built in a scratch pb_buf and appended
 * with pb_bytes. Written by hand rather than pulling protobuf-c: the encoder is ~100
 * lines, and an injected library should not drag a C++-adjacent runtime into every host.
 * Context: uploader thread and tests only (allocates with malloc).
 * Errors are sticky: after an allocation failure every call is a no-op and pb->failed
 * is set, so callers check once at the end.
 */
#ifndef DDPROF_COMMON_PB_H
#define DDPROF_COMMON_PB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pb_buf {
	uint8_t *data; /* owned; free with pb_free */
	size_t len;
	size_t cap;
	bool failed;
};

void pb_init(struct pb_buf *pb);
void pb_free(struct pb_buf *pb);
/* Empties the buffer but keeps its memory for reuse. */
void pb_clear(struct pb_buf *pb);

void pb_raw(struct pb_buf *pb, const void *data, size_t len);
void pb_varint_raw(struct pb_buf *pb, uint64_t v);
/* Field with wire type 0. Zero values are written too (callers skip defaults). */
void pb_varint(struct pb_buf *pb, uint32_t field, uint64_t v);
/* Field with wire type 2. */
void pb_bytes(struct pb_buf *pb, uint32_t field, const void *data, size_t len);
void pb_string(struct pb_buf *pb, uint32_t field, const char *s);
/* Packed repeated varint field (wire type 2); nothing written when n == 0. */
void pb_packed_u64(struct pb_buf *pb, uint32_t field, const uint64_t *v, size_t n);
void pb_packed_i64(struct pb_buf *pb, uint32_t field, const int64_t *v, size_t n);

#endif
