/*
 * request_headers.h - looking up a header line in a prepared http_request, for the
 * exporter suites (test_export_datadog.c, test_export_pyroscope.c). Test mains only.
 */
#ifndef DDPROF_TEST_UNIT_REQUEST_HEADERS_H
#define DDPROF_TEST_UNIT_REQUEST_HEADERS_H

#include <string.h>

#include "uploader/http_send.h"

/* The first header line of req starting with prefix, or NULL. */
static inline const char *find_header(const struct http_request *req, const char *prefix)
{
	for (size_t i = 0; i < req->nheaders; i++) {
		if (strncmp(req->headers[i], prefix, strlen(prefix)) == 0)
			return req->headers[i];
	}
	return NULL;
}

#endif
