/*
 * test_export_datadog.c - unit tests of uploader/export_datadog.c: RFC 3339 times,
 * runtime ids, agent endpoints (http, https, unix sockets), container ids from
 * /proc/self/cgroup texts, JSON escaping, event.json and tags_profiler, and the request
 * an exporter prepares (URL, headers, multipart body).
 */
#include "uploader/export_datadog.h"

#include <check.h>
#include <errno.h>
#include <regex.h>
#include <string.h>

#include "test/unit/check_run.h"
#include "test/unit/request_headers.h"

#define SEC 1000000000ULL
#define ID64 "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860"

START_TEST(test_rfc3339_has_nanoseconds_and_utc)
{
	char buf[DATADOG_TIME_MAX];
	ck_assert_int_eq(export_datadog_format_rfc3339(0, buf), 0);
	ck_assert_str_eq(buf, "1970-01-01T00:00:00.000000000Z");
	/* 2026-11-22T10:00:00Z = 1795341600 */
	ck_assert_int_eq(export_datadog_format_rfc3339(1795341600ULL * SEC + 123456789, buf), 0);
	ck_assert_str_eq(buf, "2026-11-22T10:00:00.123456789Z");
	ck_assert_int_eq(export_datadog_format_rfc3339(951782400ULL * SEC + 1, buf),
			 0); /* leap day */
	ck_assert_str_eq(buf, "2000-02-29T00:00:00.000000001Z");
	ck_assert_int_eq(export_datadog_format_rfc3339(UINT64_MAX, buf), 0); /* year 2554 */
	ck_assert_str_eq(buf, "2554-07-21T23:34:33.709551615Z");
}
END_TEST

START_TEST(test_runtime_id_is_a_fresh_uuid_v4)
{
	char a[EXPORT_RUNTIME_ID_MAX], b[EXPORT_RUNTIME_ID_MAX];
	regex_t re;
	ck_assert_int_eq(regcomp(&re,
				 "^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
				 "[0-9a-f]{12}$",
				 REG_EXTENDED | REG_NOSUB),
			 0);
	export_datadog_runtime_id_new(a);
	export_datadog_runtime_id_new(b);
	ck_assert_msg(regexec(&re, a, 0, NULL, 0) == 0, "%s is not a UUID v4", a);
	ck_assert_msg(regexec(&re, b, 0, NULL, 0) == 0, "%s is not a UUID v4", b);
	ck_assert_str_ne(a, b);
	regfree(&re);
}
END_TEST

START_TEST(test_agent_endpoint_for_http_https_and_unix)
{
	char url[256], sock[128];
	ck_assert_int_eq(export_datadog_agent_endpoint("http://localhost:8126", url, sizeof(url),
						       sock, sizeof(sock)),
			 0);
	ck_assert_str_eq(url, "http://localhost:8126/profiling/v1/input");
	ck_assert_str_eq(sock, "");
	ck_assert_int_eq(
	    export_datadog_agent_endpoint("https://proxy/dd", url, sizeof(url), sock, sizeof(sock)),
	    0);
	ck_assert_str_eq(url, "https://proxy/dd/profiling/v1/input");
	ck_assert_int_eq(export_datadog_agent_endpoint("unix:///var/run/datadog/apm.socket", url,
						       sizeof(url), sock, sizeof(sock)),
			 0);
	ck_assert_str_eq(url, "http://localhost/profiling/v1/input");
	ck_assert_str_eq(sock, "/var/run/datadog/apm.socket");
	ck_assert_int_eq(export_datadog_agent_endpoint("http://a-very-long-host-name", url, 20,
						       sock, sizeof(sock)),
			 -ENAMETOOLONG);
}
END_TEST

START_TEST(test_container_id_from_cgroup_lines)
{
	static const char *const with[][2] = {
	    {"12:cpu,cpuacct:/docker/" ID64 "\n", ID64},
	    {"0::/system.slice/docker-" ID64 ".scope\n", ID64},
	    {"1:name=systemd:/kubepods/burstable/pod2d3da189-6407-48e3-9ab6-78188d75e609/"
	     "cri-containerd-" ID64 "\n",
	     ID64},
	    {"3:cpu:/ecs/task/34dc0b5e626f2c5c4c5170e34b10e765-1234567890\n",
	     "34dc0b5e626f2c5c4c5170e34b10e765-1234567890"},
	    {"0::/garden/a6a4c0e2-9e6b-4e24-6bd3-3a1f7f0e1cde\n",
	     "a6a4c0e2-9e6b-4e24-6bd3-3a1f7f0e1cde"},
	};
	char id[DATADOG_CONTAINER_ID_MAX];
	for (size_t i = 0; i < sizeof(with) / sizeof(with[0]); i++) {
		ck_assert_msg(export_datadog_container_id(with[i][0], id), "no id in %s",
			      with[i][0]);
		ck_assert_str_eq(id, with[i][1]);
	}
	static const char *const without[] = {
	    "0::/\n",
	    "4:memory:/process_api/dd58e2fe4c610213cc7ad25d46e71bbc\n0::/\n",
	    "1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n",
	    "",
	};
	for (size_t i = 0; i < sizeof(without) / sizeof(without[0]); i++)
		ck_assert_msg(!export_datadog_container_id(without[i], id), "found %s in %s", id,
			      without[i]);
}
END_TEST

START_TEST(test_json_strings_are_escaped)
{
	struct pb_buf out;
	pb_init(&out);
	export_datadog_json_string(&out, "a\"b\\c\nd\te\x01"
					 "f\x1f"
					 "\xc3\xa9");
	static const char expected[] = "\"a\\\"b\\\\c\\nd\\te\\u0001f\\u001f\xc3\xa9\"";
	ck_assert_uint_eq(out.len, strlen(expected));
	ck_assert(memcmp(out.data, expected, out.len) == 0);
	pb_free(&out);
}
END_TEST

START_TEST(test_event_json_is_exact)
{
	struct pb_buf out;
	pb_init(&out);
	struct datadog_event ev = {"service:web,team:\"x\"", 1795341600ULL * SEC,
				   1795341660ULL * SEC + 5};
	ck_assert_int_eq(export_datadog_event_json(&out, &ev), 0);
	static const char expected[] = "{\"attachments\":[\"profile.pprof\"],"
				       "\"tags_profiler\":\"service:web,team:\\\"x\\\"\","
				       "\"start\":\"2026-11-22T10:00:00.000000000Z\","
				       "\"end\":\"2026-11-22T10:01:00.000000005Z\","
				       "\"family\":\"native\",\"version\":\"4\"}";
	ck_assert_msg(out.len == strlen(expected) && memcmp(out.data, expected, out.len) == 0,
		      "got %.*s", (int)out.len, out.data);
	pb_free(&out);
}
END_TEST

START_TEST(test_tags_profiler_has_every_tag_in_order)
{
	char tags[DATADOG_TAGS_MAX];
	struct datadog_tag_values v = {
	    "web", "prod", "1.2", "h1", "0b1e4b51-6d2c-4d3a-9b7c-1f2e3d4c5b6a", 123, "team:x,k:v"};
	ck_assert_int_eq(export_datadog_tags(tags, sizeof(tags), &v), 0);
	ck_assert_str_eq(tags, "service:web,env:prod,version:1.2,host:h1,language:native,"
			       "profiler_version:" DDPROF_VERSION
			       ",runtime-id:0b1e4b51-6d2c-4d3a-9b7c-1f2e3d4c5b6a,"
			       "process_id:123,team:x,k:v");
	/* Absent env/version/tags are left out; commas in values cannot split a tag. */
	struct datadog_tag_values w = {"a,b", "", "", "h", "id", 7, ""};
	ck_assert_int_eq(export_datadog_tags(tags, sizeof(tags), &w), 0);
	ck_assert_str_eq(tags, "service:a_b,host:h,language:native,profiler_version:" DDPROF_VERSION
			       ",runtime-id:id,process_id:7");
	ck_assert_int_eq(export_datadog_tags(tags, 40, &v), -ENOSPC);
}
END_TEST

/* A config for the exporters: defaults plus what the test sets. */
static struct config test_config(void)
{
	struct config cfg;
	config_defaults(&cfg);
	strcpy(cfg.agent_url, "unix:///run/apm.socket");
	strcpy(cfg.service, "svc");
	strcpy(cfg.tags, "team:x");
	strcpy(cfg.api_key, "KEY123");
	strcpy(cfg.agentless_url, "https://intake.profile.datadoghq.eu/api/v2/profile");
	return cfg;
}

START_TEST(test_prepared_requests_carry_protocol_headers_and_body)
{
	struct config cfg = test_config();
	static const uint8_t gz[] = {0x1f, 0x8b, 1, 2, 3};
	struct export_item item = {
	    gz, sizeof(gz), 10 * SEC, 11 * SEC, 42, 0, "0b1e4b51-6d2c-4d3a-9b7c-1f2e3d4c5b6a"};
	struct pb_buf body;
	struct http_request req;
	pb_init(&body);
	for (int agentless = 0; agentless <= 1; agentless++) {
		struct exporter *e = export_datadog_new(&cfg, agentless);
		ck_assert_ptr_nonnull(e);
		ck_assert_ptr_null(e->send);
		ck_assert_int_eq(e->prepare(e, &item, &body, &req), 0);
		ck_assert_str_eq(req.url, agentless
					      ? "https://intake.profile.datadoghq.eu/api/v2/profile"
					      : "http://localhost/profiling/v1/input");
		if (agentless)
			ck_assert_ptr_null(req.unix_socket);
		else
			ck_assert_str_eq(req.unix_socket, "/run/apm.socket");
		ck_assert_ptr_nonnull(find_header(&req, "Content-Type: multipart/form-data; "
							"boundary=libddprof-"));
		ck_assert_str_eq(find_header(&req, "DD-EVP-ORIGIN:"), "DD-EVP-ORIGIN: libddprof");
		ck_assert_str_eq(find_header(&req, "DD-EVP-ORIGIN-VERSION:"),
				 "DD-EVP-ORIGIN-VERSION: " DDPROF_VERSION);
		const char *key = find_header(&req, "DD-API-KEY:");
		if (agentless)
			ck_assert_str_eq(key, "DD-API-KEY: KEY123");
		else
			ck_assert_ptr_null(key);
		ck_assert_msg(strstr(e->label, "KEY123") == NULL, "the key is in the label");
		ck_assert(req.body == body.data && req.body_len == body.len);
		ck_assert(memmem(body.data, body.len, gz, sizeof(gz)) != NULL);
		ck_assert(memmem(body.data, body.len,
				 "\"start\":\"1970-01-01T00:00:10.000000000Z\"", 40) != NULL);
		ck_assert(memmem(body.data, body.len, ",process_id:42,team:x\"", 22) != NULL);
		ck_assert(memmem(body.data, body.len, "\"tags_profiler\":\"service:svc,", 29));
		e->destroy(e);
	}
	pb_free(&body);
}
END_TEST

static Suite *export_datadog_suite(void)
{
	Suite *s = suite_create("export_datadog");
	TCase *tc = tcase_create("export_datadog");
	tcase_add_test(tc, test_rfc3339_has_nanoseconds_and_utc);
	tcase_add_test(tc, test_runtime_id_is_a_fresh_uuid_v4);
	tcase_add_test(tc, test_agent_endpoint_for_http_https_and_unix);
	tcase_add_test(tc, test_container_id_from_cgroup_lines);
	tcase_add_test(tc, test_json_strings_are_escaped);
	tcase_add_test(tc, test_event_json_is_exact);
	tcase_add_test(tc, test_tags_profiler_has_every_tag_in_order);
	tcase_add_test(tc, test_prepared_requests_carry_protocol_headers_and_body);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(export_datadog_suite());
}
