/*
 * http_send.h - sending the HTTP exporters' requests: retries, backoff, deadlines.
 *
 * Owns: one transport per exporter slot: http_plain.c for http:// and unix sockets (no
 * libcurl in the process), libcurl's multi and easy handles for https:// (loaded at
 * the first https request); the retry policy shared by every HTTP exporter, and the
 * rate-limited warnings about failures.
 *  - All requests of one profile run concurrently (one exporter being down does not
 *    eat another's time), each with its own retries.
 *  - Retry policy (http_send_classify): 2xx delivered; 408, 429, 5xx and transport errors
 *    (refused, reset, timeout, DNS) retried; other statuses, and errors that retrying
 *    cannot fix (bad URL, certificate), rejected at once.
 *  - Backoff (http_send_backoff_ns): exponential from 250 ms, capped at 16 s, "equal
 *    jitter" (a random point in the upper half) so processes started together spread.
 *  - Each attempt times out after min(upload timeout, time left); no attempt starts
 *    past the deadline; whatever has not been delivered then is dropped. The deadline
 *    is the end of the upload period, or the exit flush deadline, whichever comes
 *    first: memory for pending uploads is bounded by one profile per exporter.
 *  - At most one warning per exporter and failure kind per minute (ratelimit.h);
 *    attempts that are retried successfully are reported at debug level only.
 * Context: the uploader thread only; it holds no lock while it waits on the network.
 * A fork child never uses its parent's client: its uploader thread makes its own.
 */
#ifndef DDPROF_UPLOADER_HTTP_SEND_H
#define DDPROF_UPLOADER_HTTP_SEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uploader/ratelimit.h"

#define HTTP_MAX_HEADERS 8
#define HTTP_MAX_SLOTS 4    /* exporters using HTTP at once */
#define HTTP_DETAIL_MAX 256 /* libcurl's error buffer (CURL_ERROR_SIZE) */
#define HTTP_BACKOFF_BASE_NS (250ULL * 1000000ULL)
#define HTTP_BACKOFF_CAP_NS (16ULL * 1000000000ULL)

/* One request, described by an exporter. Every pointer is owned by the exporter or the
 * uploader and stays valid until http_send_all returns. */
struct http_request {
	const char *url;
	const char *unix_socket;	       /* path for unix:// agents, else NULL */
	const char *headers[HTTP_MAX_HEADERS]; /* "Name: value" lines */
	size_t nheaders;
	const uint8_t *body;
	size_t body_len;
};

enum http_verdict {
	HTTP_DELIVERED,
	HTTP_RETRY,    /* transient: try again after a backoff if time is left */
	HTTP_REJECTED, /* retrying the same request cannot help */
};

/* Why a request failed; also the rate limiter's kind. */
enum http_fail {
	HTTP_FAIL_NONE,
	HTTP_FAIL_CONNECT,  /* DNS, refused, reset, TLS handshake... */
	HTTP_FAIL_TIMEOUT,  /* the per-request timeout */
	HTTP_FAIL_SERVER,   /* 408, 429, 5xx */
	HTTP_FAIL_REJECTED, /* other 4xx and 1xx/3xx */
	HTTP_FAIL_SETUP,    /* bad URL, certificate, out of memory */
	HTTP_FAIL_DEADLINE, /* no time left for a (first) attempt */
};

struct http_job {
	/* In, set by the uploader: */
	const char *label; /* "datadog-agent (http://localhost:8126)": no secret */
	struct http_request req;
	struct ratelimit *warn; /* the exporter's, lives across profiles */
	/* Out: */
	int rc;		     /* 0 delivered, -ETIMEDOUT dropped (retries/time exhausted), -EPROTO
			      * rejected, -ECANCELED no attempt could start */
	enum http_fail fail; /* last failure, HTTP_FAIL_NONE if none */
	long status;	     /* last HTTP status, 0 if no response */
	unsigned attempts;
	unsigned failed_attempts;
	uint64_t bytes_sent; /* request bytes written, over all attempts */
	/* Private to http_send.c: */
	int state;
	uint64_t next_ns;
	void *hdrs;
	char detail[HTTP_DETAIL_MAX];
};

/* Pure policy, for the tests. curl_code is a CURLcode (http_plain.c reports its
 * errors as CURLcodes too). */
enum http_verdict http_send_classify(int curl_code, long status);
enum http_fail http_send_fail_kind(int curl_code, long status);

/* Delay before retry number `retry` (0 for the first retry), random = any 64 bits. */
uint64_t http_send_backoff_ns(unsigned retry, uint64_t random);

struct http_client;

/* Makes a client; libcurl is loaded only by its first https:// request (where it is
 * missing, https requests fail as setup errors). NULL when out of memory. Uploader
 * thread. */
struct http_client *http_send_client_new(uint64_t request_timeout_ns);
void http_send_client_free(struct http_client *c);

/*
 * Sends jobs[0..n) (n <= HTTP_MAX_SLOTS) concurrently until each is delivered, rejected
 * or out of time: nothing is attempted at or past min(deadline_ns, *abort_ns) (both
 * CLOCK_MONOTONIC; *abort_ns 0 = none, read at each step as it may be set by another
 * thread). No retries when single_attempt (the exit flush) or once *abort_ns is set
 * (an attempt in flight may still finish). Logs failures per job->warn.
 */
void http_send_all(struct http_client *c, struct http_job *jobs, size_t n, uint64_t deadline_ns,
		   const _Atomic uint64_t *abort_ns, bool single_attempt);

/* At every turn of its wait loop (at most POLL_SLICE_MS apart) http_send_all runs the
 * services of h (common/bg_host.h) in the services mask that are due: the uploader
 * thread's other work (unwind tables, timers) keeps running while a request waits on
 * the network. h NULL: none. Set before any request, by the host's thread. */
struct bg_host;
void http_send_set_host(struct bg_host *h, unsigned services);

/* Fork child made while the parent's upload was in flight with libcurl loaded: its
 * locks (and its TLS library's) may be held by a thread that is not here, so https://
 * requests of this process fail at once (-ENOPKG), with one warning. */
void http_send_forbid_curl(void);

#endif
