/*
 * test_config.c - unit tests of common/config.c: every environment variable's valid
 * values, and for each bad value: the default is used and exactly one warning is given.
 *
 * The environment is a fake table (fake_getenv); stderr is captured around every
 * config_load so that each test also checks that the number of warning lines printed
 * equals the count config_load returns.
 */
#include "common/config.h"

#include <check.h>

#include "test/unit/check_run.h"
#include "test/unit/config_env.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#define MIB (1ULL << 20)
#define GIB (1ULL << 30)
#define NS_PER_S 1000000000ULL

static void assert_defaults(const struct config *cfg)
{
	ck_assert(cfg->enabled);
	ck_assert_uint_eq(cfg->cpu_hz, 99);
	ck_assert_uint_eq(cfg->upload_period_ns, 60 * NS_PER_S);
	ck_assert_str_eq(cfg->output_dir, "");
	ck_assert_uint_eq(cfg->max_memory, 64 * MIB);
	ck_assert(!cfg->allocation_enabled);
	ck_assert(!cfg->heap_enabled);
	ck_assert(!cfg->flush_on_signal);
	ck_assert_uint_eq(cfg->alloc_interval, 512 << 10);
	ck_assert_int_eq(cfg->signal, 0);
	ck_assert_int_eq(cfg->log_level, LOG_LEVEL_WARN);
	ck_assert_str_eq(cfg->service, "");
	ck_assert_str_eq(cfg->env, "");
	ck_assert_str_eq(cfg->version, "");
	ck_assert_str_eq(cfg->tags, "");
}

START_TEST(test_defaults_when_nothing_set)
{
	struct config cfg;
	ck_assert_int_eq(load(&cfg), 0);
	assert_defaults(&cfg);
	ck_assert_str_eq(seen_stderr, "");
	config_defaults(&cfg);
	assert_defaults(&cfg);
}
END_TEST

START_TEST(test_empty_values_count_as_unset)
{
	static const char *const names[] = {
	    "DD_PROFILING_ENABLED",
	    "DD_PROFILING_CPU_HZ",
	    "DD_PROFILING_UPLOAD_PERIOD",
	    "DD_PROFILING_OUTPUT_DIR",
	    "DD_PROFILING_MAX_MEMORY",
	    "DD_PROFILING_SIGNAL",
	    "DD_PROFILING_LOG_LEVEL",
	    "DD_SERVICE",
	    "DD_ENV",
	    "DD_VERSION",
	    "DD_TAGS",
	};
	struct config cfg;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		fake_set(names[i], "");
	ck_assert_int_eq(load(&cfg), 0);
	assert_defaults(&cfg);
}
END_TEST

START_TEST(test_enabled_accepts_boolean_spellings_in_any_case)
{
	static const char *const no[] = {"false", "0", "no", "off", "FALSE", "Off", "NO"};
	static const char *const yes[] = {"true", "1", "yes", "on", "TRUE", "On", "Yes"};
	struct config cfg;
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		load_one_good(&cfg, "DD_PROFILING_ENABLED", no[i]);
		ck_assert_msg(!cfg.enabled, "ENABLED=\"%s\": expected false, seen true", no[i]);
	}
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		load_one_good(&cfg, "DD_PROFILING_ENABLED", yes[i]);
		ck_assert_msg(cfg.enabled, "ENABLED=\"%s\": expected true, seen false", yes[i]);
	}
}
END_TEST

START_TEST(test_bad_enabled_warns_once_and_uses_default)
{
	static const char *const bad[] = {"yes please", "2", "enabled", " true", "truex"};
	struct config cfg;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_ENABLED", bad[i]);
		ck_assert_msg(cfg.enabled, "ENABLED=\"%s\": expected default true", bad[i]);
	}
}
END_TEST

START_TEST(test_cpu_hz_accepts_integers_in_range)
{
	static const struct {
		const char *in;
		unsigned hz;
	} ok[] = {{"1000", 1000}, {"1", 1}, {"10000", 10000}, {"0099", 99}};
	struct config cfg;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		load_one_good(&cfg, "DD_PROFILING_CPU_HZ", ok[i].in);
		ck_assert_msg(cfg.cpu_hz == ok[i].hz, "CPU_HZ=\"%s\": expected %u, seen %u",
			      ok[i].in, ok[i].hz, cfg.cpu_hz);
	}
}
END_TEST

START_TEST(test_bad_cpu_hz_warns_once_and_uses_default)
{
	static const char *const bad[] = {
	    "abc",
	    "0",
	    "10001",
	    "-5",
	    "99hz",
	    " 99",
	    "+99",
	    "1e3",
	    "0x10",
	    "99.5",
	    "18446744073709551616",
	    "99999999999999999999999",
	};
	struct config cfg;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_CPU_HZ", bad[i]);
		ck_assert_msg(cfg.cpu_hz == 99, "CPU_HZ=\"%s\": expected default 99, seen %u",
			      bad[i], cfg.cpu_hz);
	}
}
END_TEST

START_TEST(test_bad_cpu_hz_warning_names_variable_value_and_default)
{
	struct config cfg;
	load_one_bad(&cfg, "DD_PROFILING_CPU_HZ", "abc");
	ck_assert_str_eq(seen_stderr, WARN_PREFIX "DD_PROFILING_CPU_HZ=\"abc\" is not an integer "
						  "in 1..10000; using the default 99\n");
}
END_TEST

START_TEST(test_upload_period_accepts_decimal_seconds)
{
	static const struct {
		const char *in;
		uint64_t ns;
	} ok[] = {
	    {"60", 60 * NS_PER_S},
	    {"0.5", 500000000ULL},
	    {"1.25", 1250000000ULL},
	    {"0.1", 100000000ULL},
	    {".5", 500000000ULL},
	    {"2.", 2 * NS_PER_S},
	    {"86400", 86400 * NS_PER_S},
	    {"1.0000000019", 1000000001ULL}, /* digits past the nanosecond are ignored */
	};
	struct config cfg;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		load_one_good(&cfg, "DD_PROFILING_UPLOAD_PERIOD", ok[i].in);
		ck_assert_msg(cfg.upload_period_ns == ok[i].ns,
			      "UPLOAD_PERIOD=\"%s\": expected %llu ns, seen %llu", ok[i].in,
			      (unsigned long long)ok[i].ns,
			      (unsigned long long)cfg.upload_period_ns);
	}
}
END_TEST

START_TEST(test_bad_upload_period_warns_once_and_uses_default)
{
	static const char *const bad[] = {
	    "0.05",
	    "0",
	    "nan",
	    "NaN",
	    "inf",
	    "-1",
	    "-0.5",
	    "+5",
	    "1e3",
	    "60s",
	    "abc",
	    "86400.5",
	    "86401",
	    "1..2",
	    " 60",
	    "0x10",
	    ".",
	    "1,5",
	    "99999999999999999999999",
	};
	struct config cfg;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_UPLOAD_PERIOD", bad[i]);
		ck_assert_msg(cfg.upload_period_ns == 60 * NS_PER_S,
			      "UPLOAD_PERIOD=\"%s\": expected default %llu ns, seen %llu", bad[i],
			      60 * NS_PER_S, (unsigned long long)cfg.upload_period_ns);
	}
}
END_TEST

START_TEST(test_bad_upload_period_warning_names_variable_value_and_default)
{
	struct config cfg;
	load_one_bad(&cfg, "DD_PROFILING_UPLOAD_PERIOD", "0.05");
	ck_assert_str_eq(seen_stderr, WARN_PREFIX "DD_PROFILING_UPLOAD_PERIOD=\"0.05\" is not a "
						  "number of seconds in 0.1..86400; using the "
						  "default 60\n");
}
END_TEST

START_TEST(test_output_dir_is_copied)
{
	struct config cfg;
	load_one_good(&cfg, "DD_PROFILING_OUTPUT_DIR", "/tmp/profiles");
	ck_assert_str_eq(cfg.output_dir, "/tmp/profiles");
}
END_TEST

/* A relative directory is resolved against the working directory at start-up: a
 * program that then changes it (a daemon's chdir("/")) still writes where it was told. */
START_TEST(test_relative_output_dir_is_resolved_at_start)
{
	char old[4096];
	ck_assert_ptr_nonnull(getcwd(old, sizeof(old)));
	ck_assert_int_eq(chdir("/tmp"), 0);
	struct config cfg;
	load_one_good(&cfg, "DD_PROFILING_OUTPUT_DIR", "rel/profiles");
	ck_assert_str_eq(cfg.output_dir, "/tmp/rel/profiles");
	ck_assert_int_eq(chdir("/"), 0);
	load_one_good(&cfg, "DD_PROFILING_OUTPUT_DIR", "rel");
	ck_assert_str_eq(cfg.output_dir, "/rel");
	ck_assert_int_eq(chdir(old), 0);
}
END_TEST

START_TEST(test_too_long_output_dir_warns_once_and_disables_export)
{
	static char path[CONFIG_PATH_MAX + 1];
	struct config cfg;
	memset(path, 'd', CONFIG_PATH_MAX);
	path[0] = '/';
	load_one_bad(&cfg, "DD_PROFILING_OUTPUT_DIR", path);
	ck_assert_str_eq(cfg.output_dir, "");
	ck_assert_ptr_nonnull(strstr(seen_stderr, "DD_PROFILING_OUTPUT_DIR=\"/ddd"));
	ck_assert_ptr_nonnull(strstr(seen_stderr, "using the default \"\""));
	path[CONFIG_PATH_MAX - 1] = '\0'; /* the longest that fits */
	load_one_good(&cfg, "DD_PROFILING_OUTPUT_DIR", path);
	ck_assert_uint_eq(strlen(cfg.output_dir), CONFIG_PATH_MAX - 1);
}
END_TEST

START_TEST(test_unwind_cache_dir_follows_the_xdg_rule_and_can_be_turned_off)
{
	struct config cfg;
	fake_clear();
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_str_eq(cfg.unwind_cache_dir, ""); /* no HOME, no XDG_CACHE_HOME: off */
	fake_set("HOME", "/home/u");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_str_eq(cfg.unwind_cache_dir, "/home/u/.cache/libddprof");
	fake_set("XDG_CACHE_HOME", "relative/is/ignored");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_str_eq(cfg.unwind_cache_dir, "/home/u/.cache/libddprof");
	fake_set("XDG_CACHE_HOME", "/var/cache/u");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_str_eq(cfg.unwind_cache_dir, "/var/cache/u/libddprof");
	fake_set("DD_PROFILING_UNWIND_CACHE_DIR", "/srv/unwind");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_str_eq(cfg.unwind_cache_dir, "/srv/unwind");
	fake_set("DD_PROFILING_UNWIND_CACHE_DIR", ""); /* set and empty: off */
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_str_eq(cfg.unwind_cache_dir, "");
	static char path[CONFIG_PATH_MAX + 1];
	memset(path, 'c', CONFIG_PATH_MAX);
	path[0] = '/';
	load_one_bad(&cfg, "DD_PROFILING_UNWIND_CACHE_DIR", path);
	ck_assert_str_eq(cfg.unwind_cache_dir, "");
	ck_assert_ptr_nonnull(strstr(seen_stderr, "the unwind cache is off"));
}
END_TEST

START_TEST(test_max_memory_accepts_binary_suffixes_in_any_case)
{
	static const struct {
		const char *in;
		uint64_t bytes;
	} ok[] = {
	    {"32M", 33554432ULL}, {"1GiB", GIB},	 {"1048576", MIB},
	    {"512k", 512 << 10},  {"2gb", 2 * GIB},	 {"100MB", 100 * MIB},
	    {"8mib", 8 * MIB},	  {"256KiB", 256 << 10}, /* the minimum */
	    {"16G", 16 * GIB},				 /* the maximum */
	};
	struct config cfg;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		load_one_good(&cfg, "DD_PROFILING_MAX_MEMORY", ok[i].in);
		ck_assert_msg(cfg.max_memory == ok[i].bytes,
			      "MAX_MEMORY=\"%s\": expected %llu, seen %llu", ok[i].in,
			      (unsigned long long)ok[i].bytes, (unsigned long long)cfg.max_memory);
	}
}
END_TEST

START_TEST(test_bad_max_memory_warns_once_and_uses_default)
{
	static const char *const bad[] = {
	    "abc",
	    "1T",
	    "255K",
	    "17G",
	    "-1M",
	    "1.5M",
	    "1 M",
	    "M",
	    "64MBB",
	    "0",
	    "0x100000",
	    "16777217K",
	    "18446744073709551615G",
	    "99999999999999999999999",
	};
	struct config cfg;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_MAX_MEMORY", bad[i]);
		ck_assert_msg(cfg.max_memory == 64 * MIB,
			      "MAX_MEMORY=\"%s\": expected default %llu, seen %llu", bad[i],
			      64 * MIB, (unsigned long long)cfg.max_memory);
	}
	ck_assert_ptr_nonnull(strstr(seen_stderr, "using the default 64MiB"));
}
END_TEST

/* DD_PROFILING_ALLOCATION_ENABLED and DD_PROFILING_HEAP_ENABLED turn the two memory
 * profiles on; DD_PROFILING_HEAP_SAMPLE_SIZE is their mean interval, a size like
 * DD_PROFILING_MAX_MEMORY's; a bad one warns and keeps 512 KiB. */
START_TEST(test_allocation_settings_and_a_bad_interval_keeps_the_default)
{
	struct config cfg;
	load_one_good(&cfg, "DD_PROFILING_ALLOCATION_ENABLED", "true");
	ck_assert(cfg.allocation_enabled && !cfg.heap_enabled);
	load_one_good(&cfg, "DD_PROFILING_HEAP_ENABLED", "1");
	ck_assert(cfg.heap_enabled && !cfg.allocation_enabled);
	load_one_good(&cfg, "DD_PROFILING_HEAP_SAMPLE_SIZE", "64K");
	ck_assert_uint_eq(cfg.alloc_interval, 64 << 10);
	load_one_good(&cfg, "DD_PROFILING_HEAP_SAMPLE_SIZE", "1");
	ck_assert_uint_eq(cfg.alloc_interval, 1);
	static const char *const bad[] = {"0", "-5", "abc", "2T", "1.5M"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_HEAP_SAMPLE_SIZE", bad[i]);
		ck_assert_msg(cfg.alloc_interval == 512 << 10, "\"%s\": %llu", bad[i],
			      (unsigned long long)cfg.alloc_interval);
	}
	ck_assert_ptr_nonnull(strstr(seen_stderr, "DD_PROFILING_HEAP_SAMPLE_SIZE"));
}
END_TEST

/* DD_PROFILING_HEAP_TABLE_SIZE sizes the live heap's table: 8 MiB by default, 64 KiB to
 * 1 GiB; a bad one warns and keeps the default. */
START_TEST(test_heap_table_size_and_a_bad_one_keeps_the_default)
{
	struct config cfg;
	load_one_good(&cfg, "DD_PROFILING_HEAP_ENABLED", "true");
	ck_assert_uint_eq(cfg.heap_table_bytes, 8 << 20);
	load_one_good(&cfg, "DD_PROFILING_HEAP_TABLE_SIZE", "64M");
	ck_assert_uint_eq(cfg.heap_table_bytes, 64 << 20);
	load_one_good(&cfg, "DD_PROFILING_HEAP_TABLE_SIZE", "64K");
	ck_assert_uint_eq(cfg.heap_table_bytes, 64 << 10);
	static const char *const bad[] = {"0", "63K", "2G", "-1", "lots"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_HEAP_TABLE_SIZE", bad[i]);
		ck_assert_msg(cfg.heap_table_bytes == 8 << 20, "\"%s\": %llu", bad[i],
			      (unsigned long long)cfg.heap_table_bytes);
	}
	ck_assert_ptr_nonnull(strstr(seen_stderr, "using the default 8MiB"));
}
END_TEST

/* DD_PROFILING_LOCK_ENABLED is off by default; DD_PROFILING_LOCK_INTERVAL is seconds
 * with decimals, 10 ms by default, 1 us to 60 s; a bad one warns and keeps the default. */
START_TEST(test_lock_profile_switch_and_interval)
{
	struct config cfg;
	load_one_good(&cfg, "DD_PROFILING_LOCK_ENABLED", "false");
	ck_assert(!cfg.lock_enabled);
	ck_assert_uint_eq(cfg.lock_interval_ns, 10000000);
	load_one_good(&cfg, "DD_PROFILING_LOCK_ENABLED", "true");
	ck_assert(cfg.lock_enabled);
	load_one_good(&cfg, "DD_PROFILING_LOCK_INTERVAL", "0.00005");
	ck_assert_uint_eq(cfg.lock_interval_ns, 50000);
	load_one_good(&cfg, "DD_PROFILING_LOCK_INTERVAL", "2");
	ck_assert_uint_eq(cfg.lock_interval_ns, 2000000000ULL);
	static const char *const bad[] = {"0", "0.0000001", "61", "-1", "10ms"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_LOCK_INTERVAL", bad[i]);
		ck_assert_msg(cfg.lock_interval_ns == 10000000, "\"%s\": %llu", bad[i],
			      (unsigned long long)cfg.lock_interval_ns);
	}
}
END_TEST

/* DD_PROFILING_WALL_ENABLED is off by default; DD_PROFILING_WALL_INTERVAL is seconds
 * with decimals, 10 ms by default, 100 us to 60 s; a bad one warns and keeps the
 * default. */
START_TEST(test_wall_profile_switch_and_interval)
{
	struct config cfg;
	load_one_good(&cfg, "DD_PROFILING_WALL_ENABLED", "false");
	ck_assert(!cfg.wall_enabled);
	ck_assert_uint_eq(cfg.wall_interval_ns, 10000000);
	load_one_good(&cfg, "DD_PROFILING_WALL_ENABLED", "true");
	ck_assert(cfg.wall_enabled);
	load_one_good(&cfg, "DD_PROFILING_WALL_INTERVAL", "0.001");
	ck_assert_uint_eq(cfg.wall_interval_ns, 1000000);
	load_one_good(&cfg, "DD_PROFILING_WALL_INTERVAL", "0.0001");
	ck_assert_uint_eq(cfg.wall_interval_ns, 100000);
	static const char *const bad[] = {"0", "0.00005", "61", "-1", "10ms"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_WALL_INTERVAL", bad[i]);
		ck_assert_msg(cfg.wall_interval_ns == 10000000, "\"%s\": %llu", bad[i],
			      (unsigned long long)cfg.wall_interval_ns);
	}
}
END_TEST

/* Signals that would change how the program stops or runs: by name, and every number
 * below SIGRTMIN but SIGPROF's (glibc's reserved real-time signals included). */
START_TEST(test_refused_signal_warns_once_and_uses_auto)
{
	static const char *const bad[] = {
	    "SIGINT",  "SIGTERM",   "SIGHUP",  "SIGQUIT",   "SIGKILL", "9",	   "STOP",
	    "SIGSEGV", "SIGBUS",    "SIGFPE",  "SIGILL",    "SIGCHLD", "SIGPIPE",  "SIGCONT",
	    "SIGTSTP", "SIGTTIN",   "SIGTTOU", "SIGABRT",   "SIGIOT",  "SIGTRAP",  "SIGSYS",
	    "SIGALRM", "SIGVTALRM", "SIGUSR1", "usr2",	    "SIGURG",  "SIGWINCH", "SIGIO",
	    "SIGXCPU", "SIGXFSZ",   "SIGPWR",  "SIGSTKFLT", "32",      "33",
	};
	struct config cfg;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_SIGNAL", bad[i]);
		ck_assert_msg(cfg.signal == 0, "SIGNAL=\"%s\": expected auto (0), seen %d", bad[i],
			      cfg.signal);
	}
	ck_assert_ptr_nonnull(strstr(seen_stderr, "DD_PROFILING_SIGNAL=\"33\""));
	ck_assert_ptr_nonnull(strstr(seen_stderr, "using the default 0 (automatic"));
	char num[16];
	for (int sig = 1; sig < SIGRTMIN; sig++) {
		if (sig == SIGPROF)
			continue;
		snprintf(num, sizeof(num), "%d", sig);
		load_one_bad(&cfg, "DD_PROFILING_SIGNAL", num);
		ck_assert_msg(cfg.signal == 0, "SIGNAL=%d: expected auto (0), seen %d", sig,
			      cfg.signal);
	}
}
END_TEST

START_TEST(test_bad_signal_warns_once_and_uses_auto)
{
	static const char *const bad[] = {
	    "65",
	    "-1",
	    "12abc",
	    "SIGFOO",
	    "SIG",
	    "SIGRTMIN+99",
	    "SIGRTMIN-1",
	    "SIGRTMAX+1",
	    "SIGRTMIN+",
	    "SIGUSR2 ",
	    "99999999999999999999999",
	};
	struct config cfg;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		load_one_bad(&cfg, "DD_PROFILING_SIGNAL", bad[i]);
		ck_assert_msg(cfg.signal == 0, "SIGNAL=\"%s\": expected auto (0), seen %d", bad[i],
			      cfg.signal);
	}
}
END_TEST

START_TEST(test_log_level_debug_is_applied)
{
	struct config cfg;
	load_one_good(&cfg, "DD_PROFILING_LOG_LEVEL", "debug");
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_DEBUG);
	ck_assert_int_eq(log_get_level(), LOG_LEVEL_DEBUG);
}
END_TEST

START_TEST(test_log_level_names_are_case_insensitive)
{
	static const struct {
		const char *in;
		enum log_level level;
	} ok[] = {
	    {"ERROR", LOG_LEVEL_ERROR}, {"Warn", LOG_LEVEL_WARN},   {"warning", LOG_LEVEL_WARN},
	    {"INFO", LOG_LEVEL_INFO},	{"DeBuG", LOG_LEVEL_DEBUG},
	};
	struct config cfg;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		log_set_level(LOG_LEVEL_WARN);
		load_one_good(&cfg, "DD_PROFILING_LOG_LEVEL", ok[i].in);
		ck_assert_msg(cfg.log_level == ok[i].level && log_get_level() == ok[i].level,
			      "LOG_LEVEL=\"%s\": expected %d, seen %d (logger at %d)", ok[i].in,
			      ok[i].level, cfg.log_level, log_get_level());
	}
}
END_TEST

START_TEST(test_bad_log_level_warns_once_and_uses_warn)
{
	struct config cfg;
	log_set_level(LOG_LEVEL_DEBUG); /* a leftover level must not survive a reload */
	load_one_bad(&cfg, "DD_PROFILING_LOG_LEVEL", "verbose");
	ck_assert_int_eq(cfg.log_level, LOG_LEVEL_WARN);
	ck_assert_int_eq(log_get_level(), LOG_LEVEL_WARN);
}
END_TEST

START_TEST(test_error_log_level_silences_warnings_but_counts_them)
{
	struct config cfg;
	fake_set("DD_PROFILING_LOG_LEVEL", "error");
	fake_set("DD_PROFILING_CPU_HZ", "abc");
	fake_set("DD_PROFILING_MAX_MEMORY", "1T");
	ck_assert_int_eq(load(&cfg), 2);
	ck_assert_str_eq(seen_stderr, "");
	ck_assert_uint_eq(cfg.cpu_hz, 99);
}
END_TEST

START_TEST(test_service_env_version_are_copied)
{
	struct config cfg;
	fake_set("DD_SERVICE", "checkout");
	fake_set("DD_ENV", "prod");
	fake_set("DD_VERSION", "1.2.3");
	ck_assert_int_eq(load(&cfg), 0);
	ck_assert_str_eq(cfg.service, "checkout");
	ck_assert_str_eq(cfg.env, "prod");
	ck_assert_str_eq(cfg.version, "1.2.3");
}
END_TEST

START_TEST(test_too_long_service_is_truncated_with_one_warning)
{
	static char name[CONFIG_TAG_MAX + 50];
	struct config cfg;
	memset(name, 's', sizeof(name) - 1);
	load_one_bad(&cfg, "DD_SERVICE", name);
	ck_assert_uint_eq(strlen(cfg.service), CONFIG_TAG_MAX - 1);
	ck_assert_int_eq(memcmp(cfg.service, name, CONFIG_TAG_MAX - 1), 0);
	ck_assert_ptr_nonnull(strstr(seen_stderr, "DD_SERVICE=\"sss"));
	ck_assert_ptr_nonnull(strstr(seen_stderr, "using its first 255 bytes"));
}
END_TEST

START_TEST(test_truncation_does_not_cut_a_utf8_character)
{
	static char version[CONFIG_TAG_MAX + 1];
	struct config cfg;
	memset(version, 'v', CONFIG_TAG_MAX - 2);
	strcpy(version + CONFIG_TAG_MAX - 2, "\xc3\xa9"); /* "é" straddles the cut */
	load_one_bad(&cfg, "DD_VERSION", version);
	ck_assert_uint_eq(strlen(cfg.version), CONFIG_TAG_MAX - 2);
}
END_TEST

START_TEST(test_tags_are_normalized_to_key_colon_value)
{
	struct config cfg;
	load_one_bad(&cfg, "DD_TAGS", "a:b, c=d,,e");
	ck_assert_str_eq(cfg.tags, "a:b,c:d");
	ck_assert_ptr_nonnull(strstr(seen_stderr, "DD_TAGS: dropped 1 of 3 entries: 1 not "
						  "key:value or key=value (the first: \"e\")"));
	load_one_good(&cfg, "DD_TAGS", "  team:prof\tregion=eu  ,zone:a ");
	ck_assert_str_eq(cfg.tags, "team:prof,region:eu,zone:a");
}
END_TEST

START_TEST(test_tag_value_may_contain_separators)
{
	struct config cfg;
	load_one_good(&cfg, "DD_TAGS", "url:http://x/?q=1,k=v:w");
	ck_assert_str_eq(cfg.tags, "url:http://x/?q=1,k:v:w");
}
END_TEST

START_TEST(test_tags_without_key_or_value_are_dropped_with_one_warning)
{
	struct config cfg;
	load_one_bad(&cfg, "DD_TAGS", ":v k: e= ok:1 =x");
	ck_assert_str_eq(cfg.tags, "ok:1");
	ck_assert_ptr_nonnull(strstr(seen_stderr, "DD_TAGS: dropped 4 of 5 entries: 4 not"));
	/* Ten bad entries among two good ones: one line, naming DD_TAGS and the count. */
	load_one_bad(&cfg, "DD_TAGS", "a:1 b c d e f g h i j k z=2");
	ck_assert_str_eq(cfg.tags, "a:1,z:2");
	ck_assert_ptr_nonnull(strstr(seen_stderr, "DD_TAGS: dropped 10 of 12 entries: 10 not "
						  "key:value or key=value (the first: \"b\"); "
						  "using the other 2"));
	ck_assert_ptr_eq(strchr(seen_stderr, '\n'), seen_stderr + strlen(seen_stderr) - 1);
}
END_TEST

START_TEST(test_tags_overflow_keeps_whole_tags_and_warns_once)
{
	static char tags[3 * CONFIG_TAGS_MAX];
	struct config cfg;
	size_t n = 0;
	while (n + sizeof("key:value,") < sizeof(tags)) /* ten bytes a tag */
		n += (size_t)sprintf(tags + n, "key:value,");
	strcpy(tags + n, "bad"); /* and one malformed entry: still one line */
	load_one_bad(&cfg, "DD_TAGS", tags);
	size_t len = strlen(cfg.tags);
	ck_assert_uint_le(len, CONFIG_TAGS_MAX - 1);
	ck_assert_uint_eq((len + 1) % 10, 0); /* whole "key:value" tags only */
	ck_assert_uint_gt(len, CONFIG_TAGS_MAX - 11);
	size_t kept = (len + 1) / 10, total = n / 10 + 1;
	char want[320];
	snprintf(want, sizeof(want),
		 "DD_TAGS: dropped %zu of %zu entries: 1 not key:value or key=value (the first: "
		 "\"bad\"), %zu past the %d-byte limit once normalized (from \"key:value\" on); "
		 "using the other %zu",
		 total - kept, total, total - kept - 1, CONFIG_TAGS_MAX - 1, kept);
	ck_assert_msg(strstr(seen_stderr, want) != NULL, "expected \"%s\" in \"%s\"", want,
		      seen_stderr);
}
END_TEST

START_TEST(test_control_characters_in_a_bad_value_keep_the_warning_on_one_line)
{
	struct config cfg;
	load_one_bad(&cfg, "DD_PROFILING_CPU_HZ", "12\n34\r\x1b[31m");
	ck_assert_ptr_nonnull(strstr(seen_stderr, "\"12?34??[31m\""));
	ck_assert_ptr_eq(strchr(seen_stderr, '\n'), seen_stderr + strlen(seen_stderr) - 1);
}
END_TEST

START_TEST(test_each_bad_variable_adds_one_warning)
{
	struct config cfg;
	fake_set("DD_PROFILING_ENABLED", "maybe");
	fake_set("DD_PROFILING_CPU_HZ", "0");
	fake_set("DD_PROFILING_UPLOAD_PERIOD", "inf");
	fake_set("DD_PROFILING_MAX_MEMORY", "1T");
	fake_set("DD_PROFILING_SIGNAL", "SIGKILL");
	fake_set("DD_PROFILING_LOG_LEVEL", "loud");
	fake_set("DD_TAGS", "e f g");
	fake_set("DD_SERVICE", "ok");
	ck_assert_int_eq(load(&cfg), 7);
	cfg.service[0] = '\0'; /* the one valid value */
	assert_defaults(&cfg);
}
END_TEST

static int lookups; /* calls of counting_getenv */

static const char *counting_getenv(const char *name)
{
	lookups++;
	return fake_getenv(name);
}

/* config_load_with(secure) with stderr captured into seen_stderr. */
static int load_secure(struct config *cfg, bool secure)
{
	FILE *tmp = tmpfile();
	ck_assert_ptr_nonnull(tmp);
	int saved = dup(STDERR_FILENO);
	ck_assert_int_eq(dup2(fileno(tmp), STDERR_FILENO), STDERR_FILENO);
	memset(cfg, 0, sizeof(*cfg));
	lookups = 0;
	int w = config_load_with(cfg, counting_getenv, secure);
	ck_assert_int_eq(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	rewind(tmp);
	size_t n = fread(seen_stderr, 1, sizeof(seen_stderr) - 1, tmp);
	seen_stderr[n] = '\0';
	fclose(tmp);
	return w;
}

START_TEST(test_secure_execution_reads_nothing_prints_nothing_and_stays_off)
{
	fake_set("DD_PROFILING_ENABLED", "true");
	fake_set("DD_PROFILING_LOG_LEVEL", "debug");
	fake_set("DD_PROFILING_OUTPUT_DIR", "/tmp/profiles");
	fake_set("DD_PROFILING_CPU_HZ", "many");
	struct config cfg;
	int w = load_secure(&cfg, true);
	ck_assert_msg(!cfg.enabled, "enabled in secure execution");
	ck_assert_msg(lookups == 0, "%d variables read in secure execution", lookups);
	ck_assert_int_eq(w, 0);
	ck_assert_msg(seen_stderr[0] == '\0', "printed in secure execution: %s", seen_stderr);
	ck_assert_str_eq(cfg.output_dir, "");
	ck_assert_int_eq(log_get_level(), LOG_LEVEL_WARN);
	/* The control: the same environment otherwise is read, on, and warned about. */
	w = load_secure(&cfg, false);
	ck_assert(cfg.enabled);
	ck_assert_int_gt(lookups, 20);
	ck_assert_int_eq(w, 1);
	ck_assert_str_eq(cfg.output_dir, "/tmp/profiles");
	log_set_level(LOG_LEVEL_WARN);
	/* This test process is not in secure execution: config_load reads as usual. */
	ck_assert_uint_eq(getauxval(AT_SECURE), 0);
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, test_defaults_when_nothing_set);
	tcase_add_test(tc, test_empty_values_count_as_unset);
	tcase_add_test(tc, test_enabled_accepts_boolean_spellings_in_any_case);
	tcase_add_test(tc, test_bad_enabled_warns_once_and_uses_default);
	tcase_add_test(tc, test_cpu_hz_accepts_integers_in_range);
	tcase_add_test(tc, test_bad_cpu_hz_warns_once_and_uses_default);
	tcase_add_test(tc, test_bad_cpu_hz_warning_names_variable_value_and_default);
	tcase_add_test(tc, test_upload_period_accepts_decimal_seconds);
	tcase_add_test(tc, test_bad_upload_period_warns_once_and_uses_default);
	tcase_add_test(tc, test_bad_upload_period_warning_names_variable_value_and_default);
	tcase_add_test(tc, test_output_dir_is_copied);
	tcase_add_test(tc, test_relative_output_dir_is_resolved_at_start);
	tcase_add_test(tc, test_too_long_output_dir_warns_once_and_disables_export);
	tcase_add_test(tc, test_unwind_cache_dir_follows_the_xdg_rule_and_can_be_turned_off);
	tcase_add_test(tc, test_max_memory_accepts_binary_suffixes_in_any_case);
	tcase_add_test(tc, test_bad_max_memory_warns_once_and_uses_default);
	tcase_add_test(tc, test_allocation_settings_and_a_bad_interval_keeps_the_default);
	tcase_add_test(tc, test_heap_table_size_and_a_bad_one_keeps_the_default);
	tcase_add_test(tc, test_refused_signal_warns_once_and_uses_auto);
	tcase_add_test(tc, test_bad_signal_warns_once_and_uses_auto);
	tcase_add_test(tc, test_log_level_debug_is_applied);
	tcase_add_test(tc, test_log_level_names_are_case_insensitive);
	tcase_add_test(tc, test_bad_log_level_warns_once_and_uses_warn);
	tcase_add_test(tc, test_error_log_level_silences_warnings_but_counts_them);
	tcase_add_test(tc, test_service_env_version_are_copied);
	tcase_add_test(tc, test_too_long_service_is_truncated_with_one_warning);
	tcase_add_test(tc, test_truncation_does_not_cut_a_utf8_character);
	tcase_add_test(tc, test_tags_are_normalized_to_key_colon_value);
	tcase_add_test(tc, test_tag_value_may_contain_separators);
	tcase_add_test(tc, test_tags_without_key_or_value_are_dropped_with_one_warning);
	tcase_add_test(tc, test_tags_overflow_keeps_whole_tags_and_warns_once);
	tcase_add_test(tc, test_control_characters_in_a_bad_value_keep_the_warning_on_one_line);
	tcase_add_test(tc, test_each_bad_variable_adds_one_warning);
	tcase_add_test(tc, test_lock_profile_switch_and_interval);
	tcase_add_test(tc, test_wall_profile_switch_and_interval);
	tcase_add_test(tc, test_secure_execution_reads_nothing_prints_nothing_and_stays_off);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(config_suite());
}
