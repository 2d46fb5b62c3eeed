/*
 * config_env.h - the fake environment and stderr capture shared by the config suites
 * (test_config.c, test_config_export.c). Test mains only.
 *
 * load() runs config_load with the fake table, captures stderr into seen_stderr and
 * checks that the number of warning lines printed equals the count returned.
 */
#ifndef DDPROF_TEST_UNIT_CONFIG_ENV_H
#define DDPROF_TEST_UNIT_CONFIG_ENV_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"

#define FAKE_ENV_MAX 16
#define CAPTURE_MAX 8192
#define WARN_PREFIX "libddprof: warning: "

static struct {
	const char *name;
	const char *value;
} fake_env[FAKE_ENV_MAX];
static int fake_count;
static char seen_stderr[CAPTURE_MAX]; /* what the last load() printed */

static inline const char *fake_getenv(const char *name)
{
	for (int i = 0; i < fake_count; i++) {
		if (strcmp(fake_env[i].name, name) == 0)
			return fake_env[i].value;
	}
	return NULL;
}

static inline void fake_clear(void)
{
	fake_count = 0;
}

static inline void fake_set(const char *name, const char *value)
{
	for (int i = 0; i < fake_count; i++) {
		if (strcmp(fake_env[i].name, name) == 0) {
			fake_env[i].value = value;
			return;
		}
	}
	ck_assert_int_lt(fake_count, FAKE_ENV_MAX);
	fake_env[fake_count].name = name;
	fake_env[fake_count].value = value;
	fake_count++;
}

/* Number of lines of s that are warnings. */
static inline int count_warning_lines(const char *s)
{
	int n = 0;
	for (const char *p = s; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (strncmp(p, WARN_PREFIX, strlen(WARN_PREFIX)) == 0)
			n++;
	}
	return n;
}

/* config_load with the fake environment, stderr captured into seen_stderr. Checks that
 * the warnings printed match the count returned (none print at the error level). */
static inline int load(struct config *cfg)
{
	FILE *tmp = tmpfile();
	ck_assert_msg(tmp != NULL, "tmpfile failed");
	int saved = dup(STDERR_FILENO);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_eq(dup2(fileno(tmp), STDERR_FILENO), STDERR_FILENO);
	memset(cfg, 0, sizeof(*cfg)); /* config_load wants it zero-filled (config.h) */
	int warnings = config_load(cfg, fake_getenv);
	ck_assert_int_eq(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	rewind(tmp);
	size_t n = fread(seen_stderr, 1, sizeof(seen_stderr) - 1, tmp);
	seen_stderr[n] = '\0';
	fclose(tmp);
	int printed = count_warning_lines(seen_stderr);
	int expected = log_get_level() >= LOG_LEVEL_WARN ? warnings : 0;
	ck_assert_msg(printed == expected, "expected %d warning lines, seen %d in \"%s\"", expected,
		      printed, seen_stderr);
	return warnings;
}

/* Loads with only name=value set and checks it gives exactly one warning. */
static inline void load_one_bad(struct config *cfg, const char *name, const char *value)
{
	fake_clear();
	fake_set(name, value);
	int w = load(cfg);
	ck_assert_msg(w == 1, "%s=\"%s\": expected 1 warning, seen %d", name, value, w);
}

/* Loads with only name=value set and checks it gives no warning. */
static inline void load_one_good(struct config *cfg, const char *name, const char *value)
{
	fake_clear();
	fake_set(name, value);
	int w = load(cfg);
	ck_assert_msg(w == 0, "%s=\"%s\": expected 0 warnings, seen %d: %s", name, value, w,
		      seen_stderr);
}

static inline void setup(void)
{
	fake_clear();
	log_set_level(LOG_LEVEL_WARN);
}

#endif
