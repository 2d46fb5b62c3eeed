/*
 * test_export_pyroscope.c - unit tests of uploader/export_pyroscope.c: URL encoding,
 * series names with labels, the ingest URL, Basic auth, and the prepared request.
 */
#include "uploader/export_pyroscope.h"

#include <check.h>
#include <errno.h>
#include <string.h>

#include "test/unit/check_run.h"
#include "test/unit/request_headers.h"

#define SEC 1000000000ULL

START_TEST(test_url_encoding_keeps_only_unreserved_characters)
{
	char out[128];
	ck_assert_int_eq(export_pyroscope_url_encode(out, sizeof(out), "aZ09-._~"), 0);
	ck_assert_str_eq(out, "aZ09-._~");
	ck_assert_int_eq(
	    export_pyroscope_url_encode(out, sizeof(out), "app{k=v,x=y z}/&?%+\xc3\xa9"), 0);
	ck_assert_str_eq(out, "app%7Bk%3Dv%2Cx%3Dy%20z%7D%2F%26%3F%25%2B%C3%A9");
	ck_assert_int_eq(export_pyroscope_url_encode(out, 5, "a{b"), -ENOSPC);
	ck_assert_int_eq(export_pyroscope_url_encode(out, 6, "ab{"), 0);
	ck_assert_str_eq(out, "ab%7B");
}
END_TEST

START_TEST(test_series_name_with_labels)
{
	char out[256];
	ck_assert_int_eq(export_pyroscope_series_name(out, sizeof(out), "my.app", NULL, NULL), 0);
	ck_assert_str_eq(out, "my.app");
	ck_assert_int_eq(export_pyroscope_series_name(out, sizeof(out), "my.app", "", ""), 0);
	ck_assert_str_eq(out, "my.app");
	/* PYROSCOPE_TAGS first; DD_TAGS adds keys not taken yet. */
	ck_assert_int_eq(
	    export_pyroscope_series_name(out, sizeof(out), "app", "region:eu", "team:x,region:us"),
	    0);
	ck_assert_str_eq(out, "app{region=eu,team=x}");
	/* The name syntax cannot be broken by values, keys or the application name. */
	ck_assert_int_eq(export_pyroscope_series_name(out, sizeof(out), "a{p}p", "k-1:v{}=w", NULL),
			 0);
	ck_assert_str_eq(out, "a_p_p{k_1=v___w}");
	/* Values may contain ':' (only the first separates key and value). */
	ck_assert_int_eq(export_pyroscope_series_name(out, sizeof(out), "a", "url:http://x", NULL),
			 0);
	ck_assert_str_eq(out, "a{url=http://x}");
	ck_assert_int_eq(export_pyroscope_series_name(out, 8, "app", "k:v", NULL), -ENOSPC);
}
END_TEST

START_TEST(test_ingest_url_is_exact)
{
	char url[512];
	ck_assert_int_eq(export_pyroscope_ingest_url(url, sizeof(url), "http://pyro:4040",
						     "app{k=v}", 1795341600ULL * SEC + 999999999,
						     1795341660ULL * SEC + 5),
			 0);
	ck_assert_str_eq(url, "http://pyro:4040/ingest?name=app%7Bk%3Dv%7D&from=1795341600"
			      "&until=1795341660&format=pprof&spyName=libddprof");
	ck_assert_int_eq(export_pyroscope_ingest_url(url, 20, "http://pyro:4040", "a", 0, 1),
			 -ENOSPC);
}
END_TEST

START_TEST(test_basic_auth_header_is_base64_with_padding)
{
	char h[128];
	ck_assert_int_eq(export_pyroscope_basic_auth_header(h, sizeof(h), "user", "pass"), 0);
	ck_assert_str_eq(h, "Authorization: Basic dXNlcjpwYXNz");
	ck_assert_int_eq(export_pyroscope_basic_auth_header(h, sizeof(h), "a", "b"), 0);
	ck_assert_str_eq(h, "Authorization: Basic YTpi");
	ck_assert_int_eq(export_pyroscope_basic_auth_header(h, sizeof(h), "ab", "c"), 0);
	ck_assert_str_eq(h, "Authorization: Basic YWI6Yw==");
	ck_assert_int_eq(export_pyroscope_basic_auth_header(h, sizeof(h), "abc", "d"), 0);
	ck_assert_str_eq(h, "Authorization: Basic YWJjOmQ=");
	ck_assert_int_eq(export_pyroscope_basic_auth_header(h, 24, "user", "pass"), -ENOSPC);
}
END_TEST

START_TEST(test_prepared_request_has_auth_tenant_and_profile_part)
{
	struct config cfg;
	config_defaults(&cfg);
	strcpy(cfg.pyroscope_url, "https://pyro.example");
	strcpy(cfg.service, "svc");
	strcpy(cfg.pyroscope_tags, "zone:a");
	strcpy(cfg.pyroscope_token, "tok");
	strcpy(cfg.pyroscope_tenant, "t1");
	static const uint8_t gz[] = {0x1f, 0x8b, 9};
	struct export_item item = {gz, sizeof(gz), 100 * SEC, 102 * SEC, 1, 0, "id"};
	struct pb_buf body;
	struct http_request req;
	pb_init(&body);
	struct exporter *e = export_pyroscope_new(&cfg);
	ck_assert_ptr_nonnull(e);
	ck_assert_int_eq(e->prepare(e, &item, &body, &req), 0);
	ck_assert_str_eq(req.url, "https://pyro.example/ingest?name=svc%7Bzone%3Da%7D&from=100"
				  "&until=102&format=pprof&spyName=libddprof");
	ck_assert_str_eq(find_header(&req, "Authorization:"), "Authorization: Bearer tok");
	ck_assert_str_eq(find_header(&req, "X-Scope-OrgID:"), "X-Scope-OrgID: t1");
	ck_assert(memmem(body.data, body.len,
			 "name=\"profile\"; filename=\"profile.pprof\"\r\n"
			 "Content-Type: application/octet-stream\r\n\r\n\x1f\x8b\x09\r\n",
			 82) != NULL);
	ck_assert(memmem(body.data, body.len, "name=\"sample_type_config\"", 25) != NULL);
	ck_assert_msg(!strstr(e->label, "tok"), "label %s", e->label);
	e->destroy(e);
	/* Basic auth wins when both are set, as in the Pyroscope SDKs. */
	strcpy(cfg.pyroscope_user, "user");
	strcpy(cfg.pyroscope_password, "pass");
	e = export_pyroscope_new(&cfg);
	ck_assert_int_eq(e->prepare(e, &item, &body, &req), 0);
	ck_assert_str_eq(find_header(&req, "Authorization:"), "Authorization: Basic dXNlcjpwYXNz");
	e->destroy(e);
	pb_free(&body);
}
END_TEST

static Suite *export_pyroscope_suite(void)
{
	Suite *s = suite_create("export_pyroscope");
	TCase *tc = tcase_create("export_pyroscope");
	tcase_add_test(tc, test_url_encoding_keeps_only_unreserved_characters);
	tcase_add_test(tc, test_series_name_with_labels);
	tcase_add_test(tc, test_ingest_url_is_exact);
	tcase_add_test(tc, test_basic_auth_header_is_base64_with_padding);
	tcase_add_test(tc, test_prepared_request_has_auth_tenant_and_profile_part);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(export_pyroscope_suite());
}
