/*
 * z_api.c - zlib loaded with dlopen on first use (see z_api.h).
 * Context: uploader thread (and tests); never a signal handler.
 */
#include "common/z_api.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

#include "common/dl_guard.h"
#include "common/log.h"

static struct z_api api;
static enum { Z_UNTRIED, Z_READY, Z_MISSING } state;
static void *handle;

/* The functions z_api holds, and deflateReset: deflateInit2_ calls it. */
static const char *const names[] = {"deflateInit2_", "deflate", "deflateEnd", "crc32",
				    "deflateReset"};
#define API_FUNCTIONS 4 /* the first four of names */
#define NAMES (sizeof(names) / sizeof(names[0]))

static void set_api(void *const f[API_FUNCTIONS])
{
	/* POSIX guarantees a function pointer round-trips through void *. */
	memcpy(&api.deflateInit2_, &f[0], sizeof(f[0]));
	memcpy(&api.deflate, &f[1], sizeof(f[1]));
	memcpy(&api.deflateEnd, &f[2], sizeof(f[2]));
	memcpy(&api.crc32, &f[3], sizeof(f[3]));
}

/*
 * A zlib the process has in its global scope already: the program's own, linked in and
 * exported (Node.js's bundled Chromium zlib), or libz.so.1 the program links. Loading
 * libz.so.1 beside a program's own zlib is not safe: libz's functions call one another
 * through its PLT, which binds to the global scope's definitions first, so libz's
 * deflateInit2_ ran Node's deflateReset on a state of another layout (a crash in the
 * first gzip of every profiled node process). Used only when every function, and
 * deflateReset, comes from one object; the handle stays NULL (nothing to unload).
 */
static bool load_global(void)
{
	void *f[NAMES];
	const void *base = NULL;
	for (size_t i = 0; i < NAMES; i++) {
		Dl_info info;
		f[i] = dlsym(RTLD_DEFAULT, names[i]);
		if (!f[i] || !dladdr(f[i], &info) || (i > 0 && info.dli_fbase != base))
			return false;
		base = info.dli_fbase;
	}
	set_api(f);
	return true;
}

static bool load(void)
{
	if (load_global())
		return true;
	void *h = dl_guard_dlopen(Z_API_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		log_warn("cannot load %s (%s): profiles cannot be compressed", Z_API_SONAME,
			 dlerror());
		return false;
	}
	void *f[API_FUNCTIONS];
	for (size_t i = 0; i < API_FUNCTIONS; i++) {
		f[i] = dlsym(h, names[i]);
		if (!f[i]) {
			log_warn("%s lacks %s: profiles cannot be compressed", Z_API_SONAME,
				 names[i]);
			return false;
		}
	}
	set_api(f);
	handle = h;
	return true;
}

void z_api_unload(void)
{
	if (state != Z_READY || !handle || !dl_guard_unload_allowed())
		return;
	/* Reset before the unlock: a fork waiting for the guard must not give a child a
	 * table into an unmapped library. */
	dl_guard_lock();
	dl_guard_dlclose_locked(handle);
	handle = NULL;
	state = Z_UNTRIED;
	dl_guard_unlock();
}

bool z_api_loaded(void)
{
	return state == Z_READY;
}

const struct z_api *z_api_get(void)
{
	if (state == Z_UNTRIED)
		state = load() ? Z_READY : Z_MISSING;
	return state == Z_READY ? &api : NULL;
}
