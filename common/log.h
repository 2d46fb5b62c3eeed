/*
 * log.h - the one logger of libddprof.
 *
 * Owns: formatting of warning/info/debug lines to stderr, prefixed "libddprof: ".
 * Context: any thread, never a signal handler (uses vsnprintf). Lines are written
 * with a single write(2) so they do not interleave with the application's output.
 */
#ifndef DDPROF_COMMON_LOG_H
#define DDPROF_COMMON_LOG_H

enum log_level {
	LOG_LEVEL_ERROR = 0,
	LOG_LEVEL_WARN = 1,
	LOG_LEVEL_INFO = 2,
	LOG_LEVEL_DEBUG = 3,
};

/* Sets the threshold; lines above it are discarded. Default LOG_LEVEL_WARN. */
void log_set_level(enum log_level level);
enum log_level log_get_level(void);

/* Writes one line (a newline is appended) if level <= threshold. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
