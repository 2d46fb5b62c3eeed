/*
 * log.c - the one logger of libddprof (see log.h).
 *
 * Context: any non-signal context. The threshold is a relaxed atomic: it is set once
 * at start-up and a stale read only changes whether one line is printed.
 */
#include "log.h"
#include "common/sys_io.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

/* Longest line we print; longer ones are cut, never split over two writes. */
#define LOG_LINE_MAX 1024

static _Atomic int log_threshold = LOG_LEVEL_WARN;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

void log_set_level(enum log_level level)
{
	atomic_store_explicit(&log_threshold, (int)level, memory_order_relaxed);
}

enum log_level log_get_level(void)
{
	return (enum log_level)atomic_load_explicit(&log_threshold, memory_order_relaxed);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	if ((int)level > atomic_load_explicit(&log_threshold, memory_order_relaxed))
		return;
	int saved_errno = errno;
	char line[LOG_LINE_MAX];
	int n = snprintf(line, sizeof(line), "libddprof: %s: ", level_names[level]);
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t w = sys_write(STDERR_FILENO, line, len);
	(void)w; /* nowhere to report a failed log write */
	errno = saved_errno;
}
