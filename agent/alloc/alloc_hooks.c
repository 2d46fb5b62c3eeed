/*
 * alloc_hooks.c - the allocation hooks (see alloc_hooks.h).
 *
 * The hooks in this file are async-signal-safe in what they add to the call: each calls
 * the allocator the application called (orig.*), in the context the application called
 * it from, then only lock-free, allocation-free code of ours. Install, notify and the
 * service run in normal context. Every hook is a function of its own with a frame pointer (the
 * library is built with -fno-omit-frame-pointer), so that HOOK_CALLER_REGS reads its caller's state
 * exactly.
 */
#include "agent/alloc/alloc_hooks.h"

#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "agent/alloc/alloc_sample.h"
#include "agent/alloc/hook_set.h"
#include "agent/alloc/live_heap.h"
#include "common/fork_child.h"
#include "agent/sample/sampler.h"
#include "agent/unwind/unwind.h"

static struct alloc_originals orig;
/* Set while the thread is in hook_reallocarray: libc's reallocarray calls realloc through
 * its own GOT slot, patched too; the one allocation is counted once, by reallocarray. */
static __thread bool in_reallocarray __attribute__((tls_model("initial-exec")));
/* Relaxed: set at start-up, before any GOT slot points to a hook. */
static _Atomic bool record_allocations;
/* Relaxed: a counter for diagnostics. */
static _Atomic uint64_t samples_recorded;

/* async-signal-safe. The sampled allocation p of size bytes, weighing weight bytes
 * (alloc_sample.h): unwound once, recorded as an allocation sample and tracked in the
 * live heap, as asked. */
static __attribute__((noinline)) void sampled(void *p, uint64_t size, uint64_t weight,
					      const struct unwind_regs *caller)
{
	bool allocations = atomic_load_explicit(&record_allocations, memory_order_relaxed);
	bool heap = live_heap_on();
	struct sampler_caller c;
	if ((!allocations && !heap) || !sampler_caller_begin(caller, &c))
		return;
	if (allocations) {
		const uint64_t values[2] = {1, weight};
		sampler_caller_record(&c, PROFILE_ALLOC, values);
		atomic_fetch_add_explicit(&samples_recorded, 1, memory_order_relaxed);
	}
	if (heap)
		live_heap_track((uintptr_t)p, size, weight, c.tid, c.pcs, c.n);
	sampler_caller_end(&c);
}

/* async-signal-safe. Counts size bytes of the allocation p (NULL: it failed, nothing
 * to count) and records it when sampled (the realloc hooks, which count after the call:
 * the old block's fate depends on it). */
#define COUNT(p, size)                                                                             \
	do {                                                                                       \
		if (p) {                                                                           \
			uint64_t w_ = alloc_sample_bytes(size);                                    \
			if (__builtin_expect(w_ != 0, 0)) {                                        \
				struct unwind_regs r_ = HOOK_CALLER_REGS();                        \
				sampled(p, size, w_, &r_);                                         \
			}                                                                          \
		}                                                                                  \
	} while (0)

/* async-signal-safe. The body of the allocating hooks: size bytes counted before the
 * call, so that an allocation that holds no sample point (all but about one in
 * interval / size) is a countdown and a tail call to the allocator, with no frame of
 * ours left on the stack and no register saved; one that does goes to a slow_*
 * function of its own with the hook's caller registers, which allocates and records.
 * An allocation that then fails drops its sample (it allocated nothing), as rare as
 * the failure. */
#define COUNT_FIRST(size, fast_call, slow_call)                                                    \
	do {                                                                                       \
		if (__builtin_expect(!alloc_sample_due(size), 1))                                  \
			return (fast_call);                                                        \
		const struct unwind_regs caller_ = HOOK_CALLER_REGS();                             \
		return (slow_call);                                                                \
	} while (0)

/* async-signal-safe. The weight of the allocation a slow_* function makes (0: the
 * countdown ran out without a sample point in it). */
#define SLOW_WEIGHT() alloc_sample_slow(&alloc_sample_tls)

/* async-signal-safe. The slow_* bodies: p, the allocation; recorded when it succeeded
 * and holds a sample point. */
#define RECORD(p, size, w, caller)                                                                 \
	do {                                                                                       \
		if ((p) && (w))                                                                    \
			sampled((p), (size), (w), (caller));                                       \
	} while (0)

/* async-signal-safe */
static __attribute__((noinline)) void *slow_malloc(size_t size, const struct unwind_regs *caller)
{
	uint64_t w = SLOW_WEIGHT();
	void *p = orig.malloc(size);
	RECORD(p, size, w, caller);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_malloc(size_t size)
{
	COUNT_FIRST(size, orig.malloc(size), slow_malloc(size, &caller_));
}

/* async-signal-safe. A free the coarse filter could not clear. */
static __attribute__((noinline)) void slow_free(void *p)
{
	/* Before the real free: once it returns, another thread may get p again. */
	live_heap_untrack((uintptr_t)p, NULL);
	orig.free(p);
}

/* async-signal-safe. Most frees are the filter's load and a tail call to free. Only
 * installed with the live heap on (a table never initialized has only zero counts). */
static __attribute__((noinline)) void hook_free(void *p)
{
	if (__builtin_expect(p != NULL && live_table_may_hold(&live_heap_table, (uintptr_t)p), 0)) {
		slow_free(p);
		return;
	}
	orig.free(p);
}

/* async-signal-safe */
static __attribute__((noinline)) void *slow_calloc(size_t n, size_t size,
						   const struct unwind_regs *caller)
{
	uint64_t w = SLOW_WEIGHT();
	void *p = orig.calloc(n, size);
	RECORD(p, n * size, w, caller); /* it succeeded: no overflow */
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_calloc(size_t n, size_t size)
{
	size_t bytes;
	if (__builtin_mul_overflow(n, size, &bytes))
		return orig.calloc(n, size); /* it fails: nothing to count */
	COUNT_FIRST(bytes, orig.calloc(n, size), slow_calloc(n, size, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_realloc(void *old, size_t size)
{
	/* The old block leaves the live heap before the real realloc frees it; a realloc
	 * that fails keeps it (tracked again), one of size 0 frees it. */
	struct live_table_entry e;
	bool had = old && live_heap_untrack((uintptr_t)old, &e);
	void *p = orig.realloc(old, size);
	if (!p && size && had)
		live_heap_retrack(&e);
	if (!in_reallocarray)
		COUNT(p, size);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_reallocarray(void *old, size_t n, size_t size)
{
	struct live_table_entry e;
	bool had = old && live_heap_untrack((uintptr_t)old, &e);
	in_reallocarray = true;
	void *p = orig.reallocarray(old, n, size);
	in_reallocarray = false;
	if (!p && n && size && had)
		live_heap_retrack(&e);
	COUNT(p, n * size); /* it succeeded: no overflow */
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) int slow_posix_memalign(void **out, size_t align, size_t size,
							 const struct unwind_regs *caller)
{
	uint64_t w = SLOW_WEIGHT();
	int rc = orig.posix_memalign(out, align, size);
	RECORD(rc == 0 ? *out : NULL, size, w, caller);
	return rc;
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_posix_memalign(void **out, size_t align, size_t size)
{
	COUNT_FIRST(size, orig.posix_memalign(out, align, size),
		    slow_posix_memalign(out, align, size, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) void *slow_aligned_alloc(size_t align, size_t size,
							  const struct unwind_regs *caller)
{
	uint64_t w = SLOW_WEIGHT();
	void *p = orig.aligned_alloc(align, size);
	RECORD(p, size, w, caller);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_aligned_alloc(size_t align, size_t size)
{
	COUNT_FIRST(size, orig.aligned_alloc(align, size),
		    slow_aligned_alloc(align, size, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) void *slow_memalign(size_t align, size_t size,
						     const struct unwind_regs *caller)
{
	uint64_t w = SLOW_WEIGHT();
	void *p = orig.memalign(align, size);
	RECORD(p, size, w, caller);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_memalign(size_t align, size_t size)
{
	COUNT_FIRST(size, orig.memalign(align, size), slow_memalign(align, size, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) void *slow_valloc(size_t size, const struct unwind_regs *caller)
{
	uint64_t w = SLOW_WEIGHT();
	void *p = orig.valloc(size);
	RECORD(p, size, w, caller);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_valloc(size_t size)
{
	COUNT_FIRST(size, orig.valloc(size), slow_valloc(size, &caller_));
}

/* async-signal-safe */
static __attribute__((noinline)) void *slow_pvalloc(size_t size, const struct unwind_regs *caller)
{
	uint64_t w = SLOW_WEIGHT();
	void *p = orig.pvalloc(size);
	RECORD(p, size, w, caller);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_pvalloc(size_t size)
{
	COUNT_FIRST(size, orig.pvalloc(size), slow_pvalloc(size, &caller_));
}

/* The table got_patch applies: the originals are resolved by it (dlsym) before any slot
 * points at a hook; an entry point it cannot resolve keeps its slots, and its hook is
 * never reached. free last: without the live heap it is left out (TABLE_N), and the
 * application's frees do not pass through us. */
static struct got_patch_entry table[] = {
    {"malloc", (void *)hook_malloc, (void **)&orig.malloc},
    {"calloc", (void *)hook_calloc, (void **)&orig.calloc},
    {"realloc", (void *)hook_realloc, (void **)&orig.realloc},
    {"reallocarray", (void *)hook_reallocarray, (void **)&orig.reallocarray},
    {"posix_memalign", (void *)hook_posix_memalign, (void **)&orig.posix_memalign},
    {"aligned_alloc", (void *)hook_aligned_alloc, (void **)&orig.aligned_alloc},
    {"memalign", (void *)hook_memalign, (void **)&orig.memalign},
    {"valloc", (void *)hook_valloc, (void **)&orig.valloc},
    {"pvalloc", (void *)hook_pvalloc, (void **)&orig.pvalloc},
    {"free", (void *)hook_free, (void **)&orig.free},
};
#define TABLE_N (sizeof(table) / sizeof(table[0]))

/* Read by every fork child's handler (installed): on the page it touches anyway. */
FORK_CHILD_DATA static struct hook_set set;

int alloc_hooks_install(bool allocations)
{
	atomic_store_explicit(&record_allocations, allocations, memory_order_relaxed);
	return hook_set_install(&set, table, live_heap_on() ? TABLE_N : TABLE_N - 1);
}

FORK_CHILD_PATH bool alloc_hooks_installed(void)
{
	return hook_set_installed(&set);
}

void alloc_hooks_notify(void)
{
	hook_set_notify(&set);
}

bool alloc_hooks_rescan_wanted(void)
{
	return hook_set_rescan_wanted(&set);
}

uint64_t alloc_hooks_service(uint64_t now_ns)
{
	return hook_set_service(&set, now_ns);
}

uint64_t alloc_hooks_samples(void)
{
	return atomic_load_explicit(&samples_recorded, memory_order_relaxed);
}
