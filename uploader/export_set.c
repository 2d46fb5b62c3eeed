/*
 * export_set.c - the process's exporters and the sending of one profile (see
 * export_set.h).
 *
 * Context: the uploader thread; export_set_count from any thread; the fork child
 * handler for export_set_atfork_child.
 */
#include "export_set.h"

#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "common/fork_child.h"
#include "common/identity.h"
#include "common/log.h"
#include "uploader/curl_api.h"
#include "uploader/export_datadog.h"
#include "uploader/http_send.h"
#include "uploader/ratelimit.h"

static struct exporter *exporters[MAX_EXPORTERS];
/* The list's length: read by uploader_stop (under the lock export_set_make publishes
 * with) and by the fork child handler, on the page the child touches anyway. */
FORK_CHILD_DATA static size_t n_exporters;
static bool made; /* a fork child inherits its parent's list */
/* An HTTP send is in progress (its exporters' in_flight_since_ns are set): read by the
 * fork child handler first, so that most children never read the exporters (heap). */
FORK_CHILD_DATA static _Atomic bool sends_in_flight;

void export_set_client_init(struct export_client *c)
{
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < MAX_EXPORTERS; i++)
		pb_init(&c->bodies[i]);
}

/* Made by the uploader thread, not in the constructor: their memory is the only heap a
 * short program would otherwise owe us (malloc's set-up is a noticeable share of a short
 * program's start-up: BENCHMARKS.md, Start-up). */
void export_set_make(const struct config *cfg, pthread_mutex_t *lock)
{
	if (made)
		return;
	size_t n = 0;
	struct exporter *e[MAX_EXPORTERS];
	if (cfg->output_dir[0])
		e[n++] = export_file_new(cfg->output_dir);
	if (cfg->export_agent)
		e[n++] = export_datadog_new(cfg, false);
	if (cfg->export_agentless)
		e[n++] = export_datadog_new(cfg, true);
	if (cfg->export_pyroscope)
		e[n++] = export_pyroscope_new(cfg);
	pthread_mutex_lock(lock);
	for (size_t i = 0; i < n; i++)
		if (e[i])
			exporters[n_exporters++] = e[i];
	made = true;
	pthread_mutex_unlock(lock);
	for (size_t i = 0; i < n_exporters; i++)
		log_debug("exporter: %s", exporters[i]->label);
	if (n_exporters == 0)
		log_info("no exporter configured: profiles are collected and discarded");
}

size_t export_set_count(void)
{
	return n_exporters;
}

/* Synchronous exporters (file). */
static void send_sync(struct exporter *e, const struct export_item *item, struct outcomes *o)
{
	int rc = e->send(e, item);
	upload_stats_outcome_add(o, rc == 0, rc == 0 ? 0 : 1, 0);
	/* A process that dropped its privileges since start (identity.h): counted only. */
	bool dropped = (rc == -EACCES || rc == -EPERM) && identity_changed();
	if (rc < 0 && !dropped &&
	    ratelimit_allow(&e->warn, HTTP_FAIL_SETUP, clock_now_ns(CLOCK_MONOTONIC), NULL))
		log_warn("%s: cannot export the profile: %s", e->label, strerror(-rc));
	else if (dropped)
		log_debug("%s: cannot export the profile as this user: %s", e->label,
			  strerror(-rc));
}

void export_set_send(struct export_client *c, const struct export_item *item, bool final,
		     uint64_t deadline, _Atomic uint64_t *abort_ns, uint64_t timeout_ns,
		     void (*on_client)(void), struct outcomes *o)
{
	struct http_job jobs[MAX_EXPORTERS];
	struct exporter *http_exporters[MAX_EXPORTERS];
	size_t njobs = 0;
	for (size_t i = 0; i < n_exporters; i++) {
		struct exporter *e = exporters[i];
		if (e->send) {
			send_sync(e, item, o);
			continue;
		}
		if (final && e->unresponsive) {
			/* The exit never waits on an intake known not to answer. */
			upload_stats_outcome_add(o, false, 0, 0);
			log_debug("%s: did not answer its last request in time; not waiting for "
				  "it at exit: final profile dropped",
				  e->label);
			continue;
		}
		struct http_job *j = &jobs[njobs];
		memset(j, 0, sizeof(*j));
		http_exporters[njobs] = e;
		int rc = e->prepare(e, item, &c->bodies[i], &j->req);
		if (rc < 0) {
			upload_stats_outcome_add(o, false, 0, 0);
			log_warn("%s: cannot build the request: %s", e->label, strerror(-rc));
			continue;
		}
		j->label = e->label;
		j->warn = &e->warn;
		njobs++;
	}
	if (njobs == 0)
		return;
	if (!c->http && !c->http_unavailable) {
		c->http = http_send_client_new(timeout_ns);
		c->http_unavailable = c->http == NULL;
		if (c->http && on_client)
			on_client();
	}
	if (!c->http) {
		for (size_t i = 0; i < njobs; i++)
			upload_stats_outcome_add(o, false, 0,
						 0); /* libcurl missing: warned once by curl_api */
		return;
	}
	uint64_t start = clock_now_ns(CLOCK_MONOTONIC);
	for (size_t i = 0; i < njobs; i++)
		http_exporters[i]->in_flight_since_ns = start;
	atomic_store_explicit(&sends_in_flight, true, memory_order_relaxed);
	http_send_all(c->http, jobs, njobs, deadline, abort_ns, final);
	for (size_t i = 0; i < njobs; i++) {
		upload_stats_outcome_add(o, jobs[i].rc == 0, jobs[i].failed_attempts,
					 jobs[i].bytes_sent);
		http_exporters[i]->in_flight_since_ns = 0;
		http_exporters[i]->unresponsive =
		    jobs[i].rc != 0 && jobs[i].fail == HTTP_FAIL_TIMEOUT;
	}
	atomic_store_explicit(&sends_in_flight, false, memory_order_relaxed);
}

void export_set_housekeep(void)
{
	for (size_t i = 0; i < n_exporters; i++)
		if (exporters[i]->housekeep)
			exporters[i]->housekeep(exporters[i]);
}

FORK_CHILD_PATH void export_set_atfork_child(void)
{
	/* The warning rate limiters are kept: a fork storm warns like one process. The
	 * exporters are on the heap: read and written only when a send was in flight
	 * (each page a child touches costs it a page fault). */
	if (!atomic_load_explicit(&sends_in_flight, memory_order_relaxed))
		return;
	/* The parent's thread may have been inside libcurl or its TLS library, whose locks
	 * a thread that is not here may hold: this process does not use them. */
	if (curl_api_loaded())
		http_send_forbid_curl();
	for (size_t i = 0; i < n_exporters; i++) {
		if (exporters[i]->in_flight_since_ns) {
			exporters[i]->unresponsive = true;
			exporters[i]->in_flight_since_ns = 0;
		}
	}
	atomic_store_explicit(&sends_in_flight, false, memory_order_relaxed);
}
