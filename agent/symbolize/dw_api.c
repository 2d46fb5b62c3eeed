/*
 * dw_api.c - dlopen of libdw and dlsym of its functions (see dw_api.h).
 *
 * Context: uploader thread, one caller at a time. The handle is closed only when no
 * Dwfl session is open (dw_api_unload): the sessions and the strings they return point
 * into the library. The symbolizer keeps copies of what it names (agent/symbolize/sym_cache.c).
 * dlclose runs under the fork guard (common/dl_guard.h).
 */
#include "agent/symbolize/dw_api.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>

#include "agent/symbolize/dw_memory.h"
#include "common/dl_guard.h"
#include "common/fork_child.h"
#include "common/log.h"

enum dw_state { DW_UNTRIED, DW_READY, DW_MISSING };

static enum dw_state state = DW_UNTRIED;
static struct dw_api api;
static void *handle;
/* Reset by a fork child (dw_api_forget_sessions): on the page it writes anyway. */
FORK_CHILD_DATA static unsigned sessions;
static const char *soname = DW_API_SONAME;

static bool load(void)
{
	/* RTLD_LOCAL: libdw's symbols must not interpose on anything of the application. */
	dw_memory_before_load();
	void *h = dl_guard_dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		log_info("%s not loadable (%s): function names from ELF symbol tables only, no "
			 "inlined frames or lines",
			 soname, dlerror());
		return false;
	}
	/* Filled aside: a table handed out earlier stays intact if this load fails. */
	struct dw_api t;
	const char *missing = NULL;
#define DW_API_RESOLVE(name)                                                                       \
	*(void **)(&t.name) = dlsym(h, #name);                                                     \
	if (!t.name && !missing)                                                                   \
		missing = #name;
	DW_API_FUNCS(DW_API_RESOLVE)
#undef DW_API_RESOLVE
	if (missing) {
		log_warn("%s lacks %s: symbolizing from ELF symbol tables only", soname, missing);
		dl_guard_dlclose(h);
		return false;
	}
	/* Before any libdw call: its large blocks must never be glibc's (dw_memory.h). */
	dw_memory_install(h);
	api = t;
	handle = h;
	return true;
}

void dw_api_session_opened(void)
{
	sessions++;
}

FORK_CHILD_PATH void dw_api_forget_sessions(void)
{
	sessions = 0;
}

/* Set in a fork child whose parent's uploader may have been inside libdw: a lock or a
 * one-time initialization of libdw's may be held by a thread that is not here. On the
 * page a fork child writes anyway. */
FORK_CHILD_DATA static bool forbidden;

FORK_CHILD_PATH void dw_api_forbid_after_fork(void)
{
	forbidden = true;
}

void dw_api_session_closed(void)
{
	if (sessions > 0)
		sessions--;
}

bool dw_api_unload(void)
{
	if (state != DW_READY || sessions > 0 || !handle || !dl_guard_unload_allowed())
		return false;
	/* Reset before the unlock: a fork waiting for the guard must not give a child a
	 * table into an unmapped library. */
	dl_guard_lock();
	dw_memory_uninstall();
	dl_guard_dlclose_locked(handle);
	handle = NULL;
	state = DW_UNTRIED;
	dl_guard_unlock();
	return true;
}

const struct dw_api *dw_api_get(void)
{
	if (forbidden) {
		static bool told;
		if (!told)
			log_info("forked while the parent's profiler thread was naming functions "
				 "with libdw: this process names them from symbol tables only");
		told = true;
		return NULL;
	}
	if (state == DW_UNTRIED)
		state = load() ? DW_READY : DW_MISSING;
	return state == DW_READY ? &api : NULL;
}

void dw_api_test_reset(const char *name)
{
	state = DW_UNTRIED;
	soname = name ? name : DW_API_SONAME;
}
