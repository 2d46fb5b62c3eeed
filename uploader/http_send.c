/*
 * http_send.c - HTTP requests with retries, backoff and deadlines (see http_send.h).
 *
 * Context: the uploader thread only. The loop below never sleeps longer than
 * POLL_SLICE_MS between deadline checks, so an exit flush deadline set by another
 * thread (abort_ns) is noticed within that time even while a request hangs.
 * http:// and unix-socket requests go through http_plain.c (no libcurl in the process:
 * see http_plain.h for why); https:// through libcurl's multi interface, loaded at the
 * first https request. Both are non-blocking, for that reason and so that the
 * exporters' requests of one profile run side by side.
 */
#include "uploader/http_send.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/bg_host.h"
#include "common/clock.h"
#include "common/fork_child.h"
#include "common/log.h"
#include "uploader/curl_api.h"
#include "uploader/http_plain.h"
#include "common/sys_io.h"

/* Longest wait between two looks at the deadlines: bounds how late an exit notices its
 * flush deadline; 50 wake-ups per second only while a request is pending. */
#define POLL_SLICE_MS 20
#define NS_PER_MS 1000000ULL
#define USER_AGENT "libddprof/" DDPROF_VERSION

enum job_state { JOB_WAITING, JOB_RUNNING, JOB_DONE };

static struct bg_host *idle_host;
static unsigned idle_services;

void http_send_set_host(struct bg_host *h, unsigned services)
{
	idle_host = h;
	idle_services = services;
}

struct http_client {
	const struct curl_api *curl; /* NULL until the first https:// request */
	CURLM *multi;
	CURL *easy[HTTP_MAX_SLOTS]; /* one per job slot, reused: keeps connections warm */
	struct http_plain plain[HTTP_MAX_SLOTS];
	bool is_plain[HTTP_MAX_SLOTS]; /* the slot's attempt uses http_plain */
	bool curl_unavailable;	       /* libcurl could not be loaded: not tried again */
	uint64_t timeout_ns;
	uint64_t rng; /* xorshift64 state for the jitter */
};

/* Transport errors that the same request will hit again however long we wait. */
static bool curl_error_is_permanent(int code)
{
	switch (code) {
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
	case CURLE_NOT_BUILT_IN:
	case CURLE_BAD_FUNCTION_ARGUMENT:
	case CURLE_UNKNOWN_OPTION:
	case CURLE_OUT_OF_MEMORY:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
		return true;
	default:
		return false;
	}
}

static bool status_is_transient(long status)
{
	/* 408 Request Timeout, 429 Too Many Requests, 5xx: the intake says "later". */
	return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

enum http_verdict http_send_classify(int curl_code, long status)
{
	if (curl_code != CURLE_OK)
		return curl_error_is_permanent(curl_code) ? HTTP_REJECTED : HTTP_RETRY;
	if (status >= 200 && status <= 299)
		return HTTP_DELIVERED;
	return status_is_transient(status) ? HTTP_RETRY : HTTP_REJECTED;
}

enum http_fail http_send_fail_kind(int curl_code, long status)
{
	if (curl_code == CURLE_OPERATION_TIMEDOUT)
		return HTTP_FAIL_TIMEOUT;
	if (curl_code != CURLE_OK)
		return curl_error_is_permanent(curl_code) ? HTTP_FAIL_SETUP : HTTP_FAIL_CONNECT;
	if (status >= 200 && status <= 299)
		return HTTP_FAIL_NONE;
	return status_is_transient(status) ? HTTP_FAIL_SERVER : HTTP_FAIL_REJECTED;
}

uint64_t http_send_backoff_ns(unsigned retry, uint64_t random)
{
	uint64_t d = HTTP_BACKOFF_CAP_NS;
	/* base << retry, without shifting past the cap (or past 64 bits). */
	if (retry < 32 && (HTTP_BACKOFF_BASE_NS << retry) < HTTP_BACKOFF_CAP_NS)
		d = HTTP_BACKOFF_BASE_NS << retry;
	/* Equal jitter: uniform in [d/2, d]. */
	return d / 2 + random % (d / 2 + 1);
}

static uint64_t next_random(struct http_client *c)
{
	c->rng ^= c->rng << 13;
	c->rng ^= c->rng >> 7;
	c->rng ^= c->rng << 17;
	return c->rng;
}

struct http_client *http_send_client_new(uint64_t request_timeout_ns)
{
	struct http_client *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->timeout_ns = request_timeout_ns;
	for (size_t i = 0; i < HTTP_MAX_SLOTS; i++)
		c->plain[i].fd = -1;
	if (getrandom(&c->rng, sizeof(c->rng), GRND_NONBLOCK) != (ssize_t)sizeof(c->rng))
		c->rng = clock_now_ns(CLOCK_MONOTONIC);
	c->rng |= 1; /* xorshift's state must not be 0 */
	return c;
}

void http_send_client_free(struct http_client *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < HTTP_MAX_SLOTS; i++) {
		if (c->easy[i])
			c->curl->easy_cleanup(c->easy[i]);
		http_plain_close(&c->plain[i]);
	}
	if (c->multi)
		c->curl->multi_cleanup(c->multi);
	free(c);
}

/* The response body is not needed (its status is); without this libcurl would print
 * it on the application's stdout. */
static size_t discard_body(char *data, size_t size, size_t n, void *unused)
{
	(void)data;
	(void)unused;
	return size * n;
}

/* Set in a fork child made while the parent's upload was in flight with libcurl loaded
 * (http_send_forbid_curl). On the page a fork child writes anyway. */
FORK_CHILD_DATA static bool curl_forbidden;

FORK_CHILD_PATH void http_send_forbid_curl(void)
{
	curl_forbidden = true;
}

/* libcurl, for https://: loaded at the first such request. 0 or -ENOPKG. */
static int need_curl(struct http_client *c)
{
	if (curl_forbidden) {
		if (!c->curl_unavailable)
			log_warn("this process was forked while its parent's profile upload was "
				 "inside libcurl: its https exporters are skipped");
		c->curl_unavailable = true;
		return -ENOPKG;
	}
	if (c->multi)
		return 0;
	if (!c->curl_unavailable) {
		c->curl = curl_api_get();
		if (c->curl)
			c->multi = c->curl->multi_init();
		c->curl_unavailable = !c->multi;
	}
	return c->multi ? 0 : -ENOPKG;
}

static uint64_t attempt_timeout(const struct http_client *c, uint64_t now, uint64_t deadline)
{
	uint64_t left = deadline - now;
	return left < c->timeout_ns ? left : c->timeout_ns;
}

static int start_attempt(struct http_client *c, size_t slot, struct http_job *j, uint64_t now,
			 uint64_t deadline)
{
	j->detail[0] = '\0';
	c->is_plain[slot] = http_plain_handles(j->req.url);
	if (c->is_plain[slot]) {
		/* A failure to start shows as a finished attempt at the next step. */
		http_plain_start(&c->plain[slot], &j->req, USER_AGENT,
				 attempt_timeout(c, now, deadline), j->detail, sizeof(j->detail));
		j->state = JOB_RUNNING;
		return 0;
	}
	int rc = need_curl(c);
	if (rc < 0)
		return rc;
	const struct curl_api *k = c->curl;
	if (!c->easy[slot])
		c->easy[slot] = k->easy_init();
	CURL *h = c->easy[slot];
	if (!h)
		return -ENOMEM;
	k->easy_reset(h);
	struct curl_slist *hdrs = NULL;
	for (size_t i = 0; i <= j->req.nheaders; i++) {
		/* "Expect:" (empty) turns off 100-continue: no 1 s wait on large bodies. */
		const char *line = i < j->req.nheaders ? j->req.headers[i] : "Expect:";
		struct curl_slist *more = k->slist_append(hdrs, line);
		if (!more) {
			k->slist_free_all(hdrs);
			return -ENOMEM;
		}
		hdrs = more;
	}
	uint64_t timeout_ms = attempt_timeout(c, now, deadline) / NS_PER_MS;
	k->easy_setopt(h, CURLOPT_URL, j->req.url);
	k->easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, j->req.unix_socket);
	/* Defence in depth (URLs are checked by config): http and https only. Older
	 * libcurl lacks this option; the result is ignored. */
	k->easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	k->easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: we are one thread of many */
	k->easy_setopt(h, CURLOPT_POST, 1L);
	k->easy_setopt(h, CURLOPT_POSTFIELDS, (const char *)j->req.body);
	k->easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)j->req.body_len);
	k->easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	k->easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_ms > 0 ? timeout_ms : 1));
	k->easy_setopt(h, CURLOPT_USERAGENT, USER_AGENT);
	k->easy_setopt(h, CURLOPT_ERRORBUFFER, j->detail);
	k->easy_setopt(h, CURLOPT_WRITEFUNCTION, discard_body);
	if (k->multi_add_handle(c->multi, h) != CURLM_OK) {
		k->slist_free_all(hdrs);
		return -ENOMEM;
	}
	j->hdrs = hdrs;
	j->state = JOB_RUNNING;
	return 0;
}

/* Detaches the easy handle of a finished or abandoned attempt. */
static void end_attempt(struct http_client *c, size_t slot, struct http_job *j)
{
	if (c->is_plain[slot]) {
		http_plain_close(&c->plain[slot]);
	} else {
		c->curl->multi_remove_handle(c->multi, c->easy[slot]);
		c->curl->slist_free_all(j->hdrs);
		j->hdrs = NULL;
	}
	j->attempts++;
}

static void finish_attempt(struct http_client *c, size_t slot, struct http_job *j, CURLcode code,
			   uint64_t now, uint64_t deadline, bool single_attempt)
{
	long status = 0;
	uint64_t sent = 0;
	if (c->is_plain[slot]) {
		status = c->plain[slot].status;
		sent = c->plain[slot].sent;
	} else {
		curl_off_t n = 0;
		c->curl->easy_getinfo(c->easy[slot], CURLINFO_RESPONSE_CODE, &status);
		c->curl->easy_getinfo(c->easy[slot], CURLINFO_SIZE_UPLOAD_T, &n);
		sent = n > 0 ? (uint64_t)n : 0;
	}
	end_attempt(c, slot, j);
	j->status = status;
	j->bytes_sent += sent;
	enum http_verdict v = http_send_classify(code, status);
	j->state = JOB_DONE;
	if (v == HTTP_DELIVERED) {
		j->rc = 0;
		return;
	}
	j->failed_attempts++;
	j->fail = http_send_fail_kind(code, status);
	if (code == CURLE_OK)
		snprintf(j->detail, sizeof(j->detail), "HTTP status %ld", status);
	else if (!j->detail[0] && c->curl)
		snprintf(j->detail, sizeof(j->detail), "%s", c->curl->easy_strerror(code));
	if (v == HTTP_REJECTED) {
		j->rc = -EPROTO;
		return;
	}
	uint64_t wait = http_send_backoff_ns(j->attempts - 1, next_random(c));
	if (single_attempt || now + wait >= deadline) {
		j->rc = -ETIMEDOUT;
		return;
	}
	log_debug("%s: attempt %u failed (%s); retrying in %llu ms", j->label, j->attempts,
		  j->detail, (unsigned long long)(wait / NS_PER_MS));
	j->state = JOB_WAITING;
	j->next_ns = now + wait;
}

static void report(const struct http_job *j, uint64_t now)
{
	if (j->rc == 0) {
		log_debug("%s: delivered (HTTP %ld, %u attempt%s)", j->label, j->status,
			  j->attempts, j->attempts == 1 ? "" : "s");
		return;
	}
	uint64_t suppressed = 0;
	if (j->warn && !ratelimit_allow(j->warn, j->fail, now, &suppressed))
		return;
	char more[96] = "";
	if (suppressed > 0)
		snprintf(more, sizeof(more), " (%llu similar warning%s suppressed)",
			 (unsigned long long)suppressed, suppressed == 1 ? "" : "s");
	if (j->rc == -EPROTO)
		log_warn("%s: profile rejected (%s); not retried%s", j->label, j->detail, more);
	else if (j->attempts == 0)
		log_warn("%s: profile dropped: no time left to send it%s", j->label, more);
	else
		log_warn("%s: profile dropped after %u attempt%s (last: %s)%s", j->label,
			 j->attempts, j->attempts == 1 ? "" : "s", j->detail, more);
}

/* The exit deadline, 0 when none is set. */
static uint64_t abort_deadline(const _Atomic uint64_t *abort_ns)
{
	/* Relaxed: a plain value with nothing published alongside it; a stale read delays
	 * noticing it by one POLL_SLICE_MS round at most. */
	return abort_ns ? atomic_load_explicit(abort_ns, memory_order_relaxed) : 0;
}

/* Runs one step for job j in slot i; returns whether it still needs the loop, and
 * lowers *wake to when it next does. */
static bool step_job(struct http_client *c, size_t i, struct http_job *j, uint64_t now,
		     uint64_t deadline, bool no_retry, uint64_t *wake)
{
	if (j->state == JOB_WAITING && j->attempts > 0 && no_retry) {
		/* The process is exiting: a failed attempt is not retried. */
		j->rc = -ETIMEDOUT;
		j->state = JOB_DONE;
	}
	if (j->state == JOB_RUNNING && now >= deadline) {
		/* Out of time mid-request: abandon it (closes that connection). */
		end_attempt(c, i, j);
		j->failed_attempts++;
		j->fail = HTTP_FAIL_TIMEOUT;
		snprintf(j->detail, sizeof(j->detail), "no answer before the deadline");
		j->rc = -ETIMEDOUT;
		j->state = JOB_DONE;
	}
	if (j->state == JOB_WAITING && now >= deadline) {
		if (j->attempts == 0)
			j->fail = HTTP_FAIL_DEADLINE;
		j->rc = j->attempts ? -ETIMEDOUT : -ECANCELED;
		j->state = JOB_DONE;
	}
	if (j->state == JOB_WAITING && j->next_ns <= now) {
		int rc = start_attempt(c, i, j, now, deadline);
		if (rc < 0) {
			j->fail = HTTP_FAIL_SETUP;
			snprintf(j->detail, sizeof(j->detail), "cannot set up the request: %s",
				 rc == -ENOPKG ? "https:// needs libcurl, which could not be loaded"
					       : strerror(-rc));
			j->rc = rc;
			j->state = JOB_DONE;
		}
	}
	if (j->state == JOB_WAITING && j->next_ns < *wake)
		*wake = j->next_ns;
	return j->state != JOB_DONE;
}

void http_send_all(struct http_client *c, struct http_job *jobs, size_t n, uint64_t deadline_ns,
		   const _Atomic uint64_t *abort_ns, bool single_attempt)
{
	if (n > HTTP_MAX_SLOTS)
		n = HTTP_MAX_SLOTS;
	uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
	for (size_t i = 0; i < n; i++) {
		struct http_job *j = &jobs[i];
		j->rc = -ECANCELED;
		j->fail = HTTP_FAIL_NONE;
		j->status = 0;
		j->attempts = j->failed_attempts = 0;
		j->bytes_sent = 0;
		j->state = JOB_WAITING;
		j->next_ns = now;
		j->hdrs = NULL;
		j->detail[0] = '\0';
	}
	for (;;) {
		now = clock_now_ns(CLOCK_MONOTONIC);
		uint64_t abort_at = abort_deadline(abort_ns);
		uint64_t deadline = abort_at && abort_at < deadline_ns ? abort_at : deadline_ns;
		/* Once an exit deadline is set, attempts in flight may finish but nothing is
		 * retried: an intake that refuses connections must not hold up the exit. */
		bool no_retry = single_attempt || abort_at != 0;
		uint64_t wake = deadline;
		bool pending = false;
		for (size_t i = 0; i < n; i++)
			pending |= step_job(c, i, &jobs[i], now, deadline, no_retry, &wake);
		if (!pending)
			break;
		if (c->multi) {
			int running = 0, left = 0;
			c->curl->multi_perform(c->multi, &running);
			CURLMsg *msg;
			while ((msg = c->curl->multi_info_read(c->multi, &left))) {
				for (size_t i = 0; msg->msg == CURLMSG_DONE && i < n; i++) {
					if (!c->is_plain[i] && c->easy[i] == msg->easy_handle &&
					    jobs[i].state == JOB_RUNNING)
						finish_attempt(c, i, &jobs[i], msg->data.result,
							       now, deadline, no_retry);
				}
			}
		}
		struct curl_waitfd fds[HTTP_MAX_SLOTS];
		unsigned nfds = 0;
		bool finished = false; /* then look at the jobs again before waiting */
		for (size_t i = 0; i < n; i++) {
			if (!c->is_plain[i] || jobs[i].state != JOB_RUNNING)
				continue;
			if (http_plain_step(&c->plain[i], now, jobs[i].detail,
					    sizeof(jobs[i].detail))) {
				finish_attempt(c, i, &jobs[i], c->plain[i].code, now, deadline,
					       no_retry);
				finished = true;
			} else if (http_plain_fd(&c->plain[i]) >= 0) {
				fds[nfds++] =
				    (struct curl_waitfd){http_plain_fd(&c->plain[i]),
							 http_plain_events(&c->plain[i]), 0};
			}
		}
		if (idle_host)
			bg_host_run_nested(idle_host, idle_services);
		if (finished)
			continue;
		uint64_t ms = wake > now ? (wake - now) / NS_PER_MS : 0;
		if (ms > POLL_SLICE_MS)
			ms = POLL_SLICE_MS;
		/* Waits on the running transfers' sockets, or sleeps when there are none. */
		if (c->multi) {
			c->curl->multi_poll(c->multi, fds, nfds, (int)ms, NULL);
		} else {
			struct pollfd p[HTTP_MAX_SLOTS];
			for (unsigned i = 0; i < nfds; i++)
				p[i] = (struct pollfd){fds[i].fd, (short)fds[i].events, 0};
			sys_poll(p, nfds, (int)ms);
		}
	}
	now = clock_now_ns(CLOCK_MONOTONIC);
	for (size_t i = 0; i < n; i++)
		report(&jobs[i], now);
}
