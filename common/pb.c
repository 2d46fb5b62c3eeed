/*
 * pb.c - protocol-buffers wire-format writer (see pb.h).
 * Context: uploader thread and tests; never a signal handler.
 */
#include "pb.h"
#include "common/big_alloc.h"

#include <stdlib.h>
#include <string.h>

#define PB_WIRE_VARINT 0
#define PB_WIRE_LEN 2
#define PB_MIN_CAP 256	 /* first allocation; doubles from there */
#define PB_VARINT_MAX 10 /* bytes of a 64-bit varint */

void pb_init(struct pb_buf *pb)
{
	memset(pb, 0, sizeof(*pb));
}

void pb_free(struct pb_buf *pb)
{
	big_free(pb->data);
	pb_init(pb);
}

void pb_clear(struct pb_buf *pb)
{
	pb->len = 0;
	pb->failed = false;
}

static bool pb_reserve(struct pb_buf *pb, size_t extra)
{
	if (pb->failed)
		return false;
	if (pb->len + extra <= pb->cap)
		return true;
	size_t cap = pb->cap ? pb->cap : PB_MIN_CAP;
	while (cap < pb->len + extra)
		cap *= 2;
	uint8_t *d = big_realloc(pb->data, cap);
	if (!d) {
		pb->failed = true;
		return false;
	}
	pb->data = d;
	pb->cap = cap;
	return true;
}

void pb_raw(struct pb_buf *pb, const void *data, size_t len)
{
	if (len == 0 || !pb_reserve(pb, len))
		return;
	memcpy(pb->data + pb->len, data, len);
	pb->len += len;
}

void pb_varint_raw(struct pb_buf *pb, uint64_t v)
{
	if (!pb_reserve(pb, PB_VARINT_MAX))
		return;
	uint8_t *p = pb->data + pb->len;
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	pb->len = (size_t)(p - pb->data);
}

static void pb_tag(struct pb_buf *pb, uint32_t field, unsigned wire)
{
	pb_varint_raw(pb, ((uint64_t)field << 3) | wire);
}

void pb_varint(struct pb_buf *pb, uint32_t field, uint64_t v)
{
	pb_tag(pb, field, PB_WIRE_VARINT);
	pb_varint_raw(pb, v);
}

void pb_bytes(struct pb_buf *pb, uint32_t field, const void *data, size_t len)
{
	pb_tag(pb, field, PB_WIRE_LEN);
	pb_varint_raw(pb, len);
	pb_raw(pb, data, len);
}

void pb_string(struct pb_buf *pb, uint32_t field, const char *s)
{
	pb_bytes(pb, field, s, strlen(s));
}

static size_t varint_size(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

void pb_packed_u64(struct pb_buf *pb, uint32_t field, const uint64_t *v, size_t n)
{
	if (n == 0)
		return;
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += varint_size(v[i]);
	pb_tag(pb, field, PB_WIRE_LEN);
	pb_varint_raw(pb, len);
	for (size_t i = 0; i < n; i++)
		pb_varint_raw(pb, v[i]);
}

void pb_packed_i64(struct pb_buf *pb, uint32_t field, const int64_t *v, size_t n)
{
	/* int64 fields encode negative values as their two's complement, 10 bytes. */
	pb_packed_u64(pb, field, (const uint64_t *)v, n);
}
