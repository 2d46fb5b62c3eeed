/*
 * clock.h - time helpers.
 * Context: any, including signal handlers (clock_gettime is async-signal-safe).
 */
#ifndef DDPROF_COMMON_CLOCK_H
#define DDPROF_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

#define NS_PER_SEC 1000000000ULL

/* async-signal-safe */
static inline uint64_t timespec_ns(const struct timespec *ts)
{
	return (uint64_t)ts->tv_sec * NS_PER_SEC + (uint64_t)ts->tv_nsec;
}

/* async-signal-safe */
static inline uint64_t clock_now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return timespec_ns(&ts);
}

static inline struct timespec clock_ns_to_timespec(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / NS_PER_SEC), (long)(ns % NS_PER_SEC)};
	return ts;
}

#endif
