/*
 * fuzz_http_response.c - libFuzzer target: what an HTTP server (the Datadog agent, an
 * intake, Pyroscope, or whatever answers on their port) sends back to our plain HTTP
 * client (uploader/http_plain.c).
 *
 * The client reads a response only up to its status line: the final one, after any
 * interim 1xx responses and their headers (which it skips up to their blank line);
 * headers and bodies after the final status line are never parsed (the request says
 * "Connection: close" and the connection is closed once the status is known). So the
 * bytes this target feeds are whatever comes before that point, and whatever follows.
 *
 * Each input: one control byte, then the bytes the server sends. The request goes
 * through the real client, http_plain_start and http_plain_step, over a unix socket
 * (the agent's unix:// transport) to a listening socket of ours; the server side
 * accepts, never reads the request, and writes the input in pieces of
 * 1 + (control & 0x3f) bytes, the client stepping after each piece (so a status line
 * arrives cut anywhere). Then, unless control & 0x40, it shuts its side (end of
 * stream); with that bit the connection stays open, and the client is closed
 * mid-request. The whole exchange runs twice: in pieces, then in one piece.
 * Checked, beyond ASan and UBSan:
 *   - after the end of stream the request finishes at once (within a few steps);
 *   - a finished request is either CURLE_OK with a status in 200..999 (interim ones are
 *     skipped), or an error code with status 0 and a terminated detail message;
 *   - CURLE_OK only when the bytes received start with "HTTP/1.";
 *   - the kept response never exceeds HTTP_PLAIN_RESPONSE_MAX bytes;
 *   - the same bytes sent in one piece give the same answer (code and status) as in
 *     pieces: where a stream is cut is the network's choice, not the server's.
 * Context: the fuzzer's one thread.
 *
 * Build, from the repository's root (make fuzz does: it links every library source but
 * preload/ as one archive):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     test/fuzz/fuzz_http_response.c uploader/http_plain.c -o fuzz_http_response
 * Run: ./fuzz_http_response -max_total_time=60 test/fuzz/corpus/http_response/
 */
#include <curl/curl.h> /* CURLcode values, as http_plain.h reports them */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "uploader/http_plain.h"

#define CONTROL_CHUNK_MASK 0x3f
#define CONTROL_KEEP_OPEN 0x40
/* Steps after each piece: one reads all there is; a few more for the connect and send
 * phases, which each take one. */
#define STEPS_PER_PIECE 4
#define TIMEOUT_NS (10ULL * 1000000000ULL)

static char dir[64];
static char sock_path[96];
static int listen_fd = -1;

static void fail(const char *what, long a, long b)
{
	fprintf(stderr, "fuzz_http_response: invariant broken: %s (%ld, %ld)\n", what, a, b);
	abort();
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void remove_socket(void)
{
	unlink(sock_path);
	rmdir(dir);
}

static void listen_once(void)
{
	if (listen_fd >= 0)
		return;
	snprintf(dir, sizeof(dir), "/tmp/fuzz_http_response.XXXXXX");
	if (!mkdtemp(dir))
		fail("mkdtemp", 0, 0);
	snprintf(sock_path, sizeof(sock_path), "%s/agent.sock", dir);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(listen_fd, 4) != 0)
		fail("listening socket", listen_fd, 0);
	atexit(remove_socket);
}

/* Steps the request up to n times; true once it has finished. */
static bool step(struct http_plain *t, int n, char *detail, size_t detail_len)
{
	for (int i = 0; i < n; i++)
		if (http_plain_step(t, now_ns(), detail, detail_len))
			return true;
	return false;
}

static void check_finished(const struct http_plain *t, const char *detail, size_t detail_len,
			   const uint8_t *sent, size_t sent_len)
{
	if (t->resp_len > HTTP_PLAIN_RESPONSE_MAX)
		fail("response kept past its buffer", (long)t->resp_len, 0);
	if (t->code == CURLE_OK) {
		if (t->status < 200 || t->status > 999)
			fail("CURLE_OK with a status outside 200..999", t->status, 0);
		if (sent_len < 7 || memcmp(sent, "HTTP/1.", 7) != 0)
			fail("CURLE_OK from bytes that do not start with HTTP/1.", (long)sent_len,
			     0);
	} else {
		if (t->status != 0)
			fail("an error with a status", t->code, t->status);
		if (!memchr(detail, '\0', detail_len))
			fail("detail not terminated", t->code, 0);
	}
}

struct outcome {
	bool finished;
	int code;
	long status;
};

/* One request whose server sends body[0..len) in pieces of `piece` bytes, then ends
 * the stream unless keep_open. */
static struct outcome exchange(const uint8_t *body, size_t len, size_t piece, bool keep_open)
{
	static const uint8_t payload[] = "profile bytes";
	struct http_request req = {
	    .url = "http://localhost/profiling/v1/input",
	    .unix_socket = sock_path,
	    .headers = {"DD-EVP-ORIGIN: fuzz"},
	    .nheaders = 1,
	    .body = payload,
	    .body_len = sizeof(payload) - 1,
	};
	struct http_plain t;
	char detail[HTTP_DETAIL_MAX];
	if (!http_plain_start(&t, &req, "fuzz", TIMEOUT_NS, detail, sizeof(detail)))
		fail("http_plain_start on a listening unix socket", t.code, 0);
	int server = accept(listen_fd, NULL, NULL);
	if (server < 0)
		fail("accept", 0, 0);
	bool done = step(&t, STEPS_PER_PIECE, detail, sizeof(detail));
	size_t off = 0;
	while (!done && off < len) {
		size_t n = len - off < piece ? len - off : piece;
		if (write(server, body + off, n) != (ssize_t)n)
			fail("server write", (long)n, 0);
		off += n;
		done = step(&t, STEPS_PER_PIECE, detail, sizeof(detail));
	}
	if (!done && !keep_open) {
		shutdown(server, SHUT_WR);
		done = step(&t, STEPS_PER_PIECE, detail, sizeof(detail));
		if (!done)
			fail("no end after the end of stream", (long)len, t.phase);
	}
	if (done)
		check_finished(&t, detail, sizeof(detail), body, off);
	struct outcome o = {done, t.code, t.status};
	http_plain_close(&t);
	close(server);
	return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	listen_once();
	uint8_t control = data[0];
	const uint8_t *body = data + 1;
	size_t len = size - 1;
	bool keep_open = control & CONTROL_KEEP_OPEN;
	struct outcome cut = exchange(body, len, 1 + (control & CONTROL_CHUNK_MASK), keep_open);
	/* The same bytes in one piece: how a stream is cut must not change the answer. */
	struct outcome whole = exchange(body, len, len ? len : 1, keep_open);
	if (cut.finished && whole.finished &&
	    (cut.code != whole.code || cut.status != whole.status))
		fail("the answer depends on how the bytes were cut", cut.status, whole.status);
	return 0;
}
