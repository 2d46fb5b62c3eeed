/*
 * curl_api.h - libcurl, loaded at run time on first use.
 *
 * Owns: the dlopen of libcurl (libcurl.so.4, else libcurl-gnutls.so.4), the few curl_*
 * functions the HTTP exporters call, resolved into one table, and curl_global_init.
 * Why dlopen: libddprof is injected into every process; linking -lcurl would load
 * libcurl, OpenSSL and their dependencies into each of them at start-up, including
 * processes that never upload or live a few milliseconds. <curl/curl.h> is included
 * for types and constants only.
 * Context: the uploader thread only, and only when a profile is about to be sent. In a
 * fork child the table stays valid (same mappings); only handles are per thread.
 * curl_global_cleanup is never called: the application may use libcurl too.
 */
#ifndef DDPROF_UPLOADER_CURL_API_H
#define DDPROF_UPLOADER_CURL_API_H

#include <stdbool.h>

#include <curl/curl.h>

struct curl_api {
	CURLcode (*global_init)(long flags);
	curl_version_info_data *(*version_info)(CURLversion v);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
	CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
	void (*easy_reset)(CURL *h);
	void (*easy_cleanup)(CURL *h);
	const char *(*easy_strerror)(CURLcode code);
	struct curl_slist *(*slist_append)(struct curl_slist *list, const char *s);
	void (*slist_free_all)(struct curl_slist *list);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_add_handle)(CURLM *m, CURL *h);
	CURLMcode (*multi_remove_handle)(CURLM *m, CURL *h);
	CURLMcode (*multi_perform)(CURLM *m, int *running);
	CURLMcode (*multi_poll)(CURLM *m, struct curl_waitfd extra[], unsigned n, int timeout_ms,
				int *numfds);
	CURLMsg *(*multi_info_read)(CURLM *m, int *left);
	CURLMcode (*multi_cleanup)(CURLM *m);
};

/*
 * The table, loading libcurl and running curl_global_init the first time. NULL when
 * libcurl is missing or too old (curl_multi_poll: 7.66): one warning the first time,
 * no retry afterwards. Uploader thread only.
 */
const struct curl_api *curl_api_get(void);

/* Whether libcurl has been loaded by this process (diagnostics, tests). */
bool curl_api_loaded(void);

#endif
