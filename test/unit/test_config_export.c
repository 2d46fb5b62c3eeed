/*
 * test_config_export.c - unit tests of the exporter variables of common/config.c: the
 * rule choosing the exporters, agent/agentless/Pyroscope URLs, timeouts, secrets.
 *
 * Same harness as test_config.c (config_env.h): each load also checks that the warning
 * lines printed equal the count returned.
 */
#include "common/config.h"

#include <check.h>

#include "test/unit/check_run.h"
#include "test/unit/config_env.h"

#define NS_PER_S 1000000000ULL
#define NS_PER_MS 1000000ULL
#define SECRET "s3cr3t-KEY-0123456789abcdef"

START_TEST(test_agent_exporter_is_the_default)
{
	struct config cfg;
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert(cfg.export_agent);
	ck_assert(!cfg.export_agentless);
	ck_assert(!cfg.export_pyroscope);
	ck_assert_str_eq(cfg.agent_url, "http://localhost:8126");
	ck_assert_str_eq(cfg.site, "datadoghq.com");
	ck_assert_str_eq(cfg.agentless_url, "https://intake.profile.datadoghq.com/api/v2/profile");
	ck_assert_uint_eq(cfg.upload_timeout_ns, 10 * NS_PER_S);
	ck_assert_uint_eq(cfg.exit_flush_timeout_ns, 2 * NS_PER_S);
}
END_TEST

START_TEST(test_output_dir_or_pyroscope_alone_turn_the_agent_off)
{
	struct config cfg;
	load_one_good(&cfg, "DD_PROFILING_OUTPUT_DIR", "/tmp/x");
	ck_assert_msg(!cfg.export_agent, "files only: the agent exporter must stay off");
	load_one_good(&cfg, "PYROSCOPE_SERVER_ADDRESS", "http://pyro:4040");
	ck_assert(!cfg.export_agent);
	ck_assert(cfg.export_pyroscope);
	ck_assert_str_eq(cfg.pyroscope_url, "http://pyro:4040");
}
END_TEST

START_TEST(test_any_agent_variable_turns_the_agent_back_on)
{
	static const char *const vars[][2] = {
	    {"DD_TRACE_AGENT_URL", "http://agent:8126"},
	    {"DD_AGENT_HOST", "agent"},
	    {"DD_TRACE_AGENT_PORT", "9126"},
	};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		struct config cfg;
		fake_clear();
		fake_set("DD_PROFILING_OUTPUT_DIR", "/tmp/x");
		fake_set(vars[i][0], vars[i][1]);
		ck_assert_int_eq(load(&cfg), 0);
		ck_assert_msg(cfg.export_agent, "%s set: the agent exporter must be on",
			      vars[i][0]);
	}
}
END_TEST

START_TEST(test_agent_url_from_host_and_port)
{
	struct config cfg;
	fake_set("DD_AGENT_HOST", "dd-agent.local");
	fake_set("DD_TRACE_AGENT_PORT", "18126");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_str_eq(cfg.agent_url, "http://dd-agent.local:18126");
	load_one_good(&cfg, "DD_AGENT_HOST", "::1");
	ck_assert_str_eq(cfg.agent_url, "http://[::1]:8126");
}
END_TEST

START_TEST(test_trace_agent_url_wins_and_loses_its_trailing_slash)
{
	struct config cfg;
	fake_set("DD_TRACE_AGENT_URL", "https://agent.example:443/");
	fake_set("DD_AGENT_HOST", "ignored");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_str_eq(cfg.agent_url, "https://agent.example:443");
	load_one_good(&cfg, "DD_TRACE_AGENT_URL", "unix:///var/run/datadog/apm.socket");
	ck_assert_str_eq(cfg.agent_url, "unix:///var/run/datadog/apm.socket");
}
END_TEST

START_TEST(test_bad_agent_values_warn_once_and_use_defaults)
{
	static const char *const bad[][2] = {
	    {"DD_TRACE_AGENT_URL", "ftp://agent"}, {"DD_TRACE_AGENT_URL", "http://"},
	    {"DD_TRACE_AGENT_URL", "unix://rel"},  {"DD_TRACE_AGENT_URL", "http://a b"},
	    {"DD_AGENT_HOST", "evil/host"},	   {"DD_AGENT_HOST", "user@host"},
	    {"DD_TRACE_AGENT_PORT", "0"},	   {"DD_TRACE_AGENT_PORT", "65536"},
	    {"DD_TRACE_AGENT_PORT", "80x"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct config cfg;
		load_one_bad(&cfg, bad[i][0], bad[i][1]);
		ck_assert_msg(strstr(seen_stderr, bad[i][0]) != NULL,
			      "the warning does not name %s: %s", bad[i][0], seen_stderr);
		ck_assert_str_eq(cfg.agent_url, "http://localhost:8126");
		ck_assert(cfg.export_agent);
	}
}
END_TEST

START_TEST(test_timeouts_accept_decimal_seconds)
{
	struct config cfg;
	load_one_good(&cfg, "DD_PROFILING_UPLOAD_TIMEOUT", "2.5");
	ck_assert_uint_eq(cfg.upload_timeout_ns, 2500 * NS_PER_MS);
	load_one_good(&cfg, "DD_PROFILING_EXIT_FLUSH_TIMEOUT", "0");
	ck_assert_uint_eq(cfg.exit_flush_timeout_ns, 0);
	load_one_good(&cfg, "DD_PROFILING_EXIT_FLUSH_TIMEOUT", "0.25");
	ck_assert_uint_eq(cfg.exit_flush_timeout_ns, 250 * NS_PER_MS);
}
END_TEST

START_TEST(test_bad_timeouts_warn_once_and_use_defaults)
{
	static const char *const bad[][2] = {
	    {"DD_PROFILING_UPLOAD_TIMEOUT", "0"},      {"DD_PROFILING_UPLOAD_TIMEOUT", "-1"},
	    {"DD_PROFILING_UPLOAD_TIMEOUT", "10s"},    {"DD_PROFILING_UPLOAD_TIMEOUT", "3601"},
	    {"DD_PROFILING_EXIT_FLUSH_TIMEOUT", "61"}, {"DD_PROFILING_EXIT_FLUSH_TIMEOUT", "x"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct config cfg;
		load_one_bad(&cfg, bad[i][0], bad[i][1]);
		ck_assert_uint_eq(cfg.upload_timeout_ns, 10 * NS_PER_S);
		ck_assert_uint_eq(cfg.exit_flush_timeout_ns, 2 * NS_PER_S);
	}
}
END_TEST

START_TEST(test_agentless_with_a_key_replaces_the_agent)
{
	struct config cfg;
	fake_set("DD_PROFILING_AGENTLESS", "true");
	fake_set("DD_API_KEY", SECRET);
	fake_set("DD_SITE", "datadoghq.eu");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert(cfg.export_agentless);
	ck_assert(!cfg.export_agent);
	ck_assert_str_eq(cfg.api_key, SECRET);
	ck_assert_str_eq(cfg.agentless_url, "https://intake.profile.datadoghq.eu/api/v2/profile");
	fake_set("DD_PROFILING_AGENTLESS_URL", "https://127.0.0.1:8443/api/v2/profile");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert(cfg.export_agentless);
	ck_assert_str_eq(cfg.agentless_url, "https://127.0.0.1:8443/api/v2/profile");
}
END_TEST

START_TEST(test_agentless_over_plain_http_is_refused)
{
	struct config cfg;
	fake_set("DD_PROFILING_AGENTLESS", "true");
	fake_set("DD_API_KEY", SECRET);
	fake_set("DD_PROFILING_AGENTLESS_URL", "http://127.0.0.1:8080/api/v2/profile");
	ck_assert_int_eq(load(&cfg), 1);
	ck_assert_msg(!cfg.export_agentless, "agentless must be off over http");
	ck_assert(!cfg.export_agent);
	ck_assert_msg(strstr(seen_stderr, "DD_PROFILING_AGENTLESS_URL") &&
			  strstr(seen_stderr, "https") && strstr(seen_stderr, "DD_API_KEY"),
		      "unclear refusal: %s", seen_stderr);
	ck_assert_msg(!strstr(seen_stderr, SECRET), "the key was printed: %s", seen_stderr);
}
END_TEST

START_TEST(test_agentless_without_a_key_warns_once)
{
	struct config cfg;
	load_one_bad(&cfg, "DD_PROFILING_AGENTLESS", "true");
	ck_assert(!cfg.export_agentless);
	ck_assert(strstr(seen_stderr, "DD_API_KEY") != NULL);
	load_one_bad(&cfg, "DD_SITE", "evil.com/path");
	ck_assert_str_eq(cfg.site, "datadoghq.com");
}
END_TEST

START_TEST(test_secrets_are_never_printed)
{
	struct config cfg;
	/* A key with a blank cannot go into a header: refused, described by length. */
	fake_set("DD_API_KEY", "bad key " SECRET);
	fake_set("PYROSCOPE_AUTH_TOKEN", "tok\n" SECRET);
	fake_set("PYROSCOPE_BASIC_AUTH_PASSWORD", "pw\r" SECRET);
	ck_assert_int_eq(load(&cfg), 3);
	ck_assert_msg(!strstr(seen_stderr, SECRET), "a secret was printed: %s", seen_stderr);
	ck_assert_str_eq(cfg.api_key, "");
	ck_assert_str_eq(cfg.pyroscope_token, "");
	/* Valid secrets, at debug level: the config line says "set", never the value. */
	fake_clear();
	fake_set("DD_PROFILING_LOG_LEVEL", "debug");
	fake_set("DD_PROFILING_AGENTLESS", "true");
	fake_set("DD_API_KEY", SECRET);
	fake_set("PYROSCOPE_SERVER_ADDRESS", "https://user:" SECRET "@pyro.example");
	fake_set("PYROSCOPE_AUTH_TOKEN", SECRET);
	fake_set("PYROSCOPE_BASIC_AUTH_PASSWORD", SECRET);
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_msg(strstr(seen_stderr, "api key set") != NULL, "no debug line: %s", seen_stderr);
	ck_assert_msg(!strstr(seen_stderr, SECRET), "a secret was printed: %s", seen_stderr);
	log_set_level(LOG_LEVEL_WARN);
}
END_TEST

START_TEST(test_pyroscope_variables_are_copied)
{
	struct config cfg;
	fake_set("PYROSCOPE_SERVER_ADDRESS", "https://pyro.example:4040//");
	fake_set("PYROSCOPE_APPLICATION_NAME", "my.app");
	fake_set("PYROSCOPE_AUTH_TOKEN", "tok");
	fake_set("PYROSCOPE_BASIC_AUTH_USER", "u");
	fake_set("PYROSCOPE_BASIC_AUTH_PASSWORD", "p");
	fake_set("PYROSCOPE_TENANT_ID", "tenant-1");
	fake_set("PYROSCOPE_TAGS", "region=eu, zone:a");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert(cfg.export_pyroscope);
	ck_assert_str_eq(cfg.pyroscope_url, "https://pyro.example:4040");
	ck_assert_str_eq(cfg.pyroscope_app, "my.app");
	ck_assert_str_eq(cfg.pyroscope_token, "tok");
	ck_assert_str_eq(cfg.pyroscope_user, "u");
	ck_assert_str_eq(cfg.pyroscope_password, "p");
	ck_assert_str_eq(cfg.pyroscope_tenant, "tenant-1");
	ck_assert_str_eq(cfg.pyroscope_tags, "region:eu,zone:a");
}
END_TEST

START_TEST(test_bad_pyroscope_values_warn_once)
{
	struct config cfg;
	load_one_bad(&cfg, "PYROSCOPE_SERVER_ADDRESS", "pyro:4040");
	ck_assert(!cfg.export_pyroscope);
	ck_assert(cfg.export_agent); /* nothing else asked for: the default remains */
	load_one_bad(&cfg, "PYROSCOPE_SERVER_ADDRESS", "unix:///tmp/pyro.sock");
	ck_assert(!cfg.export_pyroscope);
	load_one_bad(&cfg, "PYROSCOPE_TENANT_ID", "a\r\nX-Injected: 1");
	ck_assert_str_eq(cfg.pyroscope_tenant, "");
	load_one_bad(&cfg, "PYROSCOPE_TAGS", "novalue");
	ck_assert_str_eq(cfg.pyroscope_tags, "");
}
END_TEST

START_TEST(test_redact_url_hides_credentials_only)
{
	char out[CONFIG_URL_MAX];
	ck_assert_str_eq(config_redact_url(out, "https://u:p@host:1/x?y=z@w"),
			 "https://***@host:1/x?y=z@w");
	ck_assert_str_eq(config_redact_url(out, "http://host:8126"), "http://host:8126");
	ck_assert_str_eq(config_redact_url(out, "unix:///a@b/sock"), "unix:///a@b/sock");
}
END_TEST

static Suite *config_export_suite(void)
{
	Suite *s = suite_create("config_export");
	TCase *tc = tcase_create("config_export");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_agent_exporter_is_the_default);
	tcase_add_test(tc, test_output_dir_or_pyroscope_alone_turn_the_agent_off);
	tcase_add_test(tc, test_any_agent_variable_turns_the_agent_back_on);
	tcase_add_test(tc, test_agent_url_from_host_and_port);
	tcase_add_test(tc, test_trace_agent_url_wins_and_loses_its_trailing_slash);
	tcase_add_test(tc, test_bad_agent_values_warn_once_and_use_defaults);
	tcase_add_test(tc, test_timeouts_accept_decimal_seconds);
	tcase_add_test(tc, test_bad_timeouts_warn_once_and_use_defaults);
	tcase_add_test(tc, test_agentless_with_a_key_replaces_the_agent);
	tcase_add_test(tc, test_agentless_over_plain_http_is_refused);
	tcase_add_test(tc, test_agentless_without_a_key_warns_once);
	tcase_add_test(tc, test_secrets_are_never_printed);
	tcase_add_test(tc, test_pyroscope_variables_are_copied);
	tcase_add_test(tc, test_bad_pyroscope_values_warn_once);
	tcase_add_test(tc, test_redact_url_hides_credentials_only);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(config_export_suite());
}
