/*
 * curl_api.c - libcurl loaded with dlopen on first use (see curl_api.h).
 *
 * Context: the uploader thread only; one such thread exists at a time (a fork child
 * starts its own after the fork), so the state below needs no lock. A fork that happens
 * while the parent's thread is inside curl_api_get leaves load_state at LOAD_NOT_TRIED
 * in the child, whose thread then simply loads again (dlopen is reference counted).
 */
#include "uploader/curl_api.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/dl_guard.h"
#include "common/log.h"

/* Debian and most distributions ship the OpenSSL build as libcurl.so.4; some hosts only
 * have the GnuTLS one. Same ABI. */
static const char *const curl_sonames[] = {"libcurl.so.4", "libcurl-gnutls.so.4"};

enum load_state { LOAD_NOT_TRIED, LOAD_OK, LOAD_FAILED };

static struct curl_api api;
static enum load_state load_state;

/* Field of api and symbol name, for the resolve loop. */
#define SYM(field, name)                                                                           \
	{                                                                                          \
		offsetof(struct curl_api, field), name                                             \
	}
static const struct {
	size_t offset;
	const char *name;
} symbols[] = {
    SYM(global_init, "curl_global_init"),
    SYM(version_info, "curl_version_info"),
    SYM(easy_init, "curl_easy_init"),
    SYM(easy_setopt, "curl_easy_setopt"),
    SYM(easy_getinfo, "curl_easy_getinfo"),
    SYM(easy_reset, "curl_easy_reset"),
    SYM(easy_cleanup, "curl_easy_cleanup"),
    SYM(easy_strerror, "curl_easy_strerror"),
    SYM(slist_append, "curl_slist_append"),
    SYM(slist_free_all, "curl_slist_free_all"),
    SYM(multi_init, "curl_multi_init"),
    SYM(multi_add_handle, "curl_multi_add_handle"),
    SYM(multi_remove_handle, "curl_multi_remove_handle"),
    SYM(multi_perform, "curl_multi_perform"),
    SYM(multi_poll, "curl_multi_poll"),
    SYM(multi_info_read, "curl_multi_info_read"),
    SYM(multi_cleanup, "curl_multi_cleanup"),
};
#undef SYM

/*
 * OpenSSL (libcurl's TLS library on Debian) registers an atexit handler at its first
 * initialization that frees all of its state. In a fork child that handler touches
 * every page of that state, each one shared copy-on-write with the parent, so every
 * child's exit() would copy hundreds of pages: a fork-heavy server would pay that at
 * each worker exit. Initializing it first ourselves with OPENSSL_INIT_NO_ATEXIT (its
 * documented way out, OpenSSL >= 1.1.1) suppresses the handler; the process exits
 * without it as it would after _exit. Nothing happens if the application initialized
 * OpenSSL already, or if libcurl uses another TLS library.
 */
#define OPENSSL_INIT_NO_ATEXIT_FLAG 0x00080000UL
static void openssl_no_atexit(void *curl_lib)
{
	typedef int (*init_fn)(uint64_t opts, const void *settings);
	/* Looked up in libcurl's own dependency tree (its handle), where libcrypto is. */
	init_fn init = (init_fn)dlsym(curl_lib, "OPENSSL_init_crypto");
	if (init && !init(OPENSSL_INIT_NO_ATEXIT_FLAG, NULL))
		log_debug("OPENSSL_init_crypto(NO_ATEXIT) failed");
}

static int load(void)
{
	void *lib = NULL;
	for (size_t i = 0; !lib && i < sizeof(curl_sonames) / sizeof(curl_sonames[0]); i++)
		lib = dl_guard_dlopen(curl_sonames[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		log_warn("cannot load libcurl (%s): profiles are not uploaded over HTTP; "
			 "install libcurl4",
			 dlerror());
		return -1;
	}
	struct curl_api t;
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *f = dlsym(lib, symbols[i].name);
		if (!f) {
			log_warn("libcurl lacks %s (7.66 or later is needed): profiles are not "
				 "uploaded over HTTP",
				 symbols[i].name);
			dl_guard_dlclose(lib);
			return -1;
		}
		/* POSIX guarantees a function pointer round-trips through void *. */
		memcpy((char *)&t + symbols[i].offset, &f, sizeof(f));
	}
	openssl_no_atexit(lib);
	CURLcode rc = t.global_init(CURL_GLOBAL_DEFAULT);
	if (rc != CURLE_OK) {
		log_warn("curl_global_init failed (%d): profiles are not uploaded over HTTP",
			 (int)rc);
		return -1; /* lib stays loaded: the init may have registered callbacks */
	}
	api = t;
	curl_version_info_data *v = api.version_info(CURLVERSION_NOW);
	log_debug("loaded libcurl %s", v && v->version ? v->version : "(unknown version)");
	return 0;
}

const struct curl_api *curl_api_get(void)
{
	if (load_state == LOAD_NOT_TRIED)
		load_state = load() == 0 ? LOAD_OK : LOAD_FAILED;
	return load_state == LOAD_OK ? &api : NULL;
}

bool curl_api_loaded(void)
{
	return load_state == LOAD_OK;
}
