/*
 * http_plain.c - HTTP/1.1 POST without libcurl (see http_plain.h).
 *
 * The request is "POST path HTTP/1.1" with Host, User-Agent, Content-Length,
 * "Connection: close" and the exporter's headers, then the body. The response is read
 * until its status line is complete; the rest (headers, body) is not needed, and the
 * connection is closed. Sends use MSG_NOSIGNAL: a peer that closes early must not
 * raise SIGPIPE in the application. A peer that answers and closes before taking the
 * whole body (413) is read for its status all the same.
 * Context: the uploader thread only; never a signal handler.
 */
#include "uploader/http_plain.h"
#include "common/sys_io.h"

#include <curl/curl.h> /* CURLcode values only: http_send.c classifies both transports */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

enum phase { PH_CONNECTING, PH_SENDING, PH_RECEIVING, PH_DONE };

static void release_addrs(struct http_plain *t, bool none_answered);

bool http_plain_handles(const char *url)
{
	return url && strncasecmp(url, "http://", 7) == 0;
}

int http_plain_parse_url(const char *url, char *host, size_t host_len, char *port, size_t port_len,
			 const char **path)
{
	if (!http_plain_handles(url))
		return -EINVAL;
	const char *h = url + 7;
	const char *end = h + strcspn(h, "/?#");
	const char *colon = NULL;
	const char *hs = h, *he;
	if (*h == '[') { /* [v6 literal] */
		const char *close = memchr(h, ']', (size_t)(end - h));
		if (!close)
			return -EINVAL;
		hs = h + 1;
		he = close;
		if (close + 1 < end) {
			if (close[1] != ':')
				return -EINVAL;
			colon = close + 1;
		}
	} else {
		colon = memchr(h, ':', (size_t)(end - h));
		he = colon ? colon : end;
	}
	if (he <= hs || (size_t)(he - hs) >= host_len || memchr(hs, '@', (size_t)(he - hs)))
		return -EINVAL;
	memcpy(host, hs, (size_t)(he - hs));
	host[he - hs] = '\0';
	if (colon) {
		size_t n = (size_t)(end - colon - 1);
		if (n == 0 || n >= port_len || n > 5 || strspn(colon + 1, "0123456789") < n)
			return -EINVAL;
		memcpy(port, colon + 1, n);
		port[n] = '\0';
		long p = strtol(port, NULL, 10);
		if (p < 1 || p > 65535)
			return -EINVAL;
	} else {
		snprintf(port, port_len, "80");
	}
	*path = *end == '/' ? end : "/";
	if (*end && *end != '/')
		return -EINVAL; /* a query without a path: not something we send */
	return 0;
}

static bool fail(struct http_plain *t, int code, char *detail, size_t detail_len, const char *what,
		 int err)
{
	t->code = code;
	t->phase = PH_DONE;
	if (err)
		snprintf(detail, detail_len, "%s: %s", what, strerror(err));
	else
		snprintf(detail, detail_len, "%s", what);
	if (t->fd >= 0) {
		close(t->fd);
		t->fd = -1;
	}
	return true;
}

static char *build_head(const struct http_request *req, const char *host, const char *port,
			const char *path, const char *user_agent)
{
	size_t cap = 256 + strlen(host) + strlen(path) + strlen(user_agent);
	for (size_t i = 0; i < req->nheaders; i++)
		cap += strlen(req->headers[i]) + 2;
	char *head = malloc(cap);
	if (!head)
		return NULL;
	bool v6 = strchr(host, ':') != NULL;
	int n = snprintf(head, cap,
			 "POST %s HTTP/1.1\r\nHost: %s%s%s%s%s\r\nUser-Agent: %s\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n",
			 path, v6 ? "[" : "", host, v6 ? "]" : "", strcmp(port, "80") ? ":" : "",
			 strcmp(port, "80") ? port : "", user_agent, req->body_len);
	size_t len = n > 0 ? (size_t)n : 0;
	for (size_t i = 0; i < req->nheaders && len < cap; i++)
		len += (size_t)snprintf(head + len, cap - len, "%s\r\n", req->headers[i]);
	if (len + 3 > cap) {
		free(head);
		return NULL;
	}
	memcpy(head + len, "\r\n", 3);
	return head;
}

/* Opens a non-blocking socket and starts connecting to the next address. */
static bool connect_next(struct http_plain *t, const struct http_request *req, char *detail,
			 size_t detail_len)
{
	int last_err = ECONNREFUSED;
	if (req && req->unix_socket) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (strlen(req->unix_socket) >= sizeof(sa.sun_path))
			return !fail(t, CURLE_COULDNT_CONNECT, detail, detail_len,
				     "unix socket path too long", 0);
		strcpy(sa.sun_path, req->unix_socket);
		t->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (t->fd < 0)
			return !fail(t, CURLE_COULDNT_CONNECT, detail, detail_len, "socket", errno);
		if (sys_connect(t->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ||
		    errno == EINPROGRESS)
			return true;
		return !fail(t, CURLE_COULDNT_CONNECT, detail, detail_len, req->unix_socket, errno);
	}
	for (struct addrinfo *a = t->next_addr; a; a = a->ai_next) {
		t->next_addr = a->ai_next;
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
				a->ai_protocol);
		if (fd < 0) {
			last_err = errno;
			continue;
		}
		if (sys_connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
			t->fd = fd;
			return true;
		}
		last_err = errno;
		close(fd);
	}
	release_addrs(t, true); /* none answered: look the name up again next time */
	return !fail(t, CURLE_COULDNT_CONNECT, detail, detail_len, "connect", last_err);
}

/*
 * Name cache: a few (host, port) -> address list entries, each reused for
 * RESOLVE_TTL_NS. A request borrows its entry's list (users counts them); a stale entry
 * still in use is not replaced, the request then gets a list of its own. An entry whose
 * addresses all failed to connect is made stale at once. Uploader thread only.
 */
#define RESOLVE_TTL_NS (60ULL * 1000000000ULL)
#define RESOLVE_SLOTS 4

struct resolved {
	char host[256];
	char port[8];
	struct addrinfo *list; /* NULL: free slot */
	uint64_t at_ns;	       /* CLOCK_MONOTONIC of the lookup; 0: stale */
	unsigned users;
};
static struct resolved name_cache[RESOLVE_SLOTS];

static int lookup(const char *host, const char *port, struct addrinfo **out, int *slot,
		  uint64_t now)
{
	*slot = -1;
	int free_slot = -1;
	for (int i = 0; i < RESOLVE_SLOTS; i++) {
		struct resolved *r = &name_cache[i];
		if (!r->list) {
			free_slot = free_slot < 0 ? i : free_slot;
			continue;
		}
		if (strcmp(r->host, host) || strcmp(r->port, port))
			continue;
		if (r->at_ns && now - r->at_ns < RESOLVE_TTL_NS) {
			r->users++;
			*slot = i;
			*out = r->list;
			return 0;
		}
		if (r->users == 0) { /* stale and unused: look it up again in place */
			freeaddrinfo(r->list);
			r->list = NULL;
			free_slot = i;
		}
		break;
	}
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG};
	int rc = getaddrinfo(host, port, &hints, out);
	if (rc != 0)
		return rc;
	if (free_slot >= 0 && strlen(host) < sizeof(name_cache[0].host)) {
		struct resolved *r = &name_cache[free_slot];
		snprintf(r->host, sizeof(r->host), "%s", host);
		snprintf(r->port, sizeof(r->port), "%s", port);
		r->list = *out;
		r->at_ns = now ? now : 1;
		r->users = 1;
		*slot = free_slot;
	}
	return 0;
}

/* Gives the request's addresses back; stale when none of them answered. */
static void release_addrs(struct http_plain *t, bool none_answered)
{
	if (t->cache_slot >= 0) {
		struct resolved *r = &name_cache[t->cache_slot];
		if (r->users > 0)
			r->users--;
		if (none_answered)
			r->at_ns = 0;
	} else if (t->addrs) {
		freeaddrinfo(t->addrs);
	}
	t->cache_slot = -1;
	t->addrs = t->next_addr = NULL;
}

bool http_plain_start(struct http_plain *t, const struct http_request *req, const char *user_agent,
		      uint64_t timeout_ns, char *detail, size_t detail_len)
{
	memset(t, 0, sizeof(*t));
	t->fd = -1;
	t->cache_slot = -1;
	char host[256], port[8];
	const char *path;
	if (http_plain_parse_url(req->url, host, sizeof(host), port, sizeof(port), &path) < 0) {
		fail(t, CURLE_URL_MALFORMAT, detail, detail_len, "malformed http:// URL", 0);
		return false;
	}
	t->head = build_head(req, host, port, path, user_agent);
	if (!t->head) {
		fail(t, CURLE_OUT_OF_MEMORY, detail, detail_len, "out of memory", 0);
		return false;
	}
	t->head_len = strlen(t->head);
	t->body = req->body;
	t->body_len = req->body_len;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	t->expires_ns = now + timeout_ns;
	if (!req->unix_socket) {
		struct addrinfo *res = NULL;
		int rc = lookup(host, port, &res, &t->cache_slot, now);
		if (rc != 0) {
			fail(t, CURLE_COULDNT_RESOLVE_HOST, detail, detail_len, gai_strerror(rc),
			     0);
			return false;
		}
		t->addrs = res;
		t->next_addr = res;
	}
	t->phase = PH_CONNECTING;
	if (!connect_next(t, req, detail, detail_len))
		return false;
	return true;
}

int http_plain_fd(const struct http_plain *t)
{
	return t->phase == PH_DONE ? -1 : t->fd;
}

short http_plain_events(const struct http_plain *t)
{
	/* While sending, an early answer (413 before the body is read) counts too. */
	return t->phase == PH_RECEIVING ? POLLIN
	       : t->phase == PH_SENDING ? (short)(POLLOUT | POLLIN)
					: POLLOUT;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/*
 * The status code of the status line line[0..len) (its LF excluded): "HTTP/1." and a
 * digit, a space, three digits, then a space (the reason phrase), a CR or nothing
 * (RFC 9112, section 4). -1 when the line is not one, or its code is below 100. Only the
 * line is read: a code taken from the bytes after it would make the answer depend on
 * where the network cut the stream (test/fuzz/fuzz_http_response.c checks it does not).
 */
static int status_code(const char *line, size_t len)
{
	static const char version[] = "HTTP/1.";
	const size_t v = sizeof(version) - 1;
	if (len < v + 5 || memcmp(line, version, v) != 0 || !is_digit(line[v]) ||
	    line[v + 1] != ' ')
		return -1;
	const char *c = line + v + 2;
	if (!is_digit(c[0]) || !is_digit(c[1]) || !is_digit(c[2]) || c[0] == '0' ||
	    (len > v + 5 && c[3] != ' ' && c[3] != '\r'))
		return -1;
	return (c[0] - '0') * 100 + (c[1] - '0') * 10 + (c[2] - '0');
}

/* A complete final status line in the response buffer: parses it. Interim 1xx
 * responses (100 Continue...) are skipped, up to their blank line. */
static bool parse_status(struct http_plain *t)
{
	for (;;) {
		char *eol = memchr(t->resp, '\n', t->resp_len);
		if (!eol)
			return false;
		int status = status_code(t->resp, (size_t)(eol - t->resp));
		if (status < 0) {
			t->code = CURLE_WEIRD_SERVER_REPLY;
			return true;
		}
		if (status >= 200) {
			t->status = status;
			t->code = CURLE_OK;
			return true;
		}
		char *end = memmem(t->resp, t->resp_len, "\r\n\r\n", 4);
		if (!end)
			return false; /* the rest of the interim response is still to come */
		size_t skip = (size_t)(end + 4 - t->resp);
		memmove(t->resp, t->resp + skip, t->resp_len - skip + 1);
		t->resp_len -= skip;
	}
}

static bool step_send(struct http_plain *t, char *detail, size_t detail_len)
{
	while (t->head_off < t->head_len || t->body_off < t->body_len) {
		struct iovec iov[2];
		int n = 0;
		if (t->head_off < t->head_len)
			iov[n++] = (struct iovec){t->head + t->head_off, t->head_len - t->head_off};
		if (t->body_off < t->body_len)
			iov[n++] = (struct iovec){(void *)(t->body + t->body_off),
						  t->body_len - t->body_off};
		struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t w = sys_sendmsg(t->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return false;
			if (errno == EPIPE || errno == ECONNRESET) {
				/* It may have answered already (413): read what it said. */
				t->phase = PH_RECEIVING;
				return false;
			}
			return fail(t, CURLE_SEND_ERROR, detail, detail_len, "send", errno);
		}
		t->sent += (uint64_t)w;
		size_t k = (size_t)w;
		size_t h = t->head_len - t->head_off < k ? t->head_len - t->head_off : k;
		t->head_off += h;
		t->body_off += k - h;
	}
	t->phase = PH_RECEIVING;
	return false;
}

static bool step_receive(struct http_plain *t, char *detail, size_t detail_len)
{
	for (;;) {
		if (t->resp_len >= HTTP_PLAIN_RESPONSE_MAX)
			return fail(t, CURLE_WEIRD_SERVER_REPLY, detail, detail_len,
				    "status line too long", 0);
		ssize_t r = sys_recv(t->fd, t->resp + t->resp_len,
				     HTTP_PLAIN_RESPONSE_MAX - t->resp_len, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return false;
		if (r < 0)
			return fail(t, CURLE_RECV_ERROR, detail, detail_len, "receive", errno);
		t->resp_len += (size_t)r;
		t->resp[t->resp_len] = '\0';
		if (parse_status(t)) {
			if (t->code != CURLE_OK)
				snprintf(detail, detail_len, "not an HTTP/1 response");
			t->phase = PH_DONE;
			close(t->fd);
			t->fd = -1;
			return true;
		}
		if (r == 0)
			return fail(t,
				    t->head_off < t->head_len || t->body_off < t->body_len
					? CURLE_SEND_ERROR
					: CURLE_RECV_ERROR,
				    detail, detail_len, "connection closed before a response", 0);
	}
}

bool http_plain_step(struct http_plain *t, uint64_t now_ns, char *detail, size_t detail_len)
{
	if (t->phase == PH_DONE)
		return true;
	if (now_ns >= t->expires_ns)
		return fail(t, CURLE_OPERATION_TIMEDOUT, detail, detail_len,
			    "no answer within the upload timeout", 0);
	if (t->phase == PH_CONNECTING) {
		struct pollfd p = {.fd = t->fd, .events = POLLOUT};
		if (sys_poll(&p, 1, 0) <= 0)
			return false;
		int err = 0;
		socklen_t len = sizeof(err);
		getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (err) {
			close(t->fd);
			t->fd = -1;
			if (t->next_addr && connect_next(t, NULL, detail, detail_len))
				return false;
			release_addrs(t, true);
			return fail(t, CURLE_COULDNT_CONNECT, detail, detail_len, "connect", err);
		}
		t->phase = PH_SENDING;
	}
	if (t->phase == PH_SENDING) {
		/* Data to read before the request is sent: the server answered early. */
		struct pollfd p = {.fd = t->fd, .events = POLLIN};
		if (sys_poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)))
			t->phase = PH_RECEIVING;
		else if (step_send(t, detail, detail_len))
			return true;
	}
	if (t->phase == PH_RECEIVING)
		return step_receive(t, detail, detail_len);
	return false;
}

void http_plain_close(struct http_plain *t)
{
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
	free(t->head);
	t->head = NULL;
	release_addrs(t, false);
	t->phase = PH_DONE;
}
