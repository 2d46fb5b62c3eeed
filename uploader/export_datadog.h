/*
 * export_datadog.h - the Datadog exporters: agent (default) and agentless intake.
 *
 * Owns: what PROTOCOL.md says Datadog receives: POST {agent}/profiling/v1/input (or the
 * agentless https://intake.profile.$DD_SITE/api/v2/profile with DD-API-KEY), a
 * multipart body with event.json (attachments, tags_profiler, start/end in RFC 3339 UTC
 * with nanoseconds, family native, version 4) and profile.pprof, and the headers
 * DD-EVP-ORIGIN, DD-EVP-ORIGIN-VERSION and Datadog-Container-ID (from
 * /proc/self/cgroup, when the process runs in a container).
 *  - The API key exists only in the config struct and the header line given to libcurl:
 *    it is never logged (labels carry the URL only) and config refuses non-https
 *    agentless URLs, so it never travels in clear.
 *  - Host name and container id are read once, on the uploader thread at the first
 *    profile (not in the constructor).
 * Context: uploader thread only (creation from export_set_make). The helpers below are
 * pure and exposed for the unit tests.
 */
#ifndef DDPROF_UPLOADER_EXPORT_DATADOG_H
#define DDPROF_UPLOADER_EXPORT_DATADOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/config.h"
#include "common/pb.h"
#include "uploader/exporter.h"

#define DATADOG_TIME_MAX 32   /* "2026-11-22T10:00:00.000000000Z" + NUL */
#define DATADOG_TAGS_MAX 4608 /* service, env, version, host (256 each) + DD_TAGS + ours */
#define DATADOG_CONTAINER_ID_MAX 80
#define DATADOG_AGENT_PATH "/profiling/v1/input"

/* ns since the epoch (UTC) as RFC 3339 with nanoseconds. 0 or -EOVERFLOW. */
int export_datadog_format_rfc3339(uint64_t ns, char out[DATADOG_TIME_MAX]);

/* A random UUID v4 (RFC 4122) as 36 lowercase characters. */
void export_datadog_runtime_id_new(char out[EXPORT_RUNTIME_ID_MAX]);

/*
 * The request URL of the agent at agent_url (config's agent_url): http(s) URLs get
 * DATADOG_AGENT_PATH appended; "unix:///path" becomes http://localhost + the path in
 * *socket_path. 0 or -ENAMETOOLONG.
 */
int export_datadog_agent_endpoint(const char *agent_url, char *url, size_t url_size,
				  char *socket_path, size_t socket_size);

/* The container id in the text of /proc/self/cgroup: a 64-hex-digit id (docker,
 * containerd, cri-o, podman, with or without their prefixes and .scope), a UUID, or an
 * ECS task id (32 hex digits, '-', digits). False when none. */
bool export_datadog_container_id(const char *cgroup, char out[DATADOG_CONTAINER_ID_MAX]);

/* Appends s to out as a JSON string (quotes included, escaped per RFC 8259). */
void export_datadog_json_string(struct pb_buf *out, const char *s);

struct datadog_event {
	const char *tags; /* tags_profiler */
	uint64_t start_ns, end_ns;
};

/* event.json into out (cleared first). 0, -ENOMEM or -EOVERFLOW. */
int export_datadog_event_json(struct pb_buf *out, const struct datadog_event *ev);

/* Identity fields of tags_profiler; every one but the DD_* ones always present. */
struct datadog_tag_values {
	const char *service, *env, *version; /* "" = absent (service never is) */
	const char *host;
	const char *runtime_id;
	int pid;
	const char *extra; /* DD_TAGS, already "k:v,k:v" */
};

/* tags_profiler: "service:...,env:...,version:...,host:...,language:native,
 * profiler_version:...,runtime-id:...,process_id:...,<DD_TAGS>". Commas inside a value
 * become '_'. -ENOSPC when it does not fit. */
int export_datadog_tags(char *out, size_t size, const struct datadog_tag_values *v);

#endif
