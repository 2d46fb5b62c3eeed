/*
 * export_set.h - the process's exporters: made from the configuration, and each
 * profile handed to all of them.
 *
 * Owns: the exporter list (file, Datadog agent, agentless, Pyroscope: exporter.h),
 * made once by the uploader thread as it starts (a fork child inherits its parent's
 * list); the synchronous sends; one profile's HTTP jobs (http_send.h), and which
 * exporters have a request in flight, which a fork child must not wait for.
 * Context: the uploader thread, except export_set_count (any thread, under the lock
 * export_set_make was given) and export_set_atfork_child (fork child handler).
 */
#ifndef DDPROF_UPLOADER_EXPORT_SET_H
#define DDPROF_UPLOADER_EXPORT_SET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/config.h"
#include "common/pb.h"
#include "uploader/exporter.h"
#include "uploader/http_send.h"
#include "uploader/upload_stats.h"

/* What one uploader thread owns for sending (on its stack): a request body per HTTP
 * exporter, reused every period, and the HTTP client, made at the first HTTP export
 * (which loads libcurl only for https://). */
struct export_client {
	struct pb_buf bodies[MAX_EXPORTERS];
	struct http_client *http;
	bool http_unavailable; /* no client could be made (memory): not tried again */
};

void export_set_client_init(struct export_client *c);

/* The uploader thread, as it starts: makes the exporters cfg asks for, once per
 * process (configuration only: no file, socket or library is opened), publishing the
 * list under lock. */
void export_set_make(const struct config *cfg, pthread_mutex_t *lock);

/* Exporters made so far (0 before export_set_make). */
size_t export_set_count(void);

/*
 * Hands item to every exporter: files at once, HTTP ones until deadline
 * (CLOCK_MONOTONIC) or *abort_ns, whichever comes first (http_send_all). final: the
 * exit flush, which skips an intake that did not answer its last request in time.
 * on_client: called once when the HTTP client is made. Adds each delivery to *o.
 */
void export_set_send(struct export_client *c, const struct export_item *item, bool final,
		     uint64_t deadline, _Atomic uint64_t *abort_ns, uint64_t timeout_ns,
		     void (*on_client)(void), struct outcomes *o);

/* Each upload cycle, profile or not: every exporter's housekeeping (exporter.h). */
void export_set_housekeep(void);

/* Fork child: a request the parent was still waiting for marks its exporter
 * unresponsive here (the intake may be hanging). Touches the exporters' memory only
 * when a send was in flight. */
void export_set_atfork_child(void);

#endif
