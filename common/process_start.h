/*
 * process_start.h - when the process started, in CLOCK_REALTIME.
 *
 * Owns: reading the start time /proc/self/stat gives (field 22, in clock ticks of the
 * boot-time clock, sysconf(_SC_CLK_TCK) a second) and placing it on the wall clock.
 * Used for a fork child's first profile, whose start its fork handler does not read (a
 * clock read there costs every child pages touched).
 * Context: normal context, any thread; not async-signal-safe (no need).
 */
#ifndef DDPROF_COMMON_PROCESS_START_H
#define DDPROF_COMMON_PROCESS_START_H

#include <stdint.h>

/* CLOCK_REALTIME ns when the calling process started, or 0 when unknown. */
uint64_t process_start_realtime_ns(void);

#endif
