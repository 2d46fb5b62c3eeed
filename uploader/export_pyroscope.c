/*
 * export_pyroscope.c - Grafana Pyroscope exporter (see export_pyroscope.h).
 *
 * Context: uploader thread (prepare; creation: export_set_make). The series name and
 * headers depend only on the configuration and are built at creation; the URL (from,
 * until) and body are rebuilt for each profile.
 */
#include "uploader/export_pyroscope.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "uploader/multipart.h"

#define SPY_NAME "libddprof"
#define HEADER_MAX (2 * CONFIG_SECRET_MAX + 64)
/* For Pyroscope < 1.0 (newer servers keep every sample type of the pprof): describe
 * cpu-samples as its "cpu" type; cpu-time has no unit those servers know. */
#define SAMPLE_TYPE_CONFIG                                                                         \
	"{\"cpu-samples\":{\"units\":\"samples\",\"display-name\":\"cpu\",\"sampled\":true}}"
#define LABELS_MAX 64 /* labels kept in a series name */

struct pyroscope_exporter {
	struct exporter base;
	char server[CONFIG_URL_MAX];
	char name[PYROSCOPE_NAME_MAX];
	char auth_header[HEADER_MAX];
	char tenant_header[CONFIG_TAG_MAX + 32];
	/* Per profile. */
	char url[PYROSCOPE_URL_MAX];
	char content_type_header[MULTIPART_CONTENT_TYPE_MAX + 16];
};

int export_pyroscope_url_encode(char *out, size_t size, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			     (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
		if (n + (plain ? 1 : 3) >= size)
			return -ENOSPC;
		if (plain) {
			out[n++] = (char)c;
		} else {
			out[n++] = '%';
			out[n++] = hex[c >> 4];
			out[n++] = hex[c & 0xF];
		}
	}
	out[n] = '\0';
	return 0;
}

/* Appends s[0..len) with the name syntax's characters replaced; label names (key)
 * keep [A-Za-z0-9_.] only. */
static bool append_clean(char *out, size_t size, size_t *n, const char *s, size_t len, bool key)
{
	if (*n + len >= size)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		bool ok = key ? ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
				 (c >= '0' && c <= '9') || c == '_' || c == '.')
			      : !strchr("{},=", c);
		out[(*n)++] = ok ? c : '_';
	}
	out[*n] = '\0';
	return true;
}

static bool append_raw(char *out, size_t size, size_t *n, char c)
{
	if (*n + 1 >= size)
		return false;
	out[(*n)++] = c;
	out[*n] = '\0';
	return true;
}

/* Whether label key k (klen) is among the first nkeys recorded. */
static bool key_taken(const char *const *keys, const size_t *klens, size_t nkeys, const char *k,
		      size_t klen)
{
	for (size_t i = 0; i < nkeys; i++) {
		if (klens[i] == klen && memcmp(keys[i], k, klen) == 0)
			return true;
	}
	return false;
}

int export_pyroscope_series_name(char *out, size_t size, const char *app,
				 const char *pyroscope_tags, const char *dd_tags)
{
	const char *lists[] = {pyroscope_tags, dd_tags};
	const char *keys[LABELS_MAX];
	size_t klens[LABELS_MAX], nkeys = 0, n = 0;
	if (size == 0)
		return -ENOSPC;
	out[0] = '\0';
	if (!append_clean(out, size, &n, app, strlen(app), false))
		return -ENOSPC;
	for (size_t l = 0; l < 2; l++) {
		for (const char *p = lists[l]; p && *p;) {
			size_t len = strcspn(p, ",");
			const char *colon = memchr(p, ':', len);
			if (colon && nkeys < LABELS_MAX &&
			    !key_taken(keys, klens, nkeys, p, (size_t)(colon - p))) {
				keys[nkeys] = p;
				klens[nkeys++] = (size_t)(colon - p);
				if (!append_raw(out, size, &n, nkeys == 1 ? '{' : ',') ||
				    !append_clean(out, size, &n, p, (size_t)(colon - p), true) ||
				    !append_raw(out, size, &n, '=') ||
				    !append_clean(out, size, &n, colon + 1,
						  len - (size_t)(colon + 1 - p), false))
					return -ENOSPC;
			}
			p += len + (p[len] == ',');
		}
	}
	if (nkeys > 0 && !append_raw(out, size, &n, '}'))
		return -ENOSPC;
	return 0;
}

int export_pyroscope_ingest_url(char *out, size_t size, const char *server, const char *name,
				uint64_t start_ns, uint64_t end_ns)
{
	char enc[3 * PYROSCOPE_NAME_MAX];
	if (export_pyroscope_url_encode(enc, sizeof(enc), name) < 0)
		return -ENOSPC;
	int n = snprintf(out, size,
			 "%s/ingest?name=%s&from=%llu&until=%llu&format=pprof&spyName=" SPY_NAME,
			 server, enc, (unsigned long long)(start_ns / NS_PER_SEC),
			 (unsigned long long)(end_ns / NS_PER_SEC));
	return n < 0 || (size_t)n >= size ? -ENOSPC : 0;
}

int export_pyroscope_basic_auth_header(char *out, size_t size, const char *user,
				       const char *password)
{
	static const char b64[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	static const char prefix[] = "Authorization: Basic ";
	char plain[2 * CONFIG_SECRET_MAX];
	int len = snprintf(plain, sizeof(plain), "%s:%s", user, password);
	if (len < 0 || (size_t)len >= sizeof(plain) ||
	    sizeof(prefix) + ((size_t)len + 2) / 3 * 4 > size)
		return -ENOSPC;
	size_t n = sizeof(prefix) - 1;
	memcpy(out, prefix, n);
	for (size_t i = 0; i < (size_t)len; i += 3) {
		/* 3 bytes -> 4 characters, '=' padding past the end. */
		uint32_t v = (uint32_t)(unsigned char)plain[i] << 16;
		size_t left = (size_t)len - i;
		if (left > 1)
			v |= (uint32_t)(unsigned char)plain[i + 1] << 8;
		if (left > 2)
			v |= (unsigned char)plain[i + 2];
		out[n++] = b64[(v >> 18) & 63];
		out[n++] = b64[(v >> 12) & 63];
		out[n++] = left > 1 ? b64[(v >> 6) & 63] : '=';
		out[n++] = left > 2 ? b64[v & 63] : '=';
	}
	out[n] = '\0';
	explicit_bzero(plain, sizeof(plain));
	return 0;
}

static int pyroscope_prepare(struct exporter *e, const struct export_item *item,
			     struct pb_buf *body, struct http_request *req)
{
	struct pyroscope_exporter *pe = (struct pyroscope_exporter *)e;
	int rc = export_pyroscope_ingest_url(pe->url, sizeof(pe->url), pe->server, pe->name,
					     item->start_ns, item->end_ns);
	if (rc < 0)
		return rc;
	char boundary[MULTIPART_BOUNDARY_MAX], ctype[MULTIPART_CONTENT_TYPE_MAX];
	struct multipart mp;
	multipart_random_boundary(boundary);
	multipart_begin(&mp, body, boundary);
	multipart_add(&mp, "profile", "profile.pprof", "application/octet-stream", item->pprof_gz,
		      item->len);
	multipart_add(&mp, "sample_type_config", "sample_type_config.json", "application/json",
		      SAMPLE_TYPE_CONFIG, strlen(SAMPLE_TYPE_CONFIG));
	rc = multipart_end(&mp);
	if (rc < 0)
		return rc;
	multipart_content_type(&mp, ctype);
	snprintf(pe->content_type_header, sizeof(pe->content_type_header), "Content-Type: %s",
		 ctype);
	memset(req, 0, sizeof(*req));
	req->url = pe->url;
	req->body = body->data;
	req->body_len = body->len;
	req->headers[req->nheaders++] = pe->content_type_header;
	if (pe->auth_header[0])
		req->headers[req->nheaders++] = pe->auth_header;
	if (pe->tenant_header[0])
		req->headers[req->nheaders++] = pe->tenant_header;
	return 0;
}

static void pyroscope_destroy(struct exporter *e)
{
	struct pyroscope_exporter *pe = (struct pyroscope_exporter *)e;
	explicit_bzero(pe->auth_header, sizeof(pe->auth_header));
	free(pe);
}

struct exporter *export_pyroscope_new(const struct config *cfg)
{
	struct pyroscope_exporter *pe = calloc(1, sizeof(*pe));
	char shown[CONFIG_URL_MAX];
	if (!pe)
		return NULL;
	pe->base.name = "pyroscope";
	snprintf(pe->base.label, sizeof(pe->base.label), "pyroscope (%s)",
		 config_redact_url(shown, cfg->pyroscope_url));
	snprintf(pe->server, sizeof(pe->server), "%s", cfg->pyroscope_url);
	const char *app = cfg->pyroscope_app[0] ? cfg->pyroscope_app
			  : cfg->service[0]	? cfg->service
						: exporter_program_name();
	int rc = export_pyroscope_series_name(pe->name, sizeof(pe->name), app, cfg->pyroscope_tags,
					      cfg->tags);
	if (rc == 0 && cfg->pyroscope_user[0] && cfg->pyroscope_password[0])
		rc = export_pyroscope_basic_auth_header(pe->auth_header, sizeof(pe->auth_header),
							cfg->pyroscope_user,
							cfg->pyroscope_password);
	else if (rc == 0 && cfg->pyroscope_token[0])
		snprintf(pe->auth_header, sizeof(pe->auth_header), "Authorization: Bearer %s",
			 cfg->pyroscope_token);
	if (cfg->pyroscope_tenant[0])
		snprintf(pe->tenant_header, sizeof(pe->tenant_header), "X-Scope-OrgID: %s",
			 cfg->pyroscope_tenant);
	if (rc < 0) {
		log_warn("%s: application name and labels too long; this exporter is disabled",
			 pe->base.label);
		pyroscope_destroy(&pe->base);
		return NULL;
	}
	ratelimit_init(&pe->base.warn, RATELIMIT_DEFAULT_INTERVAL_NS);
	pe->base.prepare = pyroscope_prepare;
	pe->base.destroy = pyroscope_destroy;
	return &pe->base;
}
