/*
 * config.h - the configuration of libddprof, parsed once from the environment.
 *
 * Owns: reading and validating every environment variable the agent uses. Nothing else
 * in libddprof calls getenv. The result is one immutable struct.
 * Context: called once from the constructor (application's main thread, before main),
 * and from unit tests with a fake environment.
 * Invariant: each bad variable yields one warning naming it and the default used (a
 * tag list: one line giving how many entries were dropped), and the default is used;
 * parsing never fails. In secure execution (AT_SECURE: setuid, setgid, file
 * capabilities) no variable is read and the agent is off.
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
/* Above 10 kHz the handler's cost dominates and the kernel tick (CONFIG_HZ, 100 to
 * 1000 Hz) can't deliver that rate anyway: samples would only be weighted by overruns. */
#define CONFIG_MAX_CPU_HZ 10000
#define CONFIG_DEFAULT_UPLOAD_PERIOD_NS (60ULL * 1000000000ULL)
/* Shorter periods would spend more time serializing than sampling. */
#define CONFIG_MIN_UPLOAD_PERIOD_NS (100ULL * 1000000ULL)
/* Per-profile ceiling; the agent holds two profiles (red/black). */
#define CONFIG_DEFAULT_MAX_MEMORY (64ULL << 20)
/* Below this not even a small profile fits; above it we refuse to reserve address space. */
#define CONFIG_MIN_MAX_MEMORY (256ULL << 10)
#define CONFIG_MAX_MAX_MEMORY (16ULL << 30)
/* DD_PROFILING_HEAP_SAMPLE_SIZE: the mean bytes between allocation samples (the name
 * Datadog's profilers use for it); 512 KiB as in Go, jemalloc and ddprof. */
#define CONFIG_DEFAULT_ALLOC_INTERVAL (512ULL << 10)
#define CONFIG_MIN_ALLOC_INTERVAL 1ULL
#define CONFIG_MAX_ALLOC_INTERVAL (1ULL << 40)
/* DD_PROFILING_HEAP_TABLE_SIZE: the live heap's table, mapped once and never grown
 * (agent/alloc/live_table.h). 8 MiB hold about 250 000 live samples: 125 GiB of live
 * heap at the default interval. The whole table is resident in a process that calls
 * mlockall, hence a default well below the largest a user may ask for. */
#define CONFIG_DEFAULT_HEAP_TABLE (8ULL << 20)
/* DD_PROFILING_LOCK_INTERVAL: the mean time waited for locks between lock samples,
 * 10 ms (agent/lock/lock_sample.h says why); from 1 us (a sample at nearly every
 * contended acquisition) to 60 s. */
#define CONFIG_DEFAULT_LOCK_INTERVAL_NS (10ULL * 1000000ULL)
#define CONFIG_MIN_LOCK_INTERVAL_NS 1000ULL
#define CONFIG_MAX_LOCK_INTERVAL_NS (60ULL * 1000000000ULL)
/* DD_PROFILING_WALL_INTERVAL: the mean time a thread waits between its wall samples,
 * 10 ms (agent/wall/wall_clock.h); from 100 us to 60 s. */
#define CONFIG_DEFAULT_WALL_INTERVAL_NS (10ULL * 1000000ULL)
#define CONFIG_MIN_WALL_INTERVAL_NS 100000ULL
#define CONFIG_MAX_WALL_INTERVAL_NS (60ULL * 1000000000ULL)
#define CONFIG_MIN_HEAP_TABLE (64ULL << 10)
#define CONFIG_MAX_HEAP_TABLE (1ULL << 30)
#define CONFIG_TAG_MAX 256   /* buffer of DD_SERVICE, DD_ENV, DD_VERSION (incl. NUL) */
#define CONFIG_TAGS_MAX 2048 /* buffer of DD_TAGS (incl. NUL) */
#define CONFIG_PATH_MAX 1024
#define CONFIG_URL_MAX 1024   /* any URL variable (incl. NUL) */
#define CONFIG_SECRET_MAX 256 /* DD_API_KEY, Pyroscope token/password (incl. NUL) */
#define CONFIG_DEFAULT_AGENT_HOST "localhost"
#define CONFIG_DEFAULT_AGENT_PORT 8126
#define CONFIG_DEFAULT_SITE "datadoghq.com"
/* The Datadog libraries' default: long enough for a slow agent, short enough that a
 * hung connection costs a fraction of a 60 s period. */
#define CONFIG_DEFAULT_UPLOAD_TIMEOUT_NS (10ULL * 1000000000ULL)
#define CONFIG_MIN_UPLOAD_TIMEOUT_NS (100ULL * 1000000ULL)
#define CONFIG_MAX_UPLOAD_TIMEOUT_NS (3600ULL * 1000000000ULL)
/* What a process may wait at exit for its last profile: short, the user is waiting. */
#define CONFIG_DEFAULT_EXIT_FLUSH_TIMEOUT_NS (2ULL * 1000000000ULL)
#define CONFIG_MAX_EXIT_FLUSH_TIMEOUT_NS (60ULL * 1000000000ULL)

struct config {
	bool enabled;			  /* DD_PROFILING_ENABLED, default true */
	unsigned cpu_hz;		  /* DD_PROFILING_CPU_HZ, 1..10000, default 99 */
	uint64_t upload_period_ns;	  /* DD_PROFILING_UPLOAD_PERIOD (s, decimals), >= 0.1 s */
	char output_dir[CONFIG_PATH_MAX]; /* DD_PROFILING_OUTPUT_DIR, "" = no file export */
	/* DD_PROFILING_UNWIND_CACHE_DIR ("" = off); unset: $XDG_CACHE_HOME/libddprof, else
	 * $HOME/.cache/libddprof, else off (agent/unwind/cfi_cache.h). */
	char unwind_cache_dir[CONFIG_PATH_MAX];
	uint64_t max_memory;	 /* DD_PROFILING_MAX_MEMORY, bytes; suffixes K, M, G (and KiB..) */
	bool allocation_enabled; /* DD_PROFILING_ALLOCATION_ENABLED, default false */
	bool heap_enabled;	 /* DD_PROFILING_HEAP_ENABLED, default false */
	uint64_t alloc_interval; /* DD_PROFILING_HEAP_SAMPLE_SIZE, bytes (suffixes as above) */
	uint64_t heap_table_bytes; /* DD_PROFILING_HEAP_TABLE_SIZE, bytes (suffixes as above) */
	bool lock_enabled;	   /* DD_PROFILING_LOCK_ENABLED, default false */
	uint64_t lock_interval_ns; /* DD_PROFILING_LOCK_INTERVAL (s, decimals), 1 us..60 s */
	bool wall_enabled;	   /* DD_PROFILING_WALL_ENABLED, default false */
	/* DD_PROFILING_FLUSH_ON_SIGNAL, default false: the final profile of a process that
	 * dies of SIGTERM, SIGINT or SIGHUP (agent.h's agent_watch_deaths says what it
	 * changes) */
	bool flush_on_signal;
	uint64_t wall_interval_ns; /* DD_PROFILING_WALL_INTERVAL (s, decimals), 100 us..60 s */
	/* DD_PROFILING_SIGNAL: 0 = choose (SIGPROF unless taken), else SIGPROF or a signo
	 * in SIGRTMIN..SIGRTMAX (config.c: signal_allowed) */
	int signal;
	enum log_level log_level;     /* DD_PROFILING_LOG_LEVEL: error|warn(ing)|info|debug */
	char service[CONFIG_TAG_MAX]; /* DD_SERVICE */
	char env[CONFIG_TAG_MAX];     /* DD_ENV */
	char version[CONFIG_TAG_MAX]; /* DD_VERSION */
	char tags[CONFIG_TAGS_MAX];   /* DD_TAGS, normalized to "k:v,k:v" */

	/*
	 * Exporters (several may be on; see the rule below). Secrets (api_key,
	 * pyroscope_token, pyroscope_password) are never logged, quoted in a warning or
	 * written to a file.
	 * Rule: the Datadog agent exporter is on when DD_TRACE_AGENT_URL, DD_AGENT_HOST or
	 * DD_TRACE_AGENT_PORT is set, or else when no other destination is asked for (no
	 * DD_PROFILING_OUTPUT_DIR, no PYROSCOPE_SERVER_ADDRESS, no
	 * DD_PROFILING_AGENTLESS=true), as in every Datadog library. Agentless is on with
	 * DD_PROFILING_AGENTLESS=true and a usable DD_API_KEY and https URL; when it is
	 * asked for but unusable, one warning says why and no Datadog exporter runs.
	 */
	bool export_agent;
	bool export_agentless;
	bool export_pyroscope; /* PYROSCOPE_SERVER_ADDRESS set and valid */
	/* DD_TRACE_AGENT_URL (http://, https:// or unix:///path), else
	 * http://DD_AGENT_HOST:DD_TRACE_AGENT_PORT; no trailing '/'. */
	char agent_url[CONFIG_URL_MAX];
	/* DD_PROFILING_AGENTLESS_URL (https only, for tests and proxies), else
	 * https://intake.profile.DD_SITE/api/v2/profile. */
	char agentless_url[CONFIG_URL_MAX];
	char api_key[CONFIG_SECRET_MAX];	 /* DD_API_KEY */
	char site[CONFIG_TAG_MAX];		 /* DD_SITE, default datadoghq.com */
	uint64_t upload_timeout_ns;		 /* DD_PROFILING_UPLOAD_TIMEOUT (s), per request */
	uint64_t exit_flush_timeout_ns;		 /* DD_PROFILING_EXIT_FLUSH_TIMEOUT (s), 0..60 */
	char pyroscope_url[CONFIG_URL_MAX];	 /* PYROSCOPE_SERVER_ADDRESS, no trailing '/' */
	char pyroscope_app[CONFIG_TAG_MAX];	 /* PYROSCOPE_APPLICATION_NAME ("" = default) */
	char pyroscope_token[CONFIG_SECRET_MAX]; /* PYROSCOPE_AUTH_TOKEN */
	char pyroscope_user[CONFIG_TAG_MAX];	 /* PYROSCOPE_BASIC_AUTH_USER */
	char pyroscope_password[CONFIG_SECRET_MAX]; /* PYROSCOPE_BASIC_AUTH_PASSWORD */
	char pyroscope_tenant[CONFIG_TAG_MAX];	    /* PYROSCOPE_TENANT_ID */
	char pyroscope_tags[CONFIG_TAGS_MAX];	    /* PYROSCOPE_TAGS, normalized to "k:v,k:v" */
};

/* Source of variables: getenv in production, a table in tests. Pass NULL for the process
 * environment (config.c reads it with secure_getenv: libc's getenv returns char *, so it
 * does not convert to this type without a cast). */
typedef const char *(*config_getenv_fn)(const char *name);

/*
 * Fills *out from the variables get() returns. Never fails: each bad variable logs one
 * warning naming it and the default, and the default is used. Returns the number of
 * warnings given (0 when every value was valid). In a process running in secure
 * execution (getauxval(AT_SECURE): a setuid or setgid program, file capabilities), the
 * environment is whoever started it: nothing is read, nothing printed, and
 * out->enabled is false (config_load_with decides that from its argument, for tests).
 * *out must be zero-filled (static storage is): only the fields that are not zero are
 * written, so the constructor touches only their pages of this ~12 KiB struct (each
 * page a process touches first costs it a fault: 3 to 4 faults fewer at start-up).
 */
int config_load(struct config *out, config_getenv_fn get);
int config_load_with(struct config *out, config_getenv_fn get, bool secure_execution);

/* dst = src without a "user:password@" part (which may hold a secret), for logs. */
const char *config_redact_url(char dst[CONFIG_URL_MAX], const char *src);

/* Defaults only, no environment read. */
void config_defaults(struct config *out);

#endif
