/*
 * config_values.h - the syntax of the values of the environment variables libddprof
 * reads: plain integers, seconds, sizes with binary suffixes, signal names and numbers,
 * and the signals the profiler may sample with. common/config.c applies them to each
 * variable, with its range and its warning.
 * Context: normal context.
 */
#ifndef DDPROF_COMMON_CONFIG_VALUES_H
#define DDPROF_COMMON_CONFIG_VALUES_H

#include <stdbool.h>
#include <stdint.h>

/* The most seconds config_parse_seconds accepts (a day). */
#define CONFIG_MAX_SECONDS 86400ULL
/* Room for a size printed by config_fmt_size. */
#define CONFIG_NUM_BUF 32

/* A plain decimal integer: at least one digit, no sign, space or base prefix. *end is
 * left after the digits. False if there is no digit or it overflows. */
bool config_parse_u64(const char *s, uint64_t *out, char **end);
/* "60", "0.5", "1.25", ".5" seconds to nanoseconds, exactly and without the locale's
 * decimal point; digits past the nanosecond are ignored. Rejects signs, exponents, nan,
 * inf and anything above CONFIG_MAX_SECONDS. */
bool config_parse_seconds(const char *s, uint64_t *ns);
/* An integer with an optional suffix K, M or G, alone or followed by B or iB, any case;
 * all are powers of 1024 (KB == KiB). */
bool config_parse_size(const char *s, uint64_t *bytes);
/* Bytes in the largest binary unit that divides them exactly, "64MiB". */
const char *config_fmt_size(char buf[CONFIG_NUM_BUF], uint64_t bytes);
/* A number 0..SIGRTMAX or a name (SIG prefix optional, any case; RTMIN+n, RTMAX-n):
 * its number, or -1. */
int config_parse_signal(const char *s);
/* Whether the profiler may sample with signo (config_values.c says why so few). */
bool config_signal_allowed(int signo);

#endif
