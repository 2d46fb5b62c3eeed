/*
 * sym_demangle.c - __cxa_demangle found lazily (see sym_demangle.h).
 *
 * Context: uploader thread, one caller at a time. libstdc++, when we had to dlopen it,
 * is never closed: the function pointer stays valid for the life of the process.
 */
#include "agent/symbolize/sym_demangle.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

#include "common/dl_guard.h"
#include "common/log.h"

#define LIBSTDCXX_SONAME "libstdc++.so.6"

typedef char *(*cxa_demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

enum demangler_state { DEMANGLER_UNTRIED, DEMANGLER_READY, DEMANGLER_MISSING };

static enum demangler_state state = DEMANGLER_UNTRIED;
static cxa_demangle_fn cxa_demangle;

static void find_demangler(void)
{
	*(void **)(&cxa_demangle) = dlsym(RTLD_DEFAULT, "__cxa_demangle");
	if (!cxa_demangle) {
		void *h = dl_guard_dlopen(LIBSTDCXX_SONAME, RTLD_LAZY | RTLD_LOCAL);
		if (h)
			*(void **)(&cxa_demangle) = dlsym(h, "__cxa_demangle");
	}
	state = cxa_demangle ? DEMANGLER_READY : DEMANGLER_MISSING;
	if (!cxa_demangle)
		log_info("no C++ demangler (%s not loadable): C++ names stay mangled",
			 LIBSTDCXX_SONAME);
}

bool sym_demangle_is_mangled(const char *name)
{
	return name && name[0] == '_' && name[1] == 'Z' && name[2] != '\0';
}

char *sym_demangle(const char *name)
{
	if (!sym_demangle_is_mangled(name))
		return NULL;
	if (state == DEMANGLER_UNTRIED)
		find_demangler();
	if (state != DEMANGLER_READY)
		return NULL;
	int status = 0;
	char *out = cxa_demangle(name, NULL, NULL, &status);
	if (status != 0) {
		free(out);
		return NULL;
	}
	return out;
}
