/*
 * exporter.h - where serialized profiles go.
 *
 * An exporter receives each gzip pprof with its time bounds. The file exporter is the
 * first; the HTTP exporters (Datadog agent, agentless, Pyroscope) implement the same
 * interface. Exporters run one after another on the uploader thread.
 * Context: uploader thread only.
 */
#ifndef DDPROF_UPLOADER_EXPORTER_H
#define DDPROF_UPLOADER_EXPORTER_H

#include <stddef.h>
#include <stdint.h>

struct export_item {
	const uint8_t *pprof_gz; /* not owned */
	size_t len;
	uint64_t start_ns, end_ns; /* CLOCK_REALTIME bounds of the samples */
	int pid;
	uint64_t seq; /* 0, 1, 2... per process */
};

struct exporter {
	const char *name;
	/* 0 or negative errno. */
	int (*send)(struct exporter *e, const struct export_item *item);
	void (*destroy)(struct exporter *e);
};

/* File exporter writing into dir (created 0700 if missing). NULL on failure (logged). */
struct exporter *export_file_new(const char *dir);

#endif
