/*
 * config.h - the configuration of libddprof, parsed once from the environment.
 *
 * Owns: reading and validating every environment variable the agent uses. Nothing else
 * in libddprof calls getenv. The result is one immutable struct.
 * Context: called once from the constructor (application's main thread, before main),
 * and from unit tests with a fake environment.
 * Invariant: each bad value yields one warning (DD_TAGS: one per dropped entry) naming
 * the variable and the default used, and the default is used; parsing never fails.
 * config_load also applies DD_PROFILING_LOG_LEVEL (log_set_level) before warning, so
 * at level "error" warnings are counted but not printed.
 */
#ifndef DDPROF_COMMON_CONFIG_H
#define DDPROF_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"

#define CONFIG_DEFAULT_CPU_HZ 99
#define CONFIG_MIN_CPU_HZ 1
/* Above 10 kHz the handler's cost dominates and the kernel tick (250 Hz here) can't
 * deliver that rate anyway: samples would only be weighted by overruns. */
#define CONFIG_MAX_CPU_HZ 10000
#define CONFIG_DEFAULT_UPLOAD_PERIOD_NS (60ULL * 1000000000ULL)
/* Shorter periods would spend more time serializing than sampling. */
#define CONFIG_MIN_UPLOAD_PERIOD_NS (100ULL * 1000000ULL)
/* Per-profile ceiling; the agent holds two profiles (red/black). */
#define CONFIG_DEFAULT_MAX_MEMORY (64ULL << 20)
/* Below this not even a small profile fits; above it we refuse to reserve address space. */
#define CONFIG_MIN_MAX_MEMORY (256ULL << 10)
#define CONFIG_MAX_MAX_MEMORY (16ULL << 30)
#define CONFIG_TAG_MAX 256 /* buffer of DD_SERVICE, DD_ENV, DD_VERSION (incl. NUL) */
#define CONFIG_TAGS_MAX 2048 /* buffer of DD_TAGS (incl. NUL) */
#define CONFIG_PATH_MAX 1024

struct config {
	bool enabled; /* DD_PROFILING_ENABLED, default true */
	unsigned cpu_hz; /* DD_PROFILING_CPU_HZ, 1..10000, default 99 */
	uint64_t upload_period_ns; /* DD_PROFILING_UPLOAD_PERIOD (s, decimals), >= 0.1 s */
	char output_dir[CONFIG_PATH_MAX]; /* DD_PROFILING_OUTPUT_DIR, "" = no file export */
	uint64_t max_memory; /* DD_PROFILING_MAX_MEMORY, bytes; suffixes K, M, G (and KiB..) */
	int signal; /* DD_PROFILING_SIGNAL: 0 = choose (SIGPROF unless taken), else signo */
	enum log_level log_level; /* DD_PROFILING_LOG_LEVEL: error|warn(ing)|info|debug */
	char service[CONFIG_TAG_MAX]; /* DD_SERVICE */
	char env[CONFIG_TAG_MAX]; /* DD_ENV */
	char version[CONFIG_TAG_MAX]; /* DD_VERSION */
	char tags[CONFIG_TAGS_MAX]; /* DD_TAGS, normalized to "k:v,k:v" */
};

/* Source of variables: getenv in production, a table in tests. Pass NULL for the process
 * environment (config.c reads it with secure_getenv: libc's getenv returns char *, so it
 * does not convert to this type without a cast). */
typedef const char *(*config_getenv_fn)(const char *name);

/*
 * Fills *out from the variables get() returns. Never fails: each bad value logs one
 * warning naming the variable and the default, and the default is used. Returns the
 * number of warnings given (0 when every value was valid).
 */
int config_load(struct config *out, config_getenv_fn get);

/* Defaults only, no environment read. */
void config_defaults(struct config *out);

#endif
