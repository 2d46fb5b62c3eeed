/*
 * gzip_store.c - gzip streams of stored blocks (see gzip_store.h).
 *
 * Context: normal context, any thread; the CRC table is built once, the first caller's
 * stores published by an acquire/release flag (two threads may both build it: the same
 * bytes).
 */
#include "common/gzip_store.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#define STORED_MAX 65535u

static uint32_t table[256];
static _Atomic bool table_ready;

static void table_build(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
		table[n] = c;
	}
	/* Release pairs with the acquire in gzip_crc32: the table's stores come first. */
	atomic_store_explicit(&table_ready, true, memory_order_release);
}

uint32_t gzip_crc32(uint32_t crc, const uint8_t *in, size_t len)
{
	/* Acquire pairs with table_build's release. */
	if (!atomic_load_explicit(&table_ready, memory_order_acquire))
		table_build();
	crc = ~crc;
	for (size_t i = 0; i < len; i++)
		crc = table[(crc ^ in[i]) & 0xff] ^ (crc >> 8);
	return ~crc;
}

size_t gzip_store_size(size_t len)
{
	size_t blocks = len == 0 ? 1 : (len + STORED_MAX - 1) / STORED_MAX;
	return 10 + blocks * 5 + len + 8;
}

static void le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

void gzip_store(const uint8_t *in, size_t len, uint8_t *out)
{
	/* Magic, deflate, no flags, no time, no extra flags, OS unknown. */
	static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255};
	memcpy(out, header, sizeof(header));
	uint8_t *p = out + sizeof(header);
	size_t at = 0;
	do {
		size_t n = len - at < STORED_MAX ? len - at : STORED_MAX;
		bool last = at + n == len;
		*p++ = last ? 1 : 0; /* BFINAL, BTYPE 00: stored */
		p[0] = (uint8_t)n;
		p[1] = (uint8_t)(n >> 8);
		p[2] = (uint8_t)~n;
		p[3] = (uint8_t)(~n >> 8);
		p += 4;
		if (n)
			memcpy(p, in + at, n);
		p += n;
		at += n;
	} while (at < len);
	le32(p, gzip_crc32(0, in, len));
	le32(p + 4, (uint32_t)len);
}
