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

static bool load(void)
{
	void *h = dl_guard_dlopen(Z_API_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		log_warn("cannot load %s (%s): profiles cannot be compressed", Z_API_SONAME,
			 dlerror());
		return false;
	}
	static const char *const names[] = {"deflateInit2_", "deflate", "deflateEnd", "crc32"};
	void *f[4];
	for (size_t i = 0; i < 4; i++) {
		f[i] = dlsym(h, names[i]);
		if (!f[i]) {
			log_warn("%s lacks %s: profiles cannot be compressed", Z_API_SONAME,
				 names[i]);
			return false;
		}
	}
	/* POSIX guarantees a function pointer round-trips through void *. */
	memcpy(&api.deflateInit2_, &f[0], sizeof(f[0]));
	memcpy(&api.deflate, &f[1], sizeof(f[1]));
	memcpy(&api.deflateEnd, &f[2], sizeof(f[2]));
	memcpy(&api.crc32, &f[3], sizeof(f[3]));
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

const struct z_api *z_api_get(void)
{
	if (state == Z_UNTRIED)
		state = load() ? Z_READY : Z_MISSING;
	return state == Z_READY ? &api : NULL;
}
