/*
 * alloc_hooks.c - the allocation hooks (see alloc_hooks.h).
 *
 * This file is async-signal-safe except alloc_hooks_resolve and alloc_hooks_enable
 * (start-up): the hooks run wherever the application allocates. Every hook is a
 * function of its own with a frame pointer (the library is built with
 * -fno-omit-frame-pointer), so that CALLER_REGS reads its caller's state exactly.
 */
#include "agent/alloc/alloc_hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "agent/alloc/alloc_sample.h"
#include "agent/sample/sampler.h"
#include "agent/unwind/unwind.h"

static struct alloc_originals orig;
/* Relaxed: set at start-up, before any GOT slot points to a hook. */
static _Atomic bool record_allocations;

/* The registers of the hook's caller at its call: the pc of the call instruction (the
 * return address minus one: a call that ends a function must not be named after the
 * next one), the stack pointer as the call left it (the hook's frame address plus its
 * saved frame pointer and return address) and the caller's frame pointer (saved by
 * the hook's prologue). Only inside the hook itself. */
#define CALLER_REGS()                                                                              \
	((struct unwind_regs){.pc = (uintptr_t)__builtin_return_address(0) - 1,                    \
			      .sp = (uintptr_t)__builtin_frame_address(0) + 2 * sizeof(uintptr_t), \
			      .fp = *(const uintptr_t *)__builtin_frame_address(0)})

/* async-signal-safe. A sampled allocation of weight bytes (alloc_sample.h). */
static __attribute__((noinline)) void sampled(uint64_t weight, const struct unwind_regs *caller)
{
	if (atomic_load_explicit(&record_allocations, memory_order_relaxed)) {
		const uint64_t values[2] = {1, weight};
		sampler_record_caller(PROFILE_ALLOC, caller, values);
	}
}

/* async-signal-safe. Counts size bytes of the allocation p (NULL: it failed, nothing
 * to count) and records it when sampled. */
#define COUNT(p, size)                                                                             \
	do {                                                                                       \
		if (p) {                                                                           \
			uint64_t w_ = alloc_sample_bytes(size);                                    \
			if (__builtin_expect(w_ != 0, 0)) {                                        \
				struct unwind_regs r_ = CALLER_REGS();                             \
				sampled(w_, &r_);                                                  \
			}                                                                          \
		}                                                                                  \
	} while (0)

/* async-signal-safe */
static __attribute__((noinline)) void *hook_malloc(size_t size)
{
	void *p = orig.malloc(size);
	COUNT(p, size);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void hook_free(void *p)
{
	orig.free(p);
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_calloc(size_t n, size_t size)
{
	void *p = orig.calloc(n, size);
	COUNT(p, n * size); /* it succeeded: no overflow */
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_realloc(void *old, size_t size)
{
	void *p = orig.realloc(old, size);
	COUNT(p, size);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_reallocarray(void *old, size_t n, size_t size)
{
	void *p = orig.reallocarray(old, n, size);
	COUNT(p, n * size); /* it succeeded: no overflow */
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) int hook_posix_memalign(void **out, size_t align, size_t size)
{
	int rc = orig.posix_memalign(out, align, size);
	COUNT(rc == 0 ? *out : NULL, size);
	return rc;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_aligned_alloc(size_t align, size_t size)
{
	void *p = orig.aligned_alloc(align, size);
	COUNT(p, size);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_memalign(size_t align, size_t size)
{
	void *p = orig.memalign(align, size);
	COUNT(p, size);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_valloc(size_t size)
{
	void *p = orig.valloc(size);
	COUNT(p, size);
	return p;
}

/* async-signal-safe */
static __attribute__((noinline)) void *hook_pvalloc(size_t size)
{
	void *p = orig.pvalloc(size);
	COUNT(p, size);
	return p;
}

const struct alloc_hook alloc_hooks[] = {
    {"malloc", (void *)hook_malloc, (void **)&orig.malloc},
    {"free", (void *)hook_free, (void **)&orig.free},
    {"calloc", (void *)hook_calloc, (void **)&orig.calloc},
    {"realloc", (void *)hook_realloc, (void **)&orig.realloc},
    {"reallocarray", (void *)hook_reallocarray, (void **)&orig.reallocarray},
    {"posix_memalign", (void *)hook_posix_memalign, (void **)&orig.posix_memalign},
    {"aligned_alloc", (void *)hook_aligned_alloc, (void **)&orig.aligned_alloc},
    {"memalign", (void *)hook_memalign, (void **)&orig.memalign},
    {"valloc", (void *)hook_valloc, (void **)&orig.valloc},
    {"pvalloc", (void *)hook_pvalloc, (void **)&orig.pvalloc},
};
const unsigned alloc_hooks_count = sizeof(alloc_hooks) / sizeof(alloc_hooks[0]);

int alloc_hooks_resolve(void)
{
	for (unsigned i = 0; i < alloc_hooks_count; i++)
		*alloc_hooks[i].original = dlsym(RTLD_DEFAULT, alloc_hooks[i].symbol);
	if (!orig.malloc || !orig.free)
		return -ENOENT;
	/* Entry points some allocators lack (a preloaded one may define malloc and free
	 * but not the obsolete ones): libc's, which the program would reach without us
	 * too. */
	if (!orig.calloc)
		orig.calloc = calloc;
	if (!orig.realloc)
		orig.realloc = realloc;
	if (!orig.reallocarray)
		orig.reallocarray = reallocarray;
	if (!orig.posix_memalign)
		orig.posix_memalign = posix_memalign;
	if (!orig.aligned_alloc)
		orig.aligned_alloc = aligned_alloc;
	if (!orig.memalign)
		orig.memalign = memalign;
	if (!orig.valloc)
		orig.valloc = valloc;
	if (!orig.pvalloc)
		orig.pvalloc = pvalloc;
	return 0;
}

void alloc_hooks_enable(bool allocations)
{
	atomic_store_explicit(&record_allocations, allocations, memory_order_relaxed);
}
