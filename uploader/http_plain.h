/*
 * http_plain.h - one HTTP/1.1 POST over plain TCP or a unix socket, without libcurl.
 *
 * Owns: one request in flight: its socket, its request head, and the parse of the
 * response's status line. Used by http_send.c for http:// URLs and unix sockets (the
 * Datadog agent, the default intake, and plain-HTTP Pyroscope); https:// stays with
 * libcurl.
 * Why not libcurl for these: libcurl brings about 30 libraries into the profiled
 * process (TLS, LDAP, Kerberos, SSH, RTMP, GnuTLS, p11-kit...): about 170 more memory
 * mappings, which every fork() of the application then copies, and library
 * destructors and exit handlers that every fork child runs at exit(), touching (so
 * copying) pages shared with its parent: once a process had uploaded, each of its forks
 * would cost many times what it costs without the agent. A POST with a known
 * Content-Length and "Connection: close" is small enough to own.
 * Non-blocking: the caller polls http_plain_fd for http_plain_events and calls
 * http_plain_step, so several requests run side by side and deadlines are kept.
 * Name resolution (getaddrinfo) blocks, so its answers are cached for a minute (and
 * dropped when no address answers): the uploader thread also builds unwind tables and
 * should not wait on DNS at every request. IP literals and /etc/hosts names answer at
 * once. Context: the uploader thread only.
 */
#ifndef DDPROF_UPLOADER_HTTP_PLAIN_H
#define DDPROF_UPLOADER_HTTP_PLAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uploader/http_send.h"

/* Bytes of the response kept: enough for any status line and common headers. */
#define HTTP_PLAIN_RESPONSE_MAX 1024

struct http_plain {
	int fd; /* -1 when closed */
	int phase;
	uint64_t expires_ns; /* CLOCK_MONOTONIC */
	char *head;	     /* request line and headers (malloc) */
	size_t head_len, head_off;
	const uint8_t *body;
	size_t body_len, body_off;
	char resp[HTTP_PLAIN_RESPONSE_MAX + 1];
	size_t resp_len;
	void *addrs;	 /* getaddrinfo list, tried in order (TCP) */
	void *next_addr; /* the next one to try */
	int cache_slot;	 /* addrs borrowed from the name cache (-1: owned, or none) */
	/* Out, when http_plain_step has returned true: */
	int code;      /* a CURLcode: CURLE_OK when a status line was read */
	long status;   /* HTTP status, 0 if none */
	uint64_t sent; /* request bytes written */
};

/* True when url is http:// (case-insensitive), which this transport handles. */
bool http_plain_handles(const char *url);

/* Parses "http://host[:port][/path]" (host may be a [v6] literal). 0 or -EINVAL. */
int http_plain_parse_url(const char *url, char *host, size_t host_len, char *port, size_t port_len,
			 const char **path);

/*
 * Starts the request (resolves, opens the socket, starts connecting). The request must
 * stay valid until the request is finished or closed. On failure returns false with
 * code set (and detail filled); otherwise true, and http_plain_step drives it.
 */
bool http_plain_start(struct http_plain *t, const struct http_request *req, const char *user_agent,
		      uint64_t timeout_ns, char *detail, size_t detail_len);
/* The socket to poll, and for what (POLLIN/POLLOUT); -1 when none. */
int http_plain_fd(const struct http_plain *t);
short http_plain_events(const struct http_plain *t);
/* Makes what progress the socket allows without blocking. Returns true when the
 * request has finished (code, status, sent set; detail filled on failure). */
bool http_plain_step(struct http_plain *t, uint64_t now_ns, char *detail, size_t detail_len);
/* Closes the socket and frees what the request holds; safe to call twice. */
void http_plain_close(struct http_plain *t);

#endif
