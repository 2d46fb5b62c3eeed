/*
 * alloc_hooks.h - the functions the application's allocation calls reach while
 * allocation or heap profiling is on.
 *
 * Owns: one hook per allocation entry point (malloc, calloc, realloc, reallocarray,
 * free, posix_memalign, aligned_alloc, memalign, valloc, pvalloc), the process's
 * original functions they call, and what they record. The
 * hooks are reached through the modules' GOT slots (agent/alloc/got_patch.h), never
 * through exported symbols: with profiling off no allocation passes through us.
 * Each hook calls the original first, then counts the bytes against the thread's
 * sampling countdown (agent/alloc/alloc_sample.h); a sampled allocation is unwound from
 * the hook's caller and recorded (agent/sample/sampler.h: sampler_caller_begin). A
 * realloc counts as a free of the old block and an allocation of the new size.
 * Known limit: the slots of a library dlopen'ed later are patched by the profiler's
 * thread within milliseconds of its load (dlopen itself cannot be wrapped past its
 * return: it reads its caller's address), so its constructor's allocations and those
 * of the first moments after the load are not sampled.
 * Context: the hooks are async-signal-safe (the application may allocate in its signal
 * handlers); the other functions run in normal context.
 */
#ifndef DDPROF_AGENT_ALLOC_ALLOC_HOOKS_H
#define DDPROF_AGENT_ALLOC_ALLOC_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The process's allocator: what the hooks call. Every entry set before any hook runs
 * (the ones a libc lacks fall back, e.g. pvalloc on valloc, never to NULL). */
struct alloc_originals {
	void *(*malloc)(size_t);
	void (*free)(void *);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*reallocarray)(void *, size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
};

/* Start-up, after sampling is enabled: points every loaded module's slots for the
 * entry points at the hooks (agent/alloc/got_patch.h); allocations: whether they record
 * allocation samples (PROFILE_ALLOC). free is hooked only when the live heap is on
 * (live_heap_init first): without it, frees do not pass through us. 0 or a negative
 * errno (nothing is hooked). */
int alloc_hooks_install(bool allocations);
bool alloc_hooks_installed(void);

/* The application called dlopen (before the load) or dlclose (after): the host's service
 * rescans the modules for a while. Any thread, normal context; a relaxed store. */
void alloc_hooks_notify(void);
/* Whether a notify is waiting (a relaxed load: the host's poll). */
bool alloc_hooks_rescan_wanted(void);
/* The host thread: patches the modules loaded since the last rescan (a quick no-op when
 * none was); returns when it is next due (CLOCK_MONOTONIC; UINT64_MAX when nothing is
 * installed). */
uint64_t alloc_hooks_service(uint64_t now_ns);
/* Sampled allocations recorded (any thread, a relaxed load). */
uint64_t alloc_hooks_samples(void);

#endif
