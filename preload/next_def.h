/*
 * next_def.h - the next definition of a function this library interposes: another
 * interposer's, or libc's, looked up once (dlsym RTLD_NEXT) and kept in the wrapper's
 * slot.
 *
 * Each file's constructor resolves its slots, so dlsym runs in a wrapper only for a
 * call made before it (another library's constructor, which runs before ours): normal
 * context, unless a handler installed by such a constructor calls in that window. Then
 * dlsym runs in a handler: glibc's takes the loader's recursive lock and allocates
 * nothing when the symbol is found, as libc's always is. The alternative, calling
 * libc's aliases or raw system calls in that window, would skip an interposer loaded
 * after us (a proxy's connect, a sandbox's read), which changes what the application
 * does; we keep the lookup. errno is kept.
 * Context: application threads, normal context or their signal handlers (see above).
 */
#ifndef DDPROF_PRELOAD_NEXT_DEF_H
#define DDPROF_PRELOAD_NEXT_DEF_H

#include <dlfcn.h>
#include <errno.h>

static inline void *next_def(void **slot, const char *name)
{
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!f) {
		int saved = errno;
		f = dlsym(RTLD_NEXT, name);
		errno = saved;
		/* Release pairs with the acquire above: every thread resolves the same. */
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}

#endif
