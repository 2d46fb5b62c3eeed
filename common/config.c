/*
 * config.c - parse and validate libddprof's environment variables (see config.h).
 *
 * Owns: the only getenv calls of libddprof, and the rules for every DD_* variable the
 * agent reads. The result is one struct filled once and never changed afterwards.
 * Context: config_load() runs once from the library constructor, on the application's
 * main thread before main (so getenv is not racing setenv), and from unit tests with a
 * fake environment. Never called from a signal handler (it logs). No allocation: fixed
 * buffers only.
 * Rules: an empty value is the same as an unset one. A bad value costs exactly one
 * warning line naming the variable, quoting the value and stating what is used instead.
 * Secrets (DD_API_KEY, PYROSCOPE_AUTH_TOKEN, PYROSCOPE_BASIC_AUTH_PASSWORD/USER) are
 * never quoted: a bad one is described by its length only. The exporter rule (which
 * destinations are on) is stated in config.h and applied at the end of config_load.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <unistd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>

#include "common/config_values.h"
#include "common/str_join.h"

#define NSEC_PER_SEC 1000000000ULL
/* Longest upload period accepted: one day. Longer is surely a unit mistake. */
#define MAX_UPLOAD_PERIOD_S CONFIG_MAX_SECONDS
/* Bytes of a bad value quoted in a warning; the rest is elided as "...". */
#define QUOTE_MAX 80
#define QUOTE_BUF (QUOTE_MAX + sizeof("..."))
/* Room for the explanation that follows the quoted value in a warning. */
#define WHY_MAX 256
/* Room for a size printed by fmt_size. */
#define NUM_BUF CONFIG_NUM_BUF
#define AUTO_SIGNAL_TEXT "0 (automatic: SIGPROF unless taken)"

struct loader {
	config_getenv_fn get;
	const char *name; /* the variable last looked up, named by warnings */
	int warnings;
};

/* The process environment, for get == NULL. secure_getenv ignores it in setuid programs,
 * where it must not choose, e.g., the directory profiles are written to. */
static const char *env_getenv(const char *name)
{
	return secure_getenv(name);
}

/* The value of name, or NULL when it is unset or empty. Later warnings name it. */
static const char *lookup(struct loader *ld, const char *name)
{
	const char *v = ld->get(name);
	ld->name = name;
	return v && v[0] ? v : NULL;
}

/* Length to keep of s[0..len) so that no UTF-8 character is cut (s[len] is the cut). */
static size_t utf8_cut(const char *s, size_t len)
{
	while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80) /* 10xxxxxx: continuation */
		len--;
	return len;
}

/* Copies up to QUOTE_MAX bytes of s[0..len) for a warning, control characters as '?' so
 * the warning stays one line. */
static const char *quote(char buf[QUOTE_BUF], const char *s, size_t len)
{
	size_t n = len > QUOTE_MAX ? utf8_cut(s, QUOTE_MAX) : len;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		buf[i] = c < 0x20 || c == 0x7F ? '?' : (char)c; /* ASCII controls and DEL */
	}
	strcpy(buf + n, n < len ? "..." : "");
	return buf;
}

/* Logs `NAME="value" <why>` as one warning and counts it. */
__attribute__((format(printf, 3, 4))) static void warn_bad(struct loader *ld, const char *value,
							   const char *fmt, ...)
{
	char q[QUOTE_BUF], why[WHY_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	log_warn("%s=\"%s\" %s", ld->name, quote(q, value, strlen(value)), why);
	ld->warnings++;
}

static const struct {
	const char *name;
	enum log_level level;
} level_names[] = {
    {"error", LOG_LEVEL_ERROR}, {"warn", LOG_LEVEL_WARN},   {"warning", LOG_LEVEL_WARN},
    {"info", LOG_LEVEL_INFO},	{"debug", LOG_LEVEL_DEBUG},
};
#define N_LEVEL_NAMES (sizeof(level_names) / sizeof(level_names[0]))

static void load_log_level(struct loader *ld, struct config *out)
{
	const char *v = lookup(ld, "DD_PROFILING_LOG_LEVEL");
	bool ok = v == NULL;
	for (size_t i = 0; v && !ok && i < N_LEVEL_NAMES; i++) {
		if (strcasecmp(v, level_names[i].name) == 0) {
			out->log_level = level_names[i].level;
			ok = true;
		}
	}
	/* Set before any other variable is read, so their warnings obey it. */
	log_set_level(out->log_level);
	if (!ok)
		warn_bad(ld, v,
			 "is not one of error, warn, warning, info, debug; using the default warn");
}

static void load_cpu_hz(struct loader *ld, struct config *out)
{
	const char *v = lookup(ld, "DD_PROFILING_CPU_HZ");
	uint64_t hz;
	char *end;
	if (!v)
		return;
	if (config_parse_u64(v, &hz, &end) && *end == '\0' && hz >= CONFIG_MIN_CPU_HZ &&
	    hz <= CONFIG_MAX_CPU_HZ) {
		out->cpu_hz = (unsigned)hz;
		return;
	}
	warn_bad(ld, v, "is not an integer in %d..%d; using the default %u", CONFIG_MIN_CPU_HZ,
		 CONFIG_MAX_CPU_HZ, out->cpu_hz);
}

static void load_upload_period(struct loader *ld, struct config *out)
{
	const char *v = lookup(ld, "DD_PROFILING_UPLOAD_PERIOD");
	uint64_t ns;
	if (!v)
		return;
	if (config_parse_seconds(v, &ns) && ns >= CONFIG_MIN_UPLOAD_PERIOD_NS) {
		out->upload_period_ns = ns;
		return;
	}
	warn_bad(ld, v, "is not a number of seconds in %g..%llu; using the default %g",
		 (double)CONFIG_MIN_UPLOAD_PERIOD_NS / NSEC_PER_SEC, MAX_UPLOAD_PERIOD_S,
		 (double)out->upload_period_ns / NSEC_PER_SEC);
}

/* A size variable (suffixes K, M, G): *out keeps its default unless the value is in
 * lo..hi. */
static void load_size(struct loader *ld, const char *name, uint64_t lo, uint64_t hi, uint64_t *out)
{
	const char *v = lookup(ld, name);
	char lo_s[NUM_BUF], hi_s[NUM_BUF], dflt[NUM_BUF];
	uint64_t bytes;
	if (!v)
		return;
	if (config_parse_size(v, &bytes) && bytes >= lo && bytes <= hi) {
		*out = bytes;
		return;
	}
	warn_bad(ld, v,
		 "is not a size in %s..%s (integer, optional suffix K, M or G); "
		 "using the default %s",
		 config_fmt_size(lo_s, lo), config_fmt_size(hi_s, hi), config_fmt_size(dflt, *out));
}

static void load_signal(struct loader *ld, struct config *out)
{
	const char *v = lookup(ld, "DD_PROFILING_SIGNAL");
	if (!v)
		return;
	int signo = config_parse_signal(v);
	if (signo < 0)
		warn_bad(ld, v,
			 "is not a signal number in 0..%d or a name such as SIGPROF or "
			 "SIGRTMIN+3; using the default " AUTO_SIGNAL_TEXT,
			 SIGRTMAX);
	else if (signo != 0 && !config_signal_allowed(signo))
		warn_bad(ld, v,
			 "is neither SIGPROF nor a real-time signal (%d..%d): other signals "
			 "mean something to the program; using the default " AUTO_SIGNAL_TEXT,
			 SIGRTMIN, SIGRTMAX);
	else
		out->signal = signo;
}

/* Copies a string variable into dst, cutting it (at a character boundary) if too long. */
static void load_string(struct loader *ld, const char *name, char *dst, size_t size)
{
	const char *v = lookup(ld, name);
	if (!v)
		return;
	size_t len = strlen(v);
	size_t keep = len < size ? len : utf8_cut(v, size - 1);
	memcpy(dst, v, keep);
	dst[keep] = '\0';
	if (keep < len)
		warn_bad(ld, v, "is longer than %zu bytes; using its first %zu bytes", size - 1,
			 keep);
}

/* A relative directory names the one it names now, at start-up: the profiles are
 * written later, by a thread of ours, after the program may have changed its working
 * directory (a daemon's chdir("/")). */
static void load_output_dir(struct loader *ld, struct config *out)
{
	const char *v = lookup(ld, "DD_PROFILING_OUTPUT_DIR");
	if (!v)
		return;
	char cwd[sizeof(out->output_dir)];
	if (v[0] != '/') {
		int saved_errno = errno;
		bool have = getcwd(cwd, sizeof(cwd)) != NULL && cwd[0] == '/';
		errno = saved_errno;
		if (!have) {
			warn_bad(ld, v,
				 "is relative and the working directory cannot be read; "
				 "using the default \"\" (no file export)");
			return;
		}
		size_t n = strlen(cwd);
		size_t sep = n > 1 ? 1 : 0, vn = strlen(v);
		if (n + sep + vn < sizeof(out->output_dir)) {
			memcpy(out->output_dir, cwd, n);
			memcpy(out->output_dir + n, "/", sep);
			memcpy(out->output_dir + n + sep, v, vn + 1);
			return;
		}
	} else if (strlen(v) < sizeof(out->output_dir)) {
		strcpy(out->output_dir, v);
		return;
	}
	/* A cut path would name another directory: export nothing rather than that. */
	warn_bad(ld, v, "is longer than %zu bytes; using the default \"\" (no file export)",
		 sizeof(out->output_dir) - 1);
}

static void load_unwind_cache_dir(struct loader *ld, struct config *out)
{
	const char *raw = ld->get("DD_PROFILING_UNWIND_CACHE_DIR");
	if (raw && !raw[0])
		return; /* set and empty: off */
	const char *v = lookup(ld, "DD_PROFILING_UNWIND_CACHE_DIR");
	const char *parts[2] = {v, ""};
	if (!v) {
		/* The XDG base directory rule: relative values are ignored. */
		const char *xdg = ld->get("XDG_CACHE_HOME"), *home = ld->get("HOME");
		if (xdg && xdg[0] == '/') {
			parts[0] = xdg;
			parts[1] = "/libddprof";
		} else if (home && home[0] == '/') {
			parts[0] = home;
			parts[1] = "/.cache/libddprof";
		} else {
			return;
		}
	}
	if (!str_join(out->unwind_cache_dir, sizeof(out->unwind_cache_dir), parts, 2)) {
		out->unwind_cache_dir[0] = '\0';
		if (v)
			warn_bad(ld, v, "is longer than %zu bytes; the unwind cache is off",
				 sizeof(out->unwind_cache_dir) - 1);
	}
}

/* DD_TAGS, PYROSCOPE_TAGS: entries separated by commas and/or blanks; key:value kept,
 * key=value turned into key:value. Entries lacking a key or a value are dropped, and so
 * is every entry from the first that does not fit in size bytes once normalized: one
 * warning for the variable says how many of each (with the first of each quoted). */
static void load_tag_list(struct loader *ld, const char *name, char *dst, size_t size)
{
	static const char seps[] = ", \t\n";
	const char *v = lookup(ld, name);
	size_t used = 0, entries = 0, malformed = 0, over = 0;
	const char *first_bad = NULL, *first_over = NULL;
	size_t first_bad_len = 0, first_over_len = 0;
	if (!v)
		return;
	for (const char *p = v + strspn(v, seps); *p; p += strspn(p, seps)) {
		size_t len = strcspn(p, seps);
		size_t key = strcspn(p, ":=");
		entries++;
		if (key == 0 || key + 1 >= len) {
			if (malformed++ == 0) {
				first_bad = p;
				first_bad_len = len;
			}
		} else if (over > 0 || used + (used > 0) + len >= size) {
			if (over++ == 0) {
				first_over = p;
				first_over_len = len;
			}
		} else {
			if (used > 0)
				dst[used++] = ',';
			memcpy(dst + used, p, len);
			dst[used + key] = ':';
			used += len;
			dst[used] = '\0';
		}
		p += len;
	}
	if (malformed == 0 && over == 0)
		return;
	char q1[QUOTE_BUF] = "", q2[QUOTE_BUF] = "", why1[WHY_MAX] = "", why2[WHY_MAX] = "";
	if (malformed)
		snprintf(why1, sizeof(why1), "%zu not key:value or key=value (the first: \"%s\")",
			 malformed, quote(q1, first_bad, first_bad_len));
	if (over)
		snprintf(why2, sizeof(why2),
			 "%s%zu past the %zu-byte limit once normalized (from \"%s\" on)",
			 malformed ? ", " : "", over, size - 1,
			 quote(q2, first_over, first_over_len));
	log_warn("%s: dropped %zu of %zu entries: %s%s; using the other %zu", ld->name,
		 malformed + over, entries, why1, why2, entries - malformed - over);
	ld->warnings++;
}

/* A duration in seconds (decimals allowed) within [min_ns, max_ns]. */
static void load_timeout(struct loader *ld, const char *name, uint64_t *dst, uint64_t min_ns,
			 uint64_t max_ns)
{
	const char *v = lookup(ld, name);
	uint64_t ns;
	if (!v)
		return;
	if (config_parse_seconds(v, &ns) && ns >= min_ns && ns <= max_ns) {
		*dst = ns;
		return;
	}
	warn_bad(ld, v, "is not a number of seconds in %g..%g; using the default %g",
		 (double)min_ns / NSEC_PER_SEC, (double)max_ns / NSEC_PER_SEC,
		 (double)*dst / NSEC_PER_SEC);
}

/* A boolean variable; false when unset. */
static bool load_bool(struct loader *ld, const char *name, bool dflt)
{
	static const char *const yes[] = {"true", "1", "yes", "on"};
	static const char *const no[] = {"false", "0", "no", "off"};
	const char *v = lookup(ld, name);
	if (!v)
		return dflt;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0)
			return strcasecmp(v, yes[i]) == 0;
	}
	warn_bad(ld, v, "is not true/false, 1/0, yes/no or on/off; using the default %s",
		 dflt ? "true" : "false");
	return dflt;
}

/* A secret (API key, token, password): printable ASCII without blanks, since it goes
 * into an HTTP header. A bad one is reported by length only, never quoted. Returns
 * false (dst left empty) when set but unusable. */
static bool load_secret(struct loader *ld, const char *name, char *dst, size_t size)
{
	const char *v = lookup(ld, name);
	if (!v)
		return true;
	size_t len = strlen(v);
	bool ok = len < size;
	for (size_t i = 0; ok && i < len; i++)
		ok = v[i] > ' ' && v[i] < 0x7F; /* printable ASCII, no space: header-safe */
	if (!ok) {
		log_warn("%s is set but unusable (%zu bytes; at most %zu printable ASCII "
			 "characters without blanks); ignoring it (its value is not shown)",
			 name, len, size - 1);
		ld->warnings++;
		return false;
	}
	memcpy(dst, v, len + 1);
	return true;
}

/* Characters allowed in a URL we are given (RFC 3986 unreserved, reserved and '%'). */
static bool url_chars_ok(const char *s)
{
	for (; *s; s++) {
		if (*s <= ' ' || *s >= 0x7F || strchr("\"<>\\^`{|}", *s))
			return false;
	}
	return true;
}

enum url_scheme { URL_HTTP = 1, URL_HTTPS = 2, URL_UNIX = 4 };

/* Which of schemes v starts with, after checking the rest is usable: a host for
 * http(s), an absolute path for unix:///path. 0 when not valid. */
static int url_scheme(const char *v, int schemes)
{
	static const struct {
		const char *prefix;
		int scheme;
	} prefixes[] = {{"http://", URL_HTTP}, {"https://", URL_HTTPS}, {"unix://", URL_UNIX}};
	if (!url_chars_ok(v))
		return 0;
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t n = strlen(prefixes[i].prefix);
		if (!(schemes & prefixes[i].scheme) || strncasecmp(v, prefixes[i].prefix, n) != 0)
			continue;
		const char *rest = v + n;
		if (prefixes[i].scheme == URL_UNIX)
			return rest[0] == '/' && rest[1] ? URL_UNIX : 0;
		return rest[0] && rest[0] != '/' && rest[0] != '?' ? prefixes[i].scheme : 0;
	}
	return 0;
}

/* Copies a URL variable (one of schemes) into dst without its trailing '/'s. Returns
 * the scheme, or 0 when unset or bad (warned; dst unchanged). */
static int load_url(struct loader *ld, const char *name, char *dst, size_t size, int schemes,
		    const char *what, const char *fallback)
{
	const char *v = lookup(ld, name);
	if (!v)
		return 0;
	int scheme = url_scheme(v, schemes);
	size_t len = strlen(v);
	while (len > 0 && v[len - 1] == '/' && scheme != URL_UNIX)
		len--;
	if (scheme && len < size) {
		memcpy(dst, v, len);
		dst[len] = '\0';
		return scheme;
	}
	warn_bad(ld, v, "is not %s (at most %zu bytes); %s", what, size - 1, fallback);
	return 0;
}

/* A host name or IP address: letters, digits, '.', '-', '_', ':' (IPv6), no brackets. */
static bool host_ok(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++) {
		if (!isalnum((unsigned char)*s) && !strchr(".-_:", *s))
			return false;
	}
	return true;
}

/* Fills agent_url; true when one of the agent variables was set. */
static bool load_agent(struct loader *ld, struct config *out)
{
	bool explicit = false;
	if (load_url(ld, "DD_TRACE_AGENT_URL", out->agent_url, sizeof(out->agent_url),
		     URL_HTTP | URL_HTTPS | URL_UNIX, "an http://, https:// or unix:///path URL",
		     "using http://DD_AGENT_HOST:DD_TRACE_AGENT_PORT"))
		explicit = true;
	else if (ld->get("DD_TRACE_AGENT_URL") && ld->get("DD_TRACE_AGENT_URL")[0])
		explicit = true; /* set but bad: the user wants the agent, at its default */
	char host[CONFIG_TAG_MAX] = CONFIG_DEFAULT_AGENT_HOST;
	const char *v = lookup(ld, "DD_AGENT_HOST");
	if (v) {
		explicit = true;
		if (host_ok(v) && strlen(v) < sizeof(host))
			strcpy(host, v);
		else
			warn_bad(ld, v,
				 "is not a host name or IP address; using the "
				 "default " CONFIG_DEFAULT_AGENT_HOST);
	}
	unsigned port = CONFIG_DEFAULT_AGENT_PORT;
	v = lookup(ld, "DD_TRACE_AGENT_PORT");
	if (v) {
		uint64_t n;
		char *end;
		explicit = true;
		if (config_parse_u64(v, &n, &end) && *end == '\0' && n >= 1 && n <= 65535)
			port = (unsigned)n;
		else
			warn_bad(ld, v, "is not a port in 1..65535; using the default %u", port);
	}
	if (!out->agent_url[0]) {
		bool v6 = strchr(host, ':') != NULL; /* an IPv6 literal needs brackets */
		char digits[8], *d = digits + sizeof(digits);
		*--d = '\0';
		do
			*--d = (char)('0' + port % 10);
		while ((port /= 10) != 0);
		const char *parts[] = {"http://", v6 ? "[" : "", host, v6 ? "]" : "", ":", d};
		str_join(out->agent_url, sizeof(out->agent_url), parts, 6);
	}
	return explicit;
}

/* Returns true when agentless was asked for (usable or not). */
static bool load_agentless(struct loader *ld, struct config *out)
{
	bool want = load_bool(ld, "DD_PROFILING_AGENTLESS", false);
	bool key_ok = load_secret(ld, "DD_API_KEY", out->api_key, sizeof(out->api_key));
	const char *v = lookup(ld, "DD_SITE");
	if (v && host_ok(v) && !strchr(v, ':') && strlen(v) < sizeof(out->site))
		strcpy(out->site, v);
	else if (v)
		warn_bad(
		    ld, v,
		    "is not a domain such as datadoghq.eu; using the default " CONFIG_DEFAULT_SITE);
	const char *parts[] = {"https://intake.profile.", out->site, "/api/v2/profile"};
	str_join(out->agentless_url, sizeof(out->agentless_url), parts, 3);
	v = lookup(ld, "DD_PROFILING_AGENTLESS_URL");
	bool url_ok = true;
	if (v && url_scheme(v, URL_HTTPS) && strlen(v) < sizeof(out->agentless_url)) {
		strcpy(out->agentless_url, v);
	} else if (v) {
		/* The API key goes with every request: never over plain http. */
		warn_bad(ld, v,
			 "is not an https:// URL: refusing to send DD_API_KEY over it; "
			 "agentless upload disabled");
		url_ok = false;
	}
	if (!want)
		return false;
	if (!out->api_key[0] && key_ok) {
		log_warn("DD_PROFILING_AGENTLESS=true needs DD_API_KEY; agentless upload "
			 "disabled");
		ld->warnings++;
	}
	out->export_agentless = out->api_key[0] && url_ok;
	return true;
}

static void load_pyroscope(struct loader *ld, struct config *out)
{
	out->export_pyroscope =
	    load_url(ld, "PYROSCOPE_SERVER_ADDRESS", out->pyroscope_url, sizeof(out->pyroscope_url),
		     URL_HTTP | URL_HTTPS, "an http:// or https:// URL",
		     "Pyroscope upload disabled") != 0;
	load_string(ld, "PYROSCOPE_APPLICATION_NAME", out->pyroscope_app,
		    sizeof(out->pyroscope_app));
	load_secret(ld, "PYROSCOPE_AUTH_TOKEN", out->pyroscope_token, sizeof(out->pyroscope_token));
	load_secret(ld, "PYROSCOPE_BASIC_AUTH_USER", out->pyroscope_user,
		    sizeof(out->pyroscope_user));
	load_secret(ld, "PYROSCOPE_BASIC_AUTH_PASSWORD", out->pyroscope_password,
		    sizeof(out->pyroscope_password));
	/* Goes into a header line as is: checked like a secret (no blanks or controls). */
	load_secret(ld, "PYROSCOPE_TENANT_ID", out->pyroscope_tenant,
		    sizeof(out->pyroscope_tenant));
	load_tag_list(ld, "PYROSCOPE_TAGS", out->pyroscope_tags, sizeof(out->pyroscope_tags));
}

const char *config_redact_url(char dst[CONFIG_URL_MAX], const char *src)
{
	const char *auth = strstr(src, "://");
	auth = auth ? auth + 3 : src;
	size_t end = strcspn(auth, "/?#");
	const char *at = memchr(auth, '@', end);
	/* No snprintf: exporters call this in the constructor (common/str_join.h). */
	if (!at) {
		str_join(dst, CONFIG_URL_MAX, &src, 1);
		return dst;
	}
	size_t n = (size_t)(auth - src); /* "scheme://" */
	if (n > CONFIG_URL_MAX - 1)
		n = CONFIG_URL_MAX - 1;
	memcpy(dst, src, n);
	const char *rest[] = {"***@", at + 1};
	str_join(dst + n, CONFIG_URL_MAX - n, rest, 2);
	return dst;
}

/* The defaults that are not zero. */
static void set_defaults(struct config *out)
{
	out->enabled = true;
	out->cpu_hz = CONFIG_DEFAULT_CPU_HZ;
	out->upload_period_ns = CONFIG_DEFAULT_UPLOAD_PERIOD_NS;
	out->max_memory = CONFIG_DEFAULT_MAX_MEMORY;
	out->alloc_interval = CONFIG_DEFAULT_ALLOC_INTERVAL;
	out->heap_table_bytes = CONFIG_DEFAULT_HEAP_TABLE;
	out->lock_interval_ns = CONFIG_DEFAULT_LOCK_INTERVAL_NS;
	out->wall_interval_ns = CONFIG_DEFAULT_WALL_INTERVAL_NS;
	out->log_level = LOG_LEVEL_WARN;
	out->upload_timeout_ns = CONFIG_DEFAULT_UPLOAD_TIMEOUT_NS;
	out->exit_flush_timeout_ns = CONFIG_DEFAULT_EXIT_FLUSH_TIMEOUT_NS;
	strcpy(out->site, CONFIG_DEFAULT_SITE);
}

void config_defaults(struct config *out)
{
	memset(out, 0, sizeof(*out));
	set_defaults(out);
}

int config_load(struct config *out, config_getenv_fn get)
{
	return config_load_with(out, get, getauxval(AT_SECURE) != 0);
}

int config_load_with(struct config *out, config_getenv_fn get, bool secure_execution)
{
	struct loader ld = {.get = get ? get : env_getenv, .warnings = 0};
	char mem[NUM_BUF];

	set_defaults(out); /* on a zero-filled *out: see config.h */
	if (secure_execution) {
		/* The environment is the invoker's, not the program owner's: nothing of it is
		 * read, nothing printed (the threshold is the default, warn). */
		out->enabled = false;
		log_debug("config: secure execution (AT_SECURE): the agent stays off");
		return 0;
	}
	load_log_level(&ld, out); /* first: it decides whether the other warnings print */
	out->enabled = load_bool(&ld, "DD_PROFILING_ENABLED", out->enabled);
	load_cpu_hz(&ld, out);
	load_upload_period(&ld, out);
	load_output_dir(&ld, out);
	load_unwind_cache_dir(&ld, out);
	load_size(&ld, "DD_PROFILING_MAX_MEMORY", CONFIG_MIN_MAX_MEMORY, CONFIG_MAX_MAX_MEMORY,
		  &out->max_memory);
	out->allocation_enabled =
	    load_bool(&ld, "DD_PROFILING_ALLOCATION_ENABLED", out->allocation_enabled);
	out->heap_enabled = load_bool(&ld, "DD_PROFILING_HEAP_ENABLED", out->heap_enabled);
	load_size(&ld, "DD_PROFILING_HEAP_SAMPLE_SIZE", CONFIG_MIN_ALLOC_INTERVAL,
		  CONFIG_MAX_ALLOC_INTERVAL, &out->alloc_interval);
	load_size(&ld, "DD_PROFILING_HEAP_TABLE_SIZE", CONFIG_MIN_HEAP_TABLE, CONFIG_MAX_HEAP_TABLE,
		  &out->heap_table_bytes);
	out->lock_enabled = load_bool(&ld, "DD_PROFILING_LOCK_ENABLED", out->lock_enabled);
	load_timeout(&ld, "DD_PROFILING_LOCK_INTERVAL", &out->lock_interval_ns,
		     CONFIG_MIN_LOCK_INTERVAL_NS, CONFIG_MAX_LOCK_INTERVAL_NS);
	out->wall_enabled = load_bool(&ld, "DD_PROFILING_WALL_ENABLED", out->wall_enabled);
	out->flush_on_signal = load_bool(&ld, "DD_PROFILING_FLUSH_ON_SIGNAL", out->flush_on_signal);
	load_timeout(&ld, "DD_PROFILING_WALL_INTERVAL", &out->wall_interval_ns,
		     CONFIG_MIN_WALL_INTERVAL_NS, CONFIG_MAX_WALL_INTERVAL_NS);
	load_signal(&ld, out);
	load_string(&ld, "DD_SERVICE", out->service, sizeof(out->service));
	load_string(&ld, "DD_ENV", out->env, sizeof(out->env));
	load_string(&ld, "DD_VERSION", out->version, sizeof(out->version));
	load_tag_list(&ld, "DD_TAGS", out->tags, sizeof(out->tags));
	load_timeout(&ld, "DD_PROFILING_UPLOAD_TIMEOUT", &out->upload_timeout_ns,
		     CONFIG_MIN_UPLOAD_TIMEOUT_NS, CONFIG_MAX_UPLOAD_TIMEOUT_NS);
	load_timeout(&ld, "DD_PROFILING_EXIT_FLUSH_TIMEOUT", &out->exit_flush_timeout_ns, 0,
		     CONFIG_MAX_EXIT_FLUSH_TIMEOUT_NS);
	bool agent_explicit = load_agent(&ld, out);
	bool agentless_asked = load_agentless(&ld, out);
	load_pyroscope(&ld, out);
	/* The rule documented in config.h. */
	out->export_agent =
	    agent_explicit || (!agentless_asked && !out->output_dir[0] && !out->pyroscope_url[0]);

	/* Checked first: the arguments below are formatted with snprintf, whose code pages
	 * a process that never formats would not touch otherwise (start-up cost). */
	if (log_get_level() < LOG_LEVEL_DEBUG)
		return ld.warnings;
	char u1[CONFIG_URL_MAX], u2[CONFIG_URL_MAX], u3[CONFIG_URL_MAX];
	log_debug("config: enabled=%d cpu_hz=%u upload_period=%gs output_dir=\"%s\" "
		  "max_memory=%s signal=%d service=\"%s\" env=\"%s\" version=\"%s\" tags=\"%s\"",
		  out->enabled, out->cpu_hz, (double)out->upload_period_ns / NSEC_PER_SEC,
		  out->output_dir, config_fmt_size(mem, out->max_memory), out->signal, out->service,
		  out->env, out->version, out->tags);
	/* Secrets are shown as set/unset only. */
	log_debug("config: agent=%d (%s) agentless=%d (%s, api key %s) pyroscope=%d (%s) "
		  "upload_timeout=%gs exit_flush_timeout=%gs",
		  out->export_agent, config_redact_url(u1, out->agent_url), out->export_agentless,
		  config_redact_url(u3, out->agentless_url), out->api_key[0] ? "set" : "unset",
		  out->export_pyroscope, config_redact_url(u2, out->pyroscope_url),
		  (double)out->upload_timeout_ns / NSEC_PER_SEC,
		  (double)out->exit_flush_timeout_ns / NSEC_PER_SEC);
	return ld.warnings;
}
