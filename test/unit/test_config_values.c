/*
 * test_config_values.c - unit tests of common/config_values.c: the syntax of the
 * configuration's values (integers, seconds, sizes, signals) and the signals the
 * profiler may sample with. Each variable's range and warning are test_config.c's.
 */
#include "common/config_values.h"

#include <check.h>
#include <signal.h>
#include <stdio.h>

#include "test/unit/check_run.h"

START_TEST(test_signal_names_and_numbers)
{
	const struct {
		const char *in;
		int signo;
	} cases[] = {
	    {"PROF", SIGPROF},
	    {"sigprof", SIGPROF},
	    {"27", 27},
	    {"SIGRTMIN+3", SIGRTMIN + 3},
	    {"SIGRTMIN", SIGRTMIN},
	    {"rtmin+0", SIGRTMIN},
	    {"SIGRTMAX", SIGRTMAX},
	    {"SIGRTMAX-2", SIGRTMAX - 2},
	    {"64", 64},
	    {"0", 0},
	    {"TERM", SIGTERM},
	    {"sigint", SIGINT},
	    {"65", -1},
	    {"RTMIN-1", -1},
	    {"RTMAX+1", -1},
	    {"SIGRTMIN+99", -1},
	    {"+5", -1},
	    {"PROFX", -1},
	    {"", -1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(config_parse_signal(cases[i].in) == cases[i].signo,
			      "\"%s\": expected %d, seen %d", cases[i].in, cases[i].signo,
			      config_parse_signal(cases[i].in));
	/* Every real-time signal glibc leaves to applications, by number. */
	char num[16];
	for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++) {
		snprintf(num, sizeof(num), "%d", sig);
		ck_assert_int_eq(config_parse_signal(num), sig);
		ck_assert(config_signal_allowed(sig));
	}
	ck_assert(config_signal_allowed(SIGPROF));
	for (int sig = 1; sig < SIGRTMIN; sig++)
		ck_assert_msg(sig == SIGPROF || !config_signal_allowed(sig), "signal %d allowed",
			      sig);
}
END_TEST

START_TEST(test_seconds_are_exact_decimal_nanoseconds)
{
	uint64_t ns;
	ck_assert(config_parse_seconds("60", &ns) && ns == 60000000000ULL);
	ck_assert(config_parse_seconds("0.5", &ns) && ns == 500000000ULL);
	ck_assert(config_parse_seconds(".25", &ns) && ns == 250000000ULL);
	ck_assert(config_parse_seconds("1.0000000019", &ns) && ns == 1000000001ULL);
	ck_assert(config_parse_seconds("86400", &ns) && ns == 86400000000000ULL);
	const char *bad[] = {"86400.5", "86401", "-1", "+1", "1e3", "nan",
			     "inf",	"",	 ".",  "1s", " 1"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!config_parse_seconds(bad[i], &ns), "\"%s\" accepted", bad[i]);
}
END_TEST

START_TEST(test_sizes_take_binary_suffixes_and_print_back)
{
	uint64_t b;
	ck_assert(config_parse_size("512", &b) && b == 512);
	ck_assert(config_parse_size("64k", &b) && b == 64 << 10);
	ck_assert(config_parse_size("64KiB", &b) && b == 64 << 10);
	ck_assert(config_parse_size("3mb", &b) && b == 3 << 20);
	ck_assert(config_parse_size("2G", &b) && b == 2ULL << 30);
	const char *bad[] = {"", "K", "1T", "1KiBs", "-1", "1.5M", "99999999999999999999G"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!config_parse_size(bad[i], &b), "\"%s\" accepted", bad[i]);
	char buf[CONFIG_NUM_BUF];
	ck_assert_str_eq(config_fmt_size(buf, 64ULL << 20), "64MiB");
	ck_assert_str_eq(config_fmt_size(buf, 1536), "1536");
	ck_assert_str_eq(config_fmt_size(buf, 3072), "3KiB");
	ck_assert_str_eq(config_fmt_size(buf, 2ULL << 30), "2GiB");
	ck_assert_str_eq(config_fmt_size(buf, 0), "0");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config_values");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_signal_names_and_numbers);
	tcase_add_test(tc, test_seconds_are_exact_decimal_nanoseconds);
	tcase_add_test(tc, test_sizes_take_binary_suffixes_and_print_back);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
