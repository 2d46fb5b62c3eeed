/*
 * test_gzip_store.c - unit tests of common/gzip_store.c: what it writes is a gzip stream
 * zlib reads back byte for byte, at the block boundaries too, and its CRC is zlib's.
 */
#include "common/gzip_store.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "test/unit/check_run.h"

/* Inflates a gzip stream with zlib; returns the length read back, or -1. */
static long inflate_gzip(const uint8_t *in, size_t len, uint8_t *out, size_t cap)
{
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
		return -1;
	zs.next_in = (Bytef *)in;
	zs.avail_in = (uInt)len;
	zs.next_out = out;
	zs.avail_out = (uInt)cap;
	int rc = inflate(&zs, Z_FINISH);
	long n = rc == Z_STREAM_END && zs.avail_in == 0 ? (long)zs.total_out : -1;
	inflateEnd(&zs);
	return n;
}

START_TEST(test_zlib_reads_back_every_size)
{
	static const size_t sizes[] = {0, 1, 100, 65534, 65535, 65536, 65537, 131070, 200003};
	uint8_t *in = malloc(200003);
	uint8_t *back = malloc(200003 + 16);
	ck_assert(in && back);
	uint32_t x = 12345;
	for (size_t i = 0; i < 200003; i++) {
		x = x * 1103515245u + 12345u;
		in[i] = (uint8_t)(x >> 16);
	}
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		size_t gz = gzip_store_size(n);
		uint8_t *out = malloc(gz + 1);
		ck_assert(out);
		out[gz] = 0xa5; /* a guard: nothing written past the size it announced */
		gzip_store(in, n, out);
		ck_assert_int_eq(out[gz], 0xa5);
		long got = inflate_gzip(out, gz, back, 200003 + 16);
		ck_assert_msg(got == (long)n, "size %zu: zlib read %ld bytes", n, got);
		ck_assert_msg(memcmp(back, in, n) == 0, "size %zu: bytes differ", n);
		free(out);
	}
	free(in);
	free(back);
}
END_TEST

START_TEST(test_crc_is_zlib_s)
{
	const char *s = "123456789";
	ck_assert_uint_eq(gzip_crc32(0, (const uint8_t *)s, 9), 0xcbf43926u);
	uint8_t buf[1000];
	for (int i = 0; i < 1000; i++)
		buf[i] = (uint8_t)(i * 7);
	uint32_t split = gzip_crc32(gzip_crc32(0, buf, 300), buf + 300, 700);
	ck_assert_uint_eq(split, (uint32_t)crc32(0, buf, 1000));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gzip_store");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_zlib_reads_back_every_size);
	tcase_add_test(tc, test_crc_is_zlib_s);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
