/*
 * test_curl_api.c - unit tests of uploader/curl_api.c: libcurl is not loaded until
 * asked for, then every function of the table is resolved, once.
 */
#include "uploader/curl_api.h"

#include <check.h>
#include <dlfcn.h>

#include "test/unit/check_run.h"

START_TEST(test_libcurl_loads_on_first_use_only)
{
	ck_assert_msg(!curl_api_loaded(), "libcurl loaded before anyone asked");
	ck_assert_msg(dlopen("libcurl.so.4", RTLD_NOW | RTLD_NOLOAD) == NULL,
		      "libcurl is mapped although nothing called curl_api_get");
	const struct curl_api *api = curl_api_get();
	ck_assert_ptr_nonnull(api);
	ck_assert(curl_api_loaded());
	const void *const *fns = (const void *const *)api;
	for (size_t i = 0; i < sizeof(*api) / sizeof(void *); i++)
		ck_assert_msg(fns[i] != NULL, "function %zu of the table is NULL", i);
	ck_assert_ptr_eq(curl_api_get(), api);
	curl_version_info_data *v = api->version_info(CURLVERSION_NOW);
	ck_assert_uint_ge(v->version_num, 0x074200); /* curl_multi_poll: 7.66 */
}
END_TEST

static Suite *curl_api_suite(void)
{
	Suite *s = suite_create("curl_api");
	TCase *tc = tcase_create("curl_api");
	tcase_add_test(tc, test_libcurl_loads_on_first_use_only);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(curl_api_suite());
}
