/*
 * test_multipart.c - unit tests of uploader/multipart.c: the exact bytes of a
 * multipart/form-data body (RFC 7578), its Content-Type, and the random boundaries.
 */
#include "uploader/multipart.h"

#include <check.h>
#include <string.h>

#include "test/unit/check_run.h"

START_TEST(test_body_bytes_are_exact)
{
	struct pb_buf out;
	struct multipart mp;
	static const uint8_t bin[] = {0x1f, 0x8b, 0x00, '\r', '\n', 0xff};
	pb_init(&out);
	pb_raw(&out, "stale", 5); /* begin clears it */
	multipart_begin(&mp, &out, "BOUND");
	multipart_add(&mp, "event", "event.json", "application/json", "{}", 2);
	multipart_add(&mp, "profile.pprof", "profile.pprof", "application/octet-stream", bin,
		      sizeof(bin));
	multipart_add(&mp, "plain", NULL, NULL, "v", 1);
	ck_assert_int_eq(multipart_end(&mp), 0);
	static const char expected_head[] =
	    "--BOUND\r\n"
	    "Content-Disposition: form-data; name=\"event\"; filename=\"event.json\"\r\n"
	    "Content-Type: application/json\r\n"
	    "\r\n"
	    "{}\r\n"
	    "--BOUND\r\n"
	    "Content-Disposition: form-data; name=\"profile.pprof\"; "
	    "filename=\"profile.pprof\"\r\n"
	    "Content-Type: application/octet-stream\r\n"
	    "\r\n";
	static const char expected_tail[] = "\r\n"
					    "--BOUND\r\n"
					    "Content-Disposition: form-data; name=\"plain\"\r\n"
					    "\r\n"
					    "v\r\n"
					    "--BOUND--\r\n";
	size_t head = strlen(expected_head), tail = strlen(expected_tail);
	ck_assert_uint_eq(out.len, head + sizeof(bin) + tail);
	ck_assert_msg(memcmp(out.data, expected_head, head) == 0, "head differs: %.*s", (int)head,
		      out.data);
	ck_assert(memcmp(out.data + head, bin, sizeof(bin)) == 0);
	ck_assert_msg(memcmp(out.data + head + sizeof(bin), expected_tail, tail) == 0,
		      "tail differs: %.*s", (int)tail, out.data + head + sizeof(bin));
	char ctype[MULTIPART_CONTENT_TYPE_MAX];
	multipart_content_type(&mp, ctype);
	ck_assert_str_eq(ctype, "multipart/form-data; boundary=BOUND");
	pb_free(&out);
}
END_TEST

START_TEST(test_random_boundaries_are_valid_and_differ)
{
	char a[MULTIPART_BOUNDARY_MAX], b[MULTIPART_BOUNDARY_MAX];
	multipart_random_boundary(a);
	multipart_random_boundary(b);
	ck_assert_str_ne(a, b);
	ck_assert_uint_eq(strlen(a), strlen("libddprof-") + 32);
	ck_assert(strncmp(a, "libddprof-", 10) == 0);
	ck_assert_uint_eq(strspn(a + 10, "0123456789abcdef"), 32);
}
END_TEST

static Suite *multipart_suite(void)
{
	Suite *s = suite_create("multipart");
	TCase *tc = tcase_create("multipart");
	tcase_add_test(tc, test_body_bytes_are_exact);
	tcase_add_test(tc, test_random_boundaries_are_valid_and_differ);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(multipart_suite());
}
