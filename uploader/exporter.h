/*
 * exporter.h - where serialized profiles go.
 *
 * An exporter receives each gzip pprof with its time bounds. Two shapes:
 *  - synchronous (file): send() delivers the profile itself;
 *  - HTTP (Datadog agent, agentless, Pyroscope): prepare() describes one request (URL,
 *    headers, multipart body) and http_send.c sends every exporter's request side by
 *    side, with retries, within the period.
 * Exporters are made once, by export_set_make as the uploader thread starts
 * (configuration only: no I/O, no libcurl), and never change afterwards except for what
 * prepare() fills for the profile at hand, their warning rate limiter and the
 * uploader's in-flight/unresponsive marks, so a fork child can go on using them.
 * Context: uploader thread only (creation included: export_set_make).
 */
#ifndef DDPROF_UPLOADER_EXPORTER_H
#define DDPROF_UPLOADER_EXPORTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/pb.h"
#include "uploader/http_send.h"
#include "uploader/ratelimit.h"

#define EXPORT_RUNTIME_ID_MAX 37 /* UUID text + NUL */
#define EXPORT_LABEL_MAX (CONFIG_URL_MAX + 32)

struct export_item {
	const uint8_t *pprof_gz; /* not owned */
	size_t len;
	uint64_t start_ns, end_ns; /* CLOCK_REALTIME bounds of the samples */
	int pid;
	uint64_t seq;		/* 0, 1, 2... per process */
	const char *runtime_id; /* this process's UUID (a fork child gets its own) */
};

struct exporter {
	const char *name;
	/* For logs: name and URL without credentials. */
	char label[EXPORT_LABEL_MAX];
	/* Synchronous exporters: 0 or negative errno. NULL for HTTP exporters. */
	int (*send)(struct exporter *e, const struct export_item *item);
	/* HTTP exporters: fills *req for item, building the body into body (owned by the
	 * caller, reused across profiles). Pointers in *req stay valid until the next
	 * prepare. 0 or negative errno. NULL for synchronous exporters. */
	int (*prepare)(struct exporter *e, const struct export_item *item, struct pb_buf *body,
		       struct http_request *req);
	void (*destroy)(struct exporter *e);
	/* Optional: work of the exporter's own once per upload cycle, whether or not the
	 * cycle had a profile (the file exporter empties spools: file_spool.h). */
	void (*housekeep)(struct exporter *e);
	struct ratelimit warn; /* failure warnings of this exporter */
	/* HTTP exporters, kept by the uploader and inherited by fork children: */
	uint64_t in_flight_since_ns; /* CLOCK_MONOTONIC start of the send in progress, or 0 */
	bool unresponsive;	     /* its last request got no answer in time (see uploader.c) */
};

/* File exporter writing into dir (created 0700 if missing). NULL on failure (logged). */
struct exporter *export_file_new(const char *dir);

/* Datadog agent (agentless false) or agentless intake exporter for cfg (which must
 * outlive it). NULL on failure (logged). Defined in export_datadog.c. */
struct exporter *export_datadog_new(const struct config *cfg, int agentless);

/* Grafana Pyroscope exporter for cfg (which must outlive it). Defined in
 * export_pyroscope.c. */
struct exporter *export_pyroscope_new(const struct config *cfg);

/* The program's name: the default service and Pyroscope application name. */
const char *exporter_program_name(void);

#endif
