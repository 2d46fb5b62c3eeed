/*
 * export_datadog.c - Datadog agent and agentless exporters (see export_datadog.h).
 *
 * Context: uploader thread (prepare; creation: export_set_make). The fields filled at
 * the first profile (host, container id) are published with a release store of
 * `identity_ready` and read after an acquire load of it, so a fork child whose copy
 * was taken mid-way reads either all of them or none (and then fills them itself).
 */
#include "uploader/export_datadog.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/str_join.h"
#include "uploader/multipart.h"
#include "common/sys_io.h"

#define CGROUP_FILE "/proc/self/cgroup"
#define CGROUP_READ_MAX 16384 /* plenty for the few lines of /proc/self/cgroup */
#define HOST_MAX 256	      /* HOST_NAME_MAX + NUL */
#define EVENT_VERSION "4"     /* PROTOCOL.md: the event format version */
#define EVENT_FAMILY "native"
#define ATTACHMENT_NAME "profile.pprof"
#define HEADER_MAX (CONFIG_SECRET_MAX + 32)
#define LAST_YEAR_4_DIGITS 9999
#define UUID_BYTES 16

struct datadog_exporter {
	struct exporter base;
	const struct config *cfg;
	bool agentless;
	char url[CONFIG_URL_MAX];
	char socket_path[CONFIG_PATH_MAX];
	char key_header[HEADER_MAX]; /* "DD-API-KEY: ..." (agentless only) */
	/* Filled at the first profile (see the file comment). */
	_Atomic bool identity_ready;
	char host[HOST_MAX];
	char container_header[DATADOG_CONTAINER_ID_MAX + 32];
	/* Per profile, rewritten by each prepare. */
	char tags[DATADOG_TAGS_MAX];
	char content_type_header[MULTIPART_CONTENT_TYPE_MAX + 16];
};

int export_datadog_format_rfc3339(uint64_t ns, char out[DATADOG_TIME_MAX])
{
	time_t secs = (time_t)(ns / NS_PER_SEC);
	struct tm tm;
	if (!gmtime_r(&secs, &tm) || tm.tm_year + 1900 > LAST_YEAR_4_DIGITS)
		return -EOVERFLOW;
	size_t n = strftime(out, DATADOG_TIME_MAX, "%Y-%m-%dT%H:%M:%S", &tm);
	if (n == 0)
		return -EOVERFLOW;
	snprintf(out + n, DATADOG_TIME_MAX - n, ".%09lluZ", (unsigned long long)(ns % NS_PER_SEC));
	return 0;
}

void export_datadog_runtime_id_new(char out[EXPORT_RUNTIME_ID_MAX])
{
	uint8_t b[UUID_BYTES];
	if (getrandom(b, sizeof(b), GRND_NONBLOCK) != (ssize_t)sizeof(b)) {
		/* No entropy pool yet: unique enough from time and pid. */
		uint64_t x = clock_now_ns(CLOCK_REALTIME) ^ ((uint64_t)getpid() << 40);
		for (size_t i = 0; i < sizeof(b); i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL; /* LCG step */
			b[i] = (uint8_t)(x >> 56);
		}
	}
	b[6] = (uint8_t)((b[6] & 0x0F) | 0x40); /* version 4 */
	b[8] = (uint8_t)((b[8] & 0x3F) | 0x80); /* variant 10xx */
	size_t n = 0;
	for (size_t i = 0; i < sizeof(b); i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[n++] = '-';
		n += (size_t)snprintf(out + n, EXPORT_RUNTIME_ID_MAX - n, "%02x", b[i]);
	}
}

int export_datadog_agent_endpoint(const char *agent_url, char *url, size_t url_size,
				  char *socket_path, size_t socket_size)
{
	static const char unix_prefix[] = "unix://";
	socket_path[0] = '\0';
	if (strncasecmp(agent_url, unix_prefix, sizeof(unix_prefix) - 1) == 0) {
		const char *path = agent_url + sizeof(unix_prefix) - 1;
		if (!str_join(socket_path, socket_size, &path, 1))
			return -ENAMETOOLONG;
		/* The host is only what goes into the Host header. */
		agent_url = "http://localhost";
	}
	/* str_join, not snprintf: this runs in the constructor, where each of snprintf's code
	 * pages is a page fault (common/str_join.h). */
	const char *parts[] = {agent_url, DATADOG_AGENT_PATH};
	return str_join(url, url_size, parts, 2) ? 0 : -ENAMETOOLONG;
}

static bool all_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

static bool is_uuid(const char *s, size_t n)
{
	static const size_t dashes[] = {8, 13, 18, 23};
	if (n != 36)
		return false;
	for (size_t i = 0, d = 0; i < n; i++) {
		if (d < 4 && i == dashes[d]) {
			if (s[i] != '-')
				return false;
			d++;
		} else if (!all_hex(s + i, 1)) {
			return false;
		}
	}
	return true;
}

/* ECS: 32 hex digits, '-', a task number. */
static bool is_ecs_task(const char *s, size_t n)
{
	if (n < 34 || !all_hex(s, 32) || s[32] != '-')
		return false;
	for (size_t i = 33; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
	}
	return true;
}

/* Checks one path component ("docker-<id>.scope", "<id>", "cri-containerd-<id>"). */
static bool component_id(const char *s, size_t n, char out[DATADOG_CONTAINER_ID_MAX])
{
	static const char scope[] = ".scope";
	if (n > sizeof(scope) - 1 &&
	    memcmp(s + n - (sizeof(scope) - 1), scope, sizeof(scope) - 1) == 0)
		n -= sizeof(scope) - 1;
	/* Runtimes prefix the id: docker-, crio-, cri-containerd-, libpod-. */
	const char *dash = n > 64 ? memrchr(s, '-', n - 64 + 1) : NULL;
	if (dash && (size_t)(s + n - (dash + 1)) == 64) {
		n -= (size_t)(dash + 1 - s);
		s = dash + 1;
	}
	bool ok = (n == 64 && all_hex(s, n)) || is_uuid(s, n) || is_ecs_task(s, n);
	if (ok) {
		memcpy(out, s, n);
		out[n] = '\0';
	}
	return ok;
}

bool export_datadog_container_id(const char *cgroup, char out[DATADOG_CONTAINER_ID_MAX])
{
	/* Lines are "hierarchy:controllers:path"; the id is a component of the path. */
	for (const char *line = cgroup; line && *line;) {
		const char *eol = strchr(line, '\n');
		size_t len = eol ? (size_t)(eol - line) : strlen(line);
		const char *path = memchr(line, ':', len);
		path = path ? memchr(path + 1, ':', len - (size_t)(path + 1 - line)) : NULL;
		const char *end = line + len;
		for (const char *c = path ? path + 1 : end; c < end;) {
			const char *slash = memchr(c, '/', (size_t)(end - c));
			const char *cend = slash ? slash : end;
			if (cend > c && component_id(c, (size_t)(cend - c), out))
				return true;
			c = cend + 1;
		}
		line = eol ? eol + 1 : NULL;
	}
	return false;
}

void export_datadog_json_string(struct pb_buf *out, const char *s)
{
	pb_raw(out, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[8];
		if (c == '"' || c == '\\') {
			esc[0] = '\\';
			esc[1] = (char)c;
			pb_raw(out, esc, 2);
		} else if (c < 0x20) {
			/* Control characters: \n, \t... or \u00XX (RFC 8259 section 7). */
			const char *named = c == '\n'	? "\\n"
					    : c == '\t' ? "\\t"
					    : c == '\r' ? "\\r"
							: NULL;
			if (named) {
				pb_raw(out, named, 2);
			} else {
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				pb_raw(out, esc, 6);
			}
		} else {
			pb_raw(out, s, 1); /* UTF-8 bytes pass through */
		}
	}
	pb_raw(out, "\"", 1);
}

static void json_raw(struct pb_buf *out, const char *s)
{
	pb_raw(out, s, strlen(s));
}

int export_datadog_event_json(struct pb_buf *out, const struct datadog_event *ev)
{
	char start[DATADOG_TIME_MAX], end[DATADOG_TIME_MAX];
	if (export_datadog_format_rfc3339(ev->start_ns, start) < 0 ||
	    export_datadog_format_rfc3339(ev->end_ns, end) < 0)
		return -EOVERFLOW;
	pb_clear(out);
	json_raw(out, "{\"attachments\":[\"" ATTACHMENT_NAME "\"],\"tags_profiler\":");
	export_datadog_json_string(out, ev->tags);
	json_raw(out, ",\"start\":");
	export_datadog_json_string(out, start);
	json_raw(out, ",\"end\":");
	export_datadog_json_string(out, end);
	json_raw(out, ",\"family\":\"" EVENT_FAMILY "\",\"version\":\"" EVENT_VERSION "\"}");
	return out->failed ? -ENOMEM : 0;
}

/* Appends ",key:value" (no comma first) with commas in value turned into '_'. */
static bool tag_append(char *out, size_t size, size_t *used, const char *key, const char *value)
{
	size_t klen = strlen(key), vlen = strlen(value);
	size_t need = (*used > 0) + klen + 1 + vlen;
	if (*used + need >= size)
		return false;
	if (*used > 0)
		out[(*used)++] = ',';
	memcpy(out + *used, key, klen);
	*used += klen;
	out[(*used)++] = ':';
	for (size_t i = 0; i < vlen; i++)
		out[(*used)++] = value[i] == ',' ? '_' : value[i];
	out[*used] = '\0';
	return true;
}

int export_datadog_tags(char *out, size_t size, const struct datadog_tag_values *v)
{
	char pid[24];
	size_t used = 0;
	snprintf(pid, sizeof(pid), "%d", v->pid);
	const struct {
		const char *key, *value;
	} tags[] = {
	    {"service", v->service},	   {"env", v->env},
	    {"version", v->version},	   {"host", v->host},
	    {"language", "native"},	   {"profiler_version", DDPROF_VERSION},
	    {"runtime-id", v->runtime_id}, {"process_id", pid},
	};
	out[0] = '\0';
	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
		if (tags[i].value && tags[i].value[0] &&
		    !tag_append(out, size, &used, tags[i].key, tags[i].value))
			return -ENOSPC;
	}
	if (v->extra && v->extra[0]) {
		/* Already "k:v,k:v": appended whole. */
		size_t n = strlen(v->extra);
		if (used + 1 + n >= size)
			return -ENOSPC;
		out[used++] = ',';
		memcpy(out + used, v->extra, n + 1);
	}
	return 0;
}

/* Reads host name and container id, once per process image. */
static void load_identity(struct datadog_exporter *de)
{
	/* Acquire pairs with the release below (possibly done by the parent before a
	 * fork): the fields are complete when the flag is seen. */
	if (atomic_load_explicit(&de->identity_ready, memory_order_acquire))
		return;
	if (gethostname(de->host, sizeof(de->host)) != 0)
		de->host[0] = '\0';
	de->host[sizeof(de->host) - 1] = '\0';
	de->container_header[0] = '\0';
	int fd = open(CGROUP_FILE, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char *buf = malloc(CGROUP_READ_MAX);
		ssize_t n = buf ? sys_read(fd, buf, CGROUP_READ_MAX - 1) : -1;
		char id[DATADOG_CONTAINER_ID_MAX];
		if (n > 0) {
			buf[n] = '\0';
			if (export_datadog_container_id(buf, id))
				snprintf(de->container_header, sizeof(de->container_header),
					 "Datadog-Container-ID: %s", id);
		}
		free(buf);
		close(fd);
	}
	/* Release pairs with the acquire above. */
	atomic_store_explicit(&de->identity_ready, true, memory_order_release);
}

static int datadog_prepare(struct exporter *e, const struct export_item *item, struct pb_buf *body,
			   struct http_request *req)
{
	struct datadog_exporter *de = (struct datadog_exporter *)e;
	const struct config *cfg = de->cfg;
	load_identity(de);
	struct datadog_tag_values tv = {
	    .service = cfg->service[0] ? cfg->service : exporter_program_name(),
	    .env = cfg->env,
	    .version = cfg->version,
	    .host = de->host,
	    .runtime_id = item->runtime_id,
	    .pid = item->pid,
	    .extra = cfg->tags,
	};
	int rc = export_datadog_tags(de->tags, sizeof(de->tags), &tv);
	if (rc < 0)
		return rc;
	/* event.json lives only until it is copied into the body: a buffer kept in the
	 * exporter could be caught mid-realloc by a fork and then reused by the child. */
	struct datadog_event ev = {de->tags, item->start_ns, item->end_ns};
	struct pb_buf event;
	pb_init(&event);
	rc = export_datadog_event_json(&event, &ev);
	if (rc < 0) {
		pb_free(&event);
		return rc;
	}
	char boundary[MULTIPART_BOUNDARY_MAX], ctype[MULTIPART_CONTENT_TYPE_MAX];
	struct multipart mp;
	multipart_random_boundary(boundary);
	multipart_begin(&mp, body, boundary);
	multipart_add(&mp, "event", "event.json", "application/json", event.data, event.len);
	multipart_add(&mp, ATTACHMENT_NAME, ATTACHMENT_NAME, "application/octet-stream",
		      item->pprof_gz, item->len);
	rc = multipart_end(&mp);
	pb_free(&event);
	if (rc < 0)
		return rc;
	multipart_content_type(&mp, ctype);
	snprintf(de->content_type_header, sizeof(de->content_type_header), "Content-Type: %s",
		 ctype);

	memset(req, 0, sizeof(*req));
	req->url = de->url;
	req->unix_socket = de->socket_path[0] ? de->socket_path : NULL;
	req->body = body->data;
	req->body_len = body->len;
	req->headers[req->nheaders++] = de->content_type_header;
	req->headers[req->nheaders++] = "DD-EVP-ORIGIN: libddprof";
	req->headers[req->nheaders++] = "DD-EVP-ORIGIN-VERSION: " DDPROF_VERSION;
	if (de->container_header[0])
		req->headers[req->nheaders++] = de->container_header;
	if (de->agentless)
		req->headers[req->nheaders++] = de->key_header;
	return 0;
}

static void datadog_destroy(struct exporter *e)
{
	struct datadog_exporter *de = (struct datadog_exporter *)e;
	/* The key must not linger in freed memory. */
	explicit_bzero(de->key_header, sizeof(de->key_header));
	free(de);
}

struct exporter *export_datadog_new(const struct config *cfg, int agentless)
{
	struct datadog_exporter *de = calloc(1, sizeof(*de));
	char shown[CONFIG_URL_MAX];
	if (!de)
		return NULL;
	de->cfg = cfg;
	de->agentless = agentless;
	int rc;
	if (agentless) {
		const char *key[] = {"DD-API-KEY: ", cfg->api_key};
		const char *url = cfg->agentless_url;
		rc = str_join(de->url, sizeof(de->url), &url, 1) ? 0 : -ENAMETOOLONG;
		str_join(de->key_header, sizeof(de->key_header), key, 2);
	} else {
		rc = export_datadog_agent_endpoint(cfg->agent_url, de->url, sizeof(de->url),
						   de->socket_path, sizeof(de->socket_path));
	}
	de->base.name = agentless ? "datadog-agentless" : "datadog-agent";
	const char *label[] = {
	    de->base.name, " (",
	    config_redact_url(shown, agentless ? cfg->agentless_url : cfg->agent_url), ")"};
	str_join(de->base.label, sizeof(de->base.label), label, 4);
	if (rc < 0) {
		log_warn("%s: URL too long; this exporter is disabled", de->base.label);
		free(de);
		return NULL;
	}
	ratelimit_init(&de->base.warn, RATELIMIT_DEFAULT_INTERVAL_NS);
	de->base.prepare = datadog_prepare;
	de->base.destroy = datadog_destroy;
	return &de->base;
}
