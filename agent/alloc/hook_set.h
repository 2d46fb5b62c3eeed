/*
 * hook_set.h - one table of GOT hooks kept applied to every module the process loads.
 *
 * Owns: a table's install state and its rescans. The allocation, lock and wall hooks
 * each keep one (agent/alloc/alloc_hooks.c, agent/lock/lock_hooks.c,
 * agent/wall/wall_hooks.c): installed at start-up by got_patch_apply
 * (agent/alloc/got_patch.h), then applied again by the host thread's service after the
 * application's dlopen or dlclose (a rescan every HOOK_SET_POLL_NS for a while: the
 * module appears when the loader is done, which the notify does not wait for), after
 * the profiler's own loads (libdw, libcurl, zlib: its threads' calls from them are its
 * share), and every HOOK_SET_PERIOD_NS anyway (libraries libc loads itself: NSS
 * modules, iconv).
 * Context: install at start-up; notify from any thread in normal context (the dlopen
 * and dlclose wrappers); rescan_wanted and service from the host thread; installed from
 * anywhere (a relaxed load).
 */
#ifndef DDPROF_AGENT_ALLOC_HOOK_SET_H
#define DDPROF_AGENT_ALLOC_HOOK_SET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/alloc/got_patch.h"
#include "agent/unwind/unwind.h"

/* The registers of a hook's caller at its call: the pc of the call instruction (the
 * return address minus one: a call that ends a function must not be named after the
 * next one), the stack pointer as the call left it (the hook's frame address plus its
 * saved frame pointer and return address) and the caller's frame pointer (saved by
 * the hook's prologue). Only inside the hook itself, a function of its own with a frame
 * pointer (the library is built with -fno-omit-frame-pointer). */
#define HOOK_CALLER_REGS()                                                                         \
	((struct unwind_regs){.pc = (uintptr_t)__builtin_return_address(0) - 1,                    \
			      .sp = (uintptr_t)__builtin_frame_address(0) + 2 * sizeof(uintptr_t), \
			      .fp = *(const uintptr_t *)__builtin_frame_address(0)})

#define HOOK_SET_POLL_NS (2ULL * 1000 * 1000)
#define HOOK_SET_POLLS 50
#define HOOK_SET_PERIOD_NS (5ULL * 1000 * 1000 * 1000)

struct hook_set {
	struct got_patch_entry *table;
	size_t n; /* entries applied (a prefix of the table) */
	/* Relaxed: written at start-up (installed) and by the application's dlopen and
	 * dlclose (notified, a hint the service reads). */
	_Atomic bool installed;
	_Atomic bool notified;
	/* The host thread's: rescans left after a notify, and the profiler's own loads
	 * already patched (dl_guard_loads). */
	unsigned rescans_left;
	uint64_t own_loads_seen;
};

/* Start-up: applies the first n entries of table (n <= its size) and keeps them applied
 * from then on. 0, or the negative errno of got_patch_apply (nothing is hooked). h may
 * be zero-initialized fork-child data (FORK_CHILD_DATA, common/fork_child.h). */
int hook_set_install(struct hook_set *h, struct got_patch_entry *table, size_t n);

static inline bool hook_set_installed(const struct hook_set *h)
{
	return atomic_load_explicit(&h->installed, memory_order_relaxed);
}

void hook_set_notify(struct hook_set *h);
bool hook_set_rescan_wanted(const struct hook_set *h);
/* Applies the table to what was loaded since; returns when it is next due
 * (CLOCK_MONOTONIC; UINT64_MAX when nothing is installed). */
uint64_t hook_set_service(struct hook_set *h, uint64_t now_ns);

#endif
