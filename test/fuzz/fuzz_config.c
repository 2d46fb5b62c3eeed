/*
 * fuzz_config.c - libFuzzer target: the environment variables the agent reads
 * (common/config.c), given arbitrary values.
 *
 * Input: one flag byte (bit 0: secure execution), then records, each a selector byte
 * (which variable: byte % NVARS) followed by its value up to the next NUL byte or the
 * end (a later record for the same variable wins; environment values hold no NUL).
 * config_load_with runs on that environment; the logger is replaced here (common/log.c
 * is not linked) so that every line is seen, whatever the threshold. Checked:
 *   - config.c reads no variable missing from the list below (each is fuzzed);
 *   - every value is within its documented bounds, every string terminated in its
 *     buffer, every tag list made of key:value entries, an exporter on only with what
 *     it needs (agentless: a key and an https URL; Pyroscope: an http(s) URL);
 *   - warnings: as many as config_load returns, each on one line (no control
 *     character), each naming a different variable that is set: one per variable;
 *   - secrets are never printed: the log is the same, byte for byte, when every
 *     secret's printable characters are rotated (ROT47 keeps what makes one usable);
 *   - secure execution: no variable read, no warning (one debug line at most), the
 *     agent off;
 *   - the same environment twice gives the same struct.
 * Context: the fuzzer's one thread.
 *
 * Build, from the repository's root (common/config.c only: this file is the logger, so
 * common/log.c must not be linked):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     test/fuzz/fuzz_config.c common/config.c common/config_values.c -lelf -ldl -lpthread \
 *     -o fuzz_config
 * Run: ./fuzz_config -max_total_time=60 test/fuzz/corpus/config/
 */
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/config.h"
#include "common/log.h"

static const char *const names[] = {
    "DD_PROFILING_ENABLED",
    "DD_PROFILING_CPU_HZ",
    "DD_PROFILING_UPLOAD_PERIOD",
    "DD_PROFILING_OUTPUT_DIR",
    "DD_PROFILING_UNWIND_CACHE_DIR",
    "XDG_CACHE_HOME",
    "HOME",
    "DD_PROFILING_MAX_MEMORY",
    "DD_PROFILING_SIGNAL",
    "DD_PROFILING_LOG_LEVEL",
    "DD_SERVICE",
    "DD_ENV",
    "DD_VERSION",
    "DD_TAGS",
    "DD_PROFILING_UPLOAD_TIMEOUT",
    "DD_PROFILING_EXIT_FLUSH_TIMEOUT",
    "DD_TRACE_AGENT_URL",
    "DD_AGENT_HOST",
    "DD_TRACE_AGENT_PORT",
    "DD_PROFILING_AGENTLESS",
    "DD_API_KEY",
    "DD_SITE",
    "DD_PROFILING_AGENTLESS_URL",
    "PYROSCOPE_SERVER_ADDRESS",
    "PYROSCOPE_APPLICATION_NAME",
    "PYROSCOPE_AUTH_TOKEN",
    "PYROSCOPE_BASIC_AUTH_USER",
    "PYROSCOPE_BASIC_AUTH_PASSWORD",
    "PYROSCOPE_TENANT_ID",
    "PYROSCOPE_TAGS",
    "DD_PROFILING_ALLOCATION_ENABLED",
    "DD_PROFILING_HEAP_ENABLED",
    "DD_PROFILING_HEAP_SAMPLE_SIZE",
    "DD_PROFILING_HEAP_TABLE_SIZE",
    "DD_PROFILING_LOCK_ENABLED",
    "DD_PROFILING_LOCK_INTERVAL",
    "DD_PROFILING_WALL_ENABLED",
    "DD_PROFILING_WALL_INTERVAL",
    "DD_PROFILING_FLUSH_ON_SIGNAL",
};
#define NVARS (sizeof(names) / sizeof(names[0]))
/* Read with load_secret: never quoted in a line. */
static const char *const secrets[] = {"DD_API_KEY", "PYROSCOPE_AUTH_TOKEN",
				      "PYROSCOPE_BASIC_AUTH_USER", "PYROSCOPE_BASIC_AUTH_PASSWORD",
				      "PYROSCOPE_TENANT_ID"};
#define NSECRETS (sizeof(secrets) / sizeof(secrets[0]))

#define NS_PER_S 1000000000ULL
/* config.c's longest upload period (MAX_UPLOAD_PERIOD_S). */
#define MAX_UPLOAD_PERIOD_NS (86400ULL * NS_PER_S)
#define LINE_MAX_LEN 1024
#define LOG_MAX (64 * 1024)

static char *values[NVARS]; /* NULL: unset */
static int reads;
static bool rotate_secrets;

/* The log, as the replaced logger received it. */
static struct {
	char text[LOG_MAX];
	size_t len;
	int lines, warnings;
	const char *warned[NVARS + 1]; /* the variable each warning named */
} logbuf;
static int threshold = LOG_LEVEL_WARN;

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_config: invariant broken: %s%s%s\n", what, detail ? ": " : "",
		detail ? detail : "");
	abort();
}

static bool is_secret(const char *name)
{
	for (size_t i = 0; i < NSECRETS; i++)
		if (strcmp(name, secrets[i]) == 0)
			return true;
	return false;
}

static int var_index(const char *name)
{
	for (size_t i = 0; i < NVARS; i++)
		if (strcmp(name, names[i]) == 0)
			return (int)i;
	return -1;
}

/* ROT47 of s into buf: printable non-blank ASCII stays so, all else is kept. */
static const char *rot47(char *buf, const char *s)
{
	size_t i = 0;
	for (; s[i]; i++) {
		unsigned char c = (unsigned char)s[i];
		buf[i] = c > ' ' && c < 0x7F ? (char)('!' + (c - '!' + 47) % 94) : (char)c;
	}
	buf[i] = '\0';
	return buf;
}

static const char *fuzz_getenv(const char *name)
{
	static char rotated[NSECRETS][4096];
	int i = var_index(name);
	if (i < 0)
		fail("config reads a variable this target does not feed", name);
	reads++;
	if (!values[i] || !rotate_secrets || !is_secret(name))
		return values[i];
	for (size_t s = 0; s < NSECRETS; s++)
		if (strcmp(name, secrets[s]) == 0 && strlen(values[i]) < sizeof(rotated[s]))
			return rot47(rotated[s], values[i]);
	return values[i];
}

/* The logger (common/log.h), replaced: every line is kept and checked. */
void log_set_level(enum log_level level)
{
	threshold = (int)level;
}

enum log_level log_get_level(void)
{
	return (enum log_level)threshold;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char line[LINE_MAX_LEN];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		fail("a log line could not be formatted", fmt);
	size_t len = strlen(line);
	logbuf.lines++;
	if (level == LOG_LEVEL_WARN) {
		for (size_t i = 0; i < len; i++) {
			unsigned char c = (unsigned char)line[i];
			if (c < 0x20 || c == 0x7F)
				fail("a warning holds a control character", line);
		}
		/* The variable it names: the line's first word, up to '=', ':' or ' '. */
		size_t w = strcspn(line, "=: ");
		char word[64];
		if (w >= sizeof(word))
			fail("a warning does not start with a variable's name", line);
		memcpy(word, line, w);
		word[w] = '\0';
		int v = var_index(word);
		if (v < 0)
			fail("a warning does not start with a variable's name", line);
		if (!values[v] || !values[v][0])
			fail("a warning names a variable that is not set", line);
		for (int k = 0; k < logbuf.warnings && k < (int)NVARS; k++)
			if (logbuf.warned[k] == names[v])
				fail("two warnings for one variable", line);
		if (logbuf.warnings < (int)NVARS)
			logbuf.warned[logbuf.warnings] = names[v];
		logbuf.warnings++;
	}
	if (logbuf.len + len + 1 < sizeof(logbuf.text)) {
		memcpy(logbuf.text + logbuf.len, line, len);
		logbuf.text[logbuf.len + len] = '\n';
		logbuf.len += len + 1;
	}
}

static bool terminated(const char *s, size_t size)
{
	return memchr(s, '\0', size) != NULL;
}

#define CHECK_STR(field)                                                                           \
	do {                                                                                       \
		if (!terminated(c->field, sizeof(c->field)))                                       \
			fail("unterminated string", #field);                                       \
	} while (0)

/* A normalized tag list: "" or key:value entries joined by ',' (no blank, no empty
 * key or value). */
static void check_tags(const char *tags, const char *what)
{
	for (const char *p = tags; *p;) {
		size_t len = strcspn(p, ",");
		size_t key = strcspn(p, ":");
		if (len == 0 || key == 0 || key + 1 >= len || memchr(p, ' ', len) ||
		    memchr(p, '\t', len) || memchr(p, '\n', len))
			fail("a tag list holds a malformed entry", what);
		p += len;
		if (*p == ',')
			p++;
	}
}

static void check_config(const struct config *c)
{
	if (c->cpu_hz < CONFIG_MIN_CPU_HZ || c->cpu_hz > CONFIG_MAX_CPU_HZ)
		fail("cpu_hz out of bounds", NULL);
	if (c->upload_period_ns < CONFIG_MIN_UPLOAD_PERIOD_NS ||
	    c->upload_period_ns > MAX_UPLOAD_PERIOD_NS)
		fail("upload period out of bounds", NULL);
	if (c->max_memory < CONFIG_MIN_MAX_MEMORY || c->max_memory > CONFIG_MAX_MAX_MEMORY)
		fail("max_memory out of bounds", NULL);
	if (c->signal != 0 && c->signal != SIGPROF &&
	    (c->signal < SIGRTMIN || c->signal > SIGRTMAX))
		fail("a sampling signal other than SIGPROF or a real-time one", NULL);
	if ((int)c->log_level < LOG_LEVEL_ERROR || (int)c->log_level > LOG_LEVEL_DEBUG)
		fail("log level out of bounds", NULL);
	if (c->upload_timeout_ns < CONFIG_MIN_UPLOAD_TIMEOUT_NS ||
	    c->upload_timeout_ns > CONFIG_MAX_UPLOAD_TIMEOUT_NS)
		fail("upload timeout out of bounds", NULL);
	if (c->exit_flush_timeout_ns > CONFIG_MAX_EXIT_FLUSH_TIMEOUT_NS)
		fail("exit flush timeout out of bounds", NULL);
	CHECK_STR(output_dir);
	CHECK_STR(unwind_cache_dir);
	CHECK_STR(service);
	CHECK_STR(env);
	CHECK_STR(version);
	CHECK_STR(tags);
	CHECK_STR(agent_url);
	CHECK_STR(agentless_url);
	CHECK_STR(api_key);
	CHECK_STR(site);
	CHECK_STR(pyroscope_url);
	CHECK_STR(pyroscope_app);
	CHECK_STR(pyroscope_token);
	CHECK_STR(pyroscope_user);
	CHECK_STR(pyroscope_password);
	CHECK_STR(pyroscope_tenant);
	CHECK_STR(pyroscope_tags);
	check_tags(c->tags, "DD_TAGS");
	check_tags(c->pyroscope_tags, "PYROSCOPE_TAGS");
	if (c->export_agentless &&
	    (!c->api_key[0] || strncasecmp(c->agentless_url, "https://", 8) != 0))
		fail("agentless on without a key or an https URL", NULL);
	if (c->export_pyroscope && strncasecmp(c->pyroscope_url, "http://", 7) != 0 &&
	    strncasecmp(c->pyroscope_url, "https://", 8) != 0)
		fail("Pyroscope on without an http(s) URL", NULL);
	int dir = var_index("DD_PROFILING_UNWIND_CACHE_DIR");
	if (c->unwind_cache_dir[0] && c->unwind_cache_dir[0] != '/' && !values[dir])
		fail("a relative default cache directory", c->unwind_cache_dir);
}

/* config_load_with on the current values, the log captured. */
static int load(struct config *c, bool secure, bool rotate)
{
	memset(c, 0, sizeof(*c)); /* config_load wants it zero-filled (config.h) */
	memset(&logbuf, 0, sizeof(logbuf));
	threshold = LOG_LEVEL_WARN; /* a process starts at the default */
	reads = 0;
	rotate_secrets = rotate;
	return config_load_with(c, fuzz_getenv, secure);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct config first, again;
	static char log_first[LOG_MAX];
	if (size == 0)
		return 0;
	bool secure = data[0] & 1;
	for (size_t i = 0; i < NVARS; i++) {
		free(values[i]);
		values[i] = NULL;
	}
	size_t nset = 0;
	for (size_t p = 1; p < size;) {
		size_t v = data[p++] % NVARS;
		const uint8_t *end = memchr(data + p, 0, size - p);
		size_t len = end ? (size_t)(end - (data + p)) : size - p;
		free(values[v]);
		values[v] = malloc(len + 1);
		if (!values[v])
			return 0;
		memcpy(values[v], data + p, len);
		values[v][len] = '\0';
		p += len + (end != NULL);
	}
	for (size_t i = 0; i < NVARS; i++)
		nset += values[i] && values[i][0];

	int w = load(&first, secure, false);
	if (secure) {
		if (reads != 0 || logbuf.lines > 1 || w != 0 || first.enabled)
			fail("secure execution read, warned or left the agent on", NULL);
		return 0;
	}
	if (w < 0 || w != logbuf.warnings || (size_t)w > nset)
		fail("warnings counted wrong, or more than one per variable", NULL);
	check_config(&first);
	memcpy(log_first, logbuf.text, logbuf.len + 1);
	size_t log_len = logbuf.len;

	load(&again, false, false);
	if (memcmp(&first, &again, sizeof(first)) != 0)
		fail("the same environment gave another configuration", NULL);
	load(&again, false, true);
	if (logbuf.len != log_len || memcmp(logbuf.text, log_first, log_len) != 0)
		fail("a secret's characters changed the log", logbuf.text);
	return 0;
}
