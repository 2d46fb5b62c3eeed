/*
 * test_http_plain.c - unit tests of uploader/http_plain.c: the libcurl-free POST.
 *
 * URL parsing (hosts, v6 literals, ports, what is refused), then real requests against
 * a small server thread on 127.0.0.1 and on a unix socket: the exact bytes it receives
 * (request line, Host, Content-Length, the caller's headers, the body), the status it
 * answers, a refused connection, an answer (413) sent before the body was read (with
 * the connection closed, and kept open), interim 1xx responses, status lines read
 * strictly and from their line only, and a server that never answers (the timeout).
 */
#include "uploader/http_plain.h"

#include <check.h>
#include <curl/curl.h>

#include "test/unit/check_run.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

START_TEST(test_urls_are_parsed_and_bad_ones_refused)
{
	char host[64], port[8];
	const char *path;
	ck_assert_int_eq(http_plain_parse_url("http://localhost:8126/profiling/v1/input", host,
					      sizeof(host), port, sizeof(port), &path),
			 0);
	ck_assert_str_eq(host, "localhost");
	ck_assert_str_eq(port, "8126");
	ck_assert_str_eq(path, "/profiling/v1/input");
	ck_assert_int_eq(
	    http_plain_parse_url("HTTP://10.0.0.1", host, sizeof(host), port, sizeof(port), &path),
	    0);
	ck_assert_str_eq(host, "10.0.0.1");
	ck_assert_str_eq(port, "80");
	ck_assert_str_eq(path, "/");
	ck_assert_int_eq(http_plain_parse_url("http://[::1]:4040/ingest?name=x", host, sizeof(host),
					      port, sizeof(port), &path),
			 0);
	ck_assert_str_eq(host, "::1");
	ck_assert_str_eq(port, "4040");
	ck_assert_str_eq(path, "/ingest?name=x");
	const char *bad[] = {"https://x/",	"http://",	"http://:80/",	 "http://h:0/",
			     "http://h:70000/", "http://h:8x/", "http://u@h/",	 "http://[::1/",
			     "http://h?q",	"ftp://h/",	"http://[::1]x/"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(
		    http_plain_parse_url(bad[i], host, sizeof(host), port, sizeof(port), &path) < 0,
		    "%s accepted", bad[i]);
	ck_assert(http_plain_handles("http://a/"));
	ck_assert(!http_plain_handles("https://a/"));
}
END_TEST

/* The server side of one exchange. */
struct server {
	int listen_fd;
	const char *answer; /* sent after reading; NULL: never answer */
	bool answer_first;  /* answer and close before reading the request */
	bool keep_open;	    /* with answer_first: answer, then neither read nor close */
	char got[1 << 16];
	size_t got_len;
};

static void *serve(void *arg)
{
	struct server *s = arg;
	int fd = accept(s->listen_fd, NULL, NULL);
	if (fd < 0)
		return NULL;
	if (s->answer_first) {
		(void)!write(fd, s->answer, strlen(s->answer));
		if (s->keep_open)
			sleep(2); /* the client must not wait for this */
		close(fd);
		return NULL;
	}
	/* Reads until the body announced by Content-Length has arrived. */
	size_t want = SIZE_MAX;
	while (s->got_len < sizeof(s->got) - 1 && s->got_len < want) {
		ssize_t r = read(fd, s->got + s->got_len, sizeof(s->got) - 1 - s->got_len);
		if (r <= 0)
			break;
		s->got_len += (size_t)r;
		s->got[s->got_len] = '\0';
		char *end = strstr(s->got, "\r\n\r\n");
		char *cl = strstr(s->got, "Content-Length: ");
		if (end && cl)
			want = (size_t)(end + 4 - s->got) + strtoul(cl + 16, NULL, 10);
	}
	if (s->answer)
		(void)!write(fd, s->answer, strlen(s->answer));
	else
		sleep(1); /* never answers within the client's timeout */
	close(fd);
	return NULL;
}

static int tcp_listener(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	socklen_t len = sizeof(sa);
	getsockname(fd, (struct sockaddr *)&sa, &len);
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Drives a request to its end (5 s at most). */
static void run(struct http_plain *t, char *detail, size_t len)
{
	uint64_t give_up = now_ns() + 5000000000ULL;
	while (!http_plain_step(t, now_ns(), detail, len)) {
		ck_assert_uint_lt(now_ns(), give_up);
		struct pollfd p = {http_plain_fd(t), http_plain_events(t), 0};
		poll(&p, 1, 20);
	}
}

/* Starts a request that must start, and drives it to its end. */
static void post(struct http_plain *t, const struct http_request *req, uint64_t timeout_ns,
		 char *detail, size_t len)
{
	ck_assert(http_plain_start(t, req, "ua", timeout_ns, detail, len));
	run(t, detail, len);
}

static const uint8_t body[] =
    "--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n\x01\x02\r\n--b--";

START_TEST(test_a_post_over_tcp_sends_exact_bytes_and_reads_the_status)
{
	int port;
	struct server s = {.listen_fd = tcp_listener(&port),
			   .answer = "HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}"};
	pthread_t th;
	pthread_create(&th, NULL, serve, &s);
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/profiling/v1/input", port);
	struct http_request req = {.url = url,
				   .headers = {"Content-Type: multipart/form-data; boundary=b",
					       "DD-EVP-ORIGIN: libddprof"},
				   .nheaders = 2,
				   .body = body,
				   .body_len = sizeof(body) - 1};
	struct http_plain t;
	char detail[256] = "";
	ck_assert(
	    http_plain_start(&t, &req, "libddprof/test", 2000000000ULL, detail, sizeof(detail)));
	run(&t, detail, sizeof(detail));
	pthread_join(th, NULL);
	ck_assert_int_eq(t.code, CURLE_OK);
	ck_assert_int_eq(t.status, 202);
	ck_assert_uint_eq(t.sent, s.got_len);
	char expect_head[512];
	snprintf(expect_head, sizeof(expect_head),
		 "POST /profiling/v1/input HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
		 "User-Agent: libddprof/test\r\nContent-Length: %zu\r\nConnection: close\r\n"
		 "Content-Type: multipart/form-data; boundary=b\r\n"
		 "DD-EVP-ORIGIN: libddprof\r\n\r\n",
		 port, sizeof(body) - 1);
	size_t hl = strlen(expect_head);
	ck_assert_uint_eq(s.got_len, hl + sizeof(body) - 1);
	ck_assert(memcmp(s.got, expect_head, hl) == 0);
	ck_assert(memcmp(s.got + hl, body, sizeof(body) - 1) == 0);
	http_plain_close(&t);
	http_plain_close(&t); /* twice is harmless */
	close(s.listen_fd);
}
END_TEST

START_TEST(test_a_post_over_a_unix_socket)
{
	char path[] = "/tmp/ddprof-http-plain-XXXXXX";
	int tmp = mkstemp(path);
	close(tmp);
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strcpy(sa.sun_path, path);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	struct server s = {.listen_fd = fd, .answer = "HTTP/1.0 200 OK\r\n\r\n"};
	pthread_t th;
	pthread_create(&th, NULL, serve, &s);
	struct http_request req = {.url = "http://localhost/profiling/v1/input",
				   .unix_socket = path,
				   .body = body,
				   .body_len = sizeof(body) - 1};
	struct http_plain t;
	char detail[256] = "";
	post(&t, &req, 2000000000ULL, detail, sizeof(detail));
	pthread_join(th, NULL);
	ck_assert_int_eq(t.code, CURLE_OK);
	ck_assert_int_eq(t.status, 200);
	ck_assert(strncmp(s.got, "POST /profiling/v1/input HTTP/1.1\r\nHost: localhost\r\n", 51) ==
		  0);
	http_plain_close(&t);
	close(fd);
	unlink(path);
}
END_TEST

START_TEST(test_a_refused_connection_is_a_connect_error)
{
	int port;
	int fd = tcp_listener(&port);
	close(fd); /* nobody listens there now */
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
	struct http_request req = {.url = url, .body = body, .body_len = 4};
	struct http_plain t;
	char detail[256] = "";
	if (http_plain_start(&t, &req, "ua", 2000000000ULL, detail, sizeof(detail)))
		run(&t, detail, sizeof(detail));
	ck_assert_int_eq(t.code, CURLE_COULDNT_CONNECT);
	ck_assert_int_eq(t.status, 0);
	ck_assert_ptr_nonnull(strstr(detail, "refused"));
	http_plain_close(&t);
}
END_TEST

/* Serves s (on a new loopback listener) from a thread; url gets its address. */
static pthread_t serve_tcp(struct server *s, char *url, size_t size)
{
	int port;
	s->listen_fd = tcp_listener(&port);
	pthread_t th;
	pthread_create(&th, NULL, serve, s);
	snprintf(url, size, "http://127.0.0.1:%d/", port);
	return th;
}

START_TEST(test_an_early_413_is_read_although_the_body_was_not)
{
	struct server s = {.answer = "HTTP/1.1 413 Payload Too Large\r\n\r\n",
			   .answer_first = true};
	char url[64];
	pthread_t th = serve_tcp(&s, url, sizeof(url));
	size_t big_len = 8u << 20;
	uint8_t *big = calloc(1, big_len);
	struct http_request req = {.url = url, .body = big, .body_len = big_len};
	struct http_plain t;
	char detail[256] = "";
	ck_assert(http_plain_start(&t, &req, "ua", 3000000000ULL, detail, sizeof(detail)));
	run(&t, detail, sizeof(detail));
	pthread_join(th, NULL);
	/* Either the status was read, or the reset came first: never a hang or a signal. */
	ck_assert_msg(t.status == 413 || t.code == CURLE_SEND_ERROR || t.code == CURLE_RECV_ERROR,
		      "code %d status %ld", t.code, t.status);
	ck_assert_uint_lt(t.sent, big_len);
	http_plain_close(&t);
	free(big);
	close(s.listen_fd);
}
END_TEST

START_TEST(test_interim_1xx_responses_are_skipped)
{
	struct server s = {.answer = "HTTP/1.1 100 Continue\r\n\r\n"
				     "HTTP/1.1 102 Processing\r\nX: y\r\n\r\n"
				     "HTTP/1.1 202 Accepted\r\n\r\n"};
	char url[64];
	pthread_t th = serve_tcp(&s, url, sizeof(url));
	struct http_request req = {.url = url, .body = body, .body_len = sizeof(body) - 1};
	struct http_plain t;
	char detail[256] = "";
	post(&t, &req, 2000000000ULL, detail, sizeof(detail));
	pthread_join(th, NULL);
	ck_assert_int_eq(t.code, CURLE_OK);
	ck_assert_int_eq(t.status, 202);
	http_plain_close(&t);
	close(s.listen_fd);
}
END_TEST

/* The status is read from the status line alone, strictly: a code after the line's end
 * (found by test/fuzz/fuzz_http_response.c: it was read when the bytes came in one
 * piece, not when cut after the first line) or with a fourth digit is no status. */
START_TEST(test_a_status_is_read_from_its_line_only)
{
	static const struct {
		const char *answer;
		int code;
		long status;
	} cases[] = {
	    {"HTTP/1.1 \r\n\r\n200 OK\r\n\r\n", CURLE_WEIRD_SERVER_REPLY, 0},
	    {"HTTP/1.1\r\n 200 OK\r\n\r\n", CURLE_WEIRD_SERVER_REPLY, 0},
	    {"HTTP/1.1 2000 OK\r\n\r\n", CURLE_WEIRD_SERVER_REPLY, 0},
	    {"HTTP/1.1 099 Low\r\n\r\n", CURLE_WEIRD_SERVER_REPLY, 0},
	    {"HTTP/1.0 204\r\n\r\n", CURLE_OK, 204},
	    {"HTTP/1.1 404 Not Found\n", CURLE_OK, 404},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct server s = {.answer = cases[i].answer};
		char url[64];
		pthread_t th = serve_tcp(&s, url, sizeof(url));
		struct http_request req = {.url = url, .body = body, .body_len = sizeof(body) - 1};
		struct http_plain t;
		char detail[256] = "";
		post(&t, &req, 2000000000ULL, detail, sizeof(detail));
		pthread_join(th, NULL);
		ck_assert_msg(t.code == cases[i].code && t.status == cases[i].status,
			      "answer %zu: expected code %d status %ld, got code %d status %ld", i,
			      cases[i].code, cases[i].status, t.code, t.status);
		http_plain_close(&t);
		close(s.listen_fd);
	}
}
END_TEST

START_TEST(test_an_early_answer_on_an_open_connection_is_read_at_once)
{
	struct server s = {.answer = "HTTP/1.1 413 Payload Too Large\r\n\r\n",
			   .answer_first = true,
			   .keep_open = true};
	char url[64];
	pthread_t th = serve_tcp(&s, url, sizeof(url));
	size_t big_len = 32u << 20; /* more than the socket buffers take */
	uint8_t *big = calloc(1, big_len);
	struct http_request req = {.url = url, .body = big, .body_len = big_len};
	struct http_plain t;
	char detail[256] = "";
	uint64_t t0 = now_ns();
	ck_assert(http_plain_start(&t, &req, "ua", 5000000000ULL, detail, sizeof(detail)));
	run(&t, detail, sizeof(detail));
	/* The 413, well before the 5 s timeout and the server's 2 s. */
	ck_assert_int_eq(t.code, CURLE_OK);
	ck_assert_int_eq(t.status, 413);
	ck_assert_uint_lt(now_ns() - t0, 1500000000ULL);
	http_plain_close(&t);
	pthread_join(th, NULL);
	free(big);
	close(s.listen_fd);
}
END_TEST

START_TEST(test_a_silent_server_times_out)
{
	struct server s = {.answer = NULL};
	char url[64];
	pthread_t th = serve_tcp(&s, url, sizeof(url));
	struct http_request req = {.url = url, .body = body, .body_len = sizeof(body) - 1};
	struct http_plain t;
	char detail[256] = "";
	uint64_t t0 = now_ns();
	ck_assert(http_plain_start(&t, &req, "ua", 150000000ULL, detail, sizeof(detail)));
	run(&t, detail, sizeof(detail));
	uint64_t took = now_ns() - t0;
	ck_assert_int_eq(t.code, CURLE_OPERATION_TIMEDOUT);
	ck_assert_uint_ge(took, 150000000ULL);
	ck_assert_uint_lt(took, 900000000ULL); /* not the server's 1 s: our own timeout */
	http_plain_close(&t);
	pthread_join(th, NULL);
	close(s.listen_fd);
}
END_TEST

static Suite *http_plain_suite(void)
{
	Suite *s = suite_create("http_plain");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_urls_are_parsed_and_bad_ones_refused);
	tcase_add_test(tc, test_a_post_over_tcp_sends_exact_bytes_and_reads_the_status);
	tcase_add_test(tc, test_a_post_over_a_unix_socket);
	tcase_add_test(tc, test_a_refused_connection_is_a_connect_error);
	tcase_add_test(tc, test_an_early_413_is_read_although_the_body_was_not);
	tcase_add_test(tc, test_a_silent_server_times_out);
	tcase_add_test(tc, test_interim_1xx_responses_are_skipped);
	tcase_add_test(tc, test_a_status_is_read_from_its_line_only);
	tcase_add_test(tc, test_an_early_answer_on_an_open_connection_is_read_at_once);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(http_plain_suite());
}
