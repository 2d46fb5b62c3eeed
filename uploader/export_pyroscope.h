/*
 * export_pyroscope.h - the Grafana Pyroscope exporter.
 *
 * Owns: POST {server}/ingest?name=<app>{k=v,...}&from=<s>&until=<s>&format=pprof
 * &spyName=libddprof (name URL-encoded) with a multipart body holding the gzip pprof in
 * part "profile" and, for Pyroscope servers older than 1.0 which drop sample types they
 * do not know, a "sample_type_config" part describing ours; headers Authorization
 * (Bearer PYROSCOPE_AUTH_TOKEN, or Basic from PYROSCOPE_BASIC_AUTH_USER/PASSWORD, which
 * wins when both are set, as in the Pyroscope SDKs) and X-Scope-OrgID.
 *  - Application name: PYROSCOPE_APPLICATION_NAME, else DD_SERVICE, else the program.
 *  - Labels: PYROSCOPE_TAGS, then DD_TAGS entries whose key is not taken yet. Label
 *    names keep [A-Za-z0-9_.] (others become '_'); values and the application name
 *    lose the characters of the name syntax ("{},=") to '_'.
 *  - from/until: whole Unix seconds, rounded down, as the Pyroscope SDKs send them, so
 *    one profile's until equals the next one's from.
 * Context: uploader thread only (creation from export_set_make). The helpers below are
 * pure and exposed for the unit tests.
 */
#ifndef DDPROF_UPLOADER_EXPORT_PYROSCOPE_H
#define DDPROF_UPLOADER_EXPORT_PYROSCOPE_H

#include <stddef.h>
#include <stdint.h>

#include "uploader/exporter.h"

#define PYROSCOPE_NAME_MAX (CONFIG_TAG_MAX + 2 * CONFIG_TAGS_MAX + 8)
#define PYROSCOPE_URL_MAX (CONFIG_URL_MAX + 3 * PYROSCOPE_NAME_MAX + 128)

/* Percent-encodes s (everything but RFC 3986 unreserved characters). -ENOSPC if it
 * does not fit. */
int export_pyroscope_url_encode(char *out, size_t size, const char *s);

/* "app{k=v,k2=v2}" (just "app" without labels) from the application name and the two
 * normalized "k:v,k:v" lists (either may be NULL). -ENOSPC if it does not fit. */
int export_pyroscope_series_name(char *out, size_t size, const char *app,
				 const char *pyroscope_tags, const char *dd_tags);

/* The ingest URL for series name (not yet encoded) and the profile's bounds in ns. */
int export_pyroscope_ingest_url(char *out, size_t size, const char *server, const char *name,
				uint64_t start_ns, uint64_t end_ns);

/* "Authorization: Basic <base64(user:password)>". -ENOSPC if it does not fit. */
int export_pyroscope_basic_auth_header(char *out, size_t size, const char *user,
				       const char *password);

#endif
