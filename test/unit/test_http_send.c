/*
 * test_http_send.c - unit tests of the retry policy of uploader/http_send.c: which
 * answers are retried (http_send_classify, http_send_fail_kind) and the jittered exponential
 * backoff (http_send_backoff_ns); a fork child told libcurl may be held
 * (http_send_forbid_curl) fails https:// requests at once without loading it. The
 * sending itself is covered by the integration tests against scripts/intake_server.py.
 */
#include "uploader/http_send.h"

#include <check.h>
#include <curl/curl.h>

#include "test/unit/check_run.h"
#include "uploader/curl_api.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

START_TEST(test_2xx_is_delivered)
{
	static const long ok[] = {200, 201, 202, 204, 299};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(http_send_classify(CURLE_OK, ok[i]) == HTTP_DELIVERED, "HTTP %ld",
			      ok[i]);
		ck_assert_int_eq(http_send_fail_kind(CURLE_OK, ok[i]), HTTP_FAIL_NONE);
	}
}
END_TEST

START_TEST(test_408_429_and_5xx_are_retried)
{
	static const long again[] = {408, 429, 500, 502, 503, 504, 599};
	for (size_t i = 0; i < sizeof(again) / sizeof(again[0]); i++) {
		ck_assert_msg(http_send_classify(CURLE_OK, again[i]) == HTTP_RETRY, "HTTP %ld",
			      again[i]);
		ck_assert_int_eq(http_send_fail_kind(CURLE_OK, again[i]), HTTP_FAIL_SERVER);
	}
}
END_TEST

START_TEST(test_other_4xx_and_redirects_are_not_retried)
{
	static const long no[] = {400, 401, 403, 404, 405, 409, 413, 415, 422, 301, 302, 100};
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		ck_assert_msg(http_send_classify(CURLE_OK, no[i]) == HTTP_REJECTED,
			      "HTTP %ld must not be retried", no[i]);
		ck_assert_int_eq(http_send_fail_kind(CURLE_OK, no[i]), HTTP_FAIL_REJECTED);
	}
}
END_TEST

START_TEST(test_connection_errors_are_retried)
{
	static const CURLcode again[] = {CURLE_COULDNT_CONNECT,	  CURLE_COULDNT_RESOLVE_HOST,
					 CURLE_SEND_ERROR,	  CURLE_RECV_ERROR,
					 CURLE_GOT_NOTHING,	  CURLE_SSL_CONNECT_ERROR,
					 CURLE_OPERATION_TIMEDOUT};
	for (size_t i = 0; i < sizeof(again) / sizeof(again[0]); i++)
		ck_assert_msg(http_send_classify(again[i], 0) == HTTP_RETRY, "curl error %d",
			      (int)again[i]);
	ck_assert_int_eq(http_send_fail_kind(CURLE_COULDNT_CONNECT, 0), HTTP_FAIL_CONNECT);
	ck_assert_int_eq(http_send_fail_kind(CURLE_OPERATION_TIMEDOUT, 0), HTTP_FAIL_TIMEOUT);
}
END_TEST

START_TEST(test_errors_retrying_cannot_fix_are_not_retried)
{
	static const CURLcode no[] = {CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL,
				      CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE};
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		ck_assert_msg(http_send_classify(no[i], 0) == HTTP_REJECTED, "curl error %d",
			      (int)no[i]);
		ck_assert_int_eq(http_send_fail_kind(no[i], 0), HTTP_FAIL_SETUP);
	}
}
END_TEST

START_TEST(test_backoff_doubles_with_jitter_in_the_upper_half)
{
	for (unsigned r = 0; r < 12; r++) {
		uint64_t d = HTTP_BACKOFF_BASE_NS << r;
		if (d > HTTP_BACKOFF_CAP_NS)
			d = HTTP_BACKOFF_CAP_NS;
		uint64_t lo = http_send_backoff_ns(r, 0), hi = http_send_backoff_ns(r, d / 2);
		ck_assert_msg(lo == d / 2 && hi == d,
			      "retry %u: [%llu, %llu], expected [%llu, %llu]", r,
			      (unsigned long long)lo, (unsigned long long)hi,
			      (unsigned long long)(d / 2), (unsigned long long)d);
		for (uint64_t x = 1; x < 1000000; x = x * 7 + 3) {
			uint64_t v = http_send_backoff_ns(r, x * 0x9E3779B97F4A7C15ULL);
			ck_assert(v >= d / 2 && v <= d);
		}
	}
	ck_assert_uint_eq(http_send_backoff_ns(0, 0), HTTP_BACKOFF_BASE_NS / 2);
	/* Huge retry counts neither overflow nor exceed the cap. */
	ck_assert(http_send_backoff_ns(63, UINT64_MAX) <= HTTP_BACKOFF_CAP_NS);
	ck_assert(http_send_backoff_ns(1000, 12345) >= HTTP_BACKOFF_CAP_NS / 2);
}
END_TEST

START_TEST(test_forbidden_curl_fails_https_at_once_without_loading_it)
{
	http_send_forbid_curl();
	struct http_client *c = http_send_client_new(5ULL * 1000000000ULL);
	ck_assert_ptr_nonnull(c);
	struct http_job j;
	memset(&j, 0, sizeof(j));
	j.label = "test";
	j.req.url = "https://127.0.0.1:9/x";
	struct ratelimit warn = {0};
	j.warn = &warn;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	http_send_all(c, &j, 1, UINT64_MAX, NULL, false);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
	ck_assert_int_lt(j.rc, 0);
	ck_assert_int_eq(j.fail, HTTP_FAIL_SETUP);
	ck_assert_msg(!curl_api_loaded(), "libcurl was loaded in a process that must not use it");
	ck_assert_msg(ms < 1000, "the refused request took %.1f ms", ms);
	http_send_client_free(c);
}
END_TEST

static Suite *http_send_suite(void)
{
	Suite *s = suite_create("http_send");
	TCase *tc = tcase_create("policy");
	tcase_add_test(tc, test_2xx_is_delivered);
	tcase_add_test(tc, test_408_429_and_5xx_are_retried);
	tcase_add_test(tc, test_other_4xx_and_redirects_are_not_retried);
	tcase_add_test(tc, test_connection_errors_are_retried);
	tcase_add_test(tc, test_errors_retrying_cannot_fix_are_not_retried);
	tcase_add_test(tc, test_backoff_doubles_with_jitter_in_the_upper_half);
	tcase_add_test(tc, test_forbidden_curl_fails_https_at_once_without_loading_it);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(http_send_suite());
}
