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
 * the hook's caller and recorded (agent/sample/sampler.h: sampler_record_caller). A
 * realloc counts as a free of the old block and an allocation of the new size.
 * Context: async-signal-safe (the application may allocate in its signal handlers);
 * alloc_hooks_set_originals and alloc_hooks_enable run at start-up, before any slot
 * points here.
 */
#ifndef DDPROF_AGENT_ALLOC_ALLOC_HOOKS_H
#define DDPROF_AGENT_ALLOC_ALLOC_HOOKS_H

#include <stdbool.h>
#include <stddef.h>

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

/* One entry point: its symbol, the hook, and where the hook's original is kept. */
struct alloc_hook {
	const char *symbol;
	void *hook;
	void **original;
};

/* The entry points, in a constant table (got_patch applies it). */
extern const struct alloc_hook alloc_hooks[];
extern const unsigned alloc_hooks_count;

/* Resolves the originals (the definitions the program itself binds to: another
 * library's when one is preloaded, e.g. jemalloc). 0, or -ENOENT when malloc or free
 * has none. Start-up, normal context. */
int alloc_hooks_resolve(void);

/* Whether the hooks record allocation samples (PROFILE_ALLOC). Start-up. */
void alloc_hooks_enable(bool allocations);

#endif
