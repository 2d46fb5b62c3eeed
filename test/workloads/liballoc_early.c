/*
 * liballoc_early.c - a preloaded library that allocates before libddprof's constructor
 * and interposes malloc the way many wrappers do, for the allocation profile's tests.
 *
 * Preloaded after libddprof (LD_PRELOAD="libddprof.so liballoc_early.so"), its
 * constructor runs first (the loader initializes later preloads first). It:
 *  - keeps 256 blocks of 4 KiB allocated there, freed later by its thread (frees of
 *    blocks the profiler never saw allocated);
 *  - starts a thread (early_loop) that allocates and frees blocks of 16 B .. 4 KiB
 *    without pause until early_stop(), counting their bytes;
 *  - records whether libddprof was running yet (ddprof_status, looked up with dlsym).
 * It defines malloc, free, calloc and realloc, counting calls and calling the next
 * definitions, which it looks up with dlsym(RTLD_NEXT) at the first call and again after
 * early_relookup() (at the next malloc or realloc): a lookup that allocates (a missing name's
 * error message, a missing library's search), those allocations served from a static arena, as such
 * wrappers do, and counted. The program's allocation hooks then call it, and it calls dlsym from
 * inside a hooked allocation.
 * Context: any thread; the wrappers must not allocate through themselves.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);

static __thread int in_lookup __attribute__((tls_model("initial-exec")));
static _Atomic int relookup;
static _Atomic uint64_t wrap_calls, lookup_allocs, lookups;

/* The arena for allocations made while dlsym runs: a size header before each block. */
static _Alignas(16) char arena[1 << 16];
static _Atomic size_t arena_used;

static void *arena_alloc(size_t n)
{
	size_t need = 16 + ((n + 15) & ~(size_t)15);
	size_t at = atomic_fetch_add(&arena_used, need);
	if (at + need > sizeof(arena))
		return NULL;
	memcpy(arena + at, &n, sizeof(n));
	atomic_fetch_add(&lookup_allocs, 1);
	return arena + at + 16;
}

static int in_arena(const void *p)
{
	return (const char *)p >= arena && (const char *)p < arena + sizeof(arena);
}

static void lookup(void)
{
	in_lookup = 1;
	next_malloc = dlsym(RTLD_NEXT, "malloc");
	next_free = dlsym(RTLD_NEXT, "free");
	next_calloc = dlsym(RTLD_NEXT, "calloc");
	next_realloc = dlsym(RTLD_NEXT, "realloc");
	/* A name that is not there, and a library that is not there: the loader
	 * allocates while it looks (its search paths, its error message). */
	(void)dlsym(RTLD_NEXT, "liballoc_early_no_such_function");
	(void)dlerror();
	(void)dlopen("liballoc_early_no_such_library.so", RTLD_LAZY);
	(void)dlerror();
	in_lookup = 0;
	atomic_fetch_add(&lookups, 1);
}

void *malloc(size_t n)
{
	if (in_lookup)
		return arena_alloc(n);
	if (!next_malloc || atomic_exchange(&relookup, 0))
		lookup();
	atomic_fetch_add_explicit(&wrap_calls, 1, memory_order_relaxed);
	return next_malloc(n);
}

void free(void *p)
{
	if (!p || in_arena(p))
		return;
	if (!next_free)
		lookup();
	next_free(p);
}

void *calloc(size_t n, size_t size)
{
	if (in_lookup) {
		void *p = arena_alloc(n * size);
		if (p)
			memset(p, 0, n * size);
		return p;
	}
	if (!next_calloc)
		lookup();
	atomic_fetch_add_explicit(&wrap_calls, 1, memory_order_relaxed);
	return next_calloc(n, size);
}

void *realloc(void *old, size_t n)
{
	if (in_arena(old) || in_lookup) {
		void *p = in_lookup ? arena_alloc(n) : malloc(n);
		if (p && old) {
			size_t had;
			memcpy(&had, (char *)old - 16, sizeof(had));
			memcpy(p, old, had < n ? had : n);
		}
		return p;
	}
	if (!next_realloc || atomic_exchange(&relookup, 0))
		lookup();
	atomic_fetch_add_explicit(&wrap_calls, 1, memory_order_relaxed);
	return next_realloc(old, n);
}

/* --- the early thread --- */

static pthread_t thread;
static _Atomic int stop;
static _Atomic uint64_t loop_bytes;
static int agent_ran_first = -1;
static void *kept[256];
static volatile char sink;

__attribute__((noinline)) static void early_loop(void)
{
	uint64_t x = 0x9E3779B97F4A7C15ULL, bytes = 0;
	unsigned n = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		size_t size = 16 + (size_t)((x * 0x2545F4914F6CDD1DULL) >> 52); /* 16 .. 4111 */
		char *p = malloc(size);
		p[0] = 1;
		sink = p[size - 1];
		free(p);
		bytes += size;
		if ((++n & 1023) == 0)
			atomic_store_explicit(&loop_bytes, bytes, memory_order_relaxed);
	}
	atomic_store_explicit(&loop_bytes, bytes, memory_order_relaxed);
}

static void *run(void *arg)
{
	(void)arg;
	struct timespec ts = {0, 200 * 1000 * 1000};
	nanosleep(&ts, NULL);
	for (int i = 0; i < 256; i++)
		free(kept[i]);
	early_loop();
	return NULL;
}

__attribute__((constructor)) static void early_init(void)
{
	int (*status)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ddprof_status");
	agent_ran_first = status ? status() == 0 : -1;
	for (int i = 0; i < 256; i++)
		kept[i] = malloc(4096);
	pthread_create(&thread, NULL, run, NULL);
}

/* The loop's bytes so far (rounded down to its last 1024 blocks). */
uint64_t early_bytes(void)
{
	return atomic_load_explicit(&loop_bytes, memory_order_relaxed);
}

/* Stops the thread; its bytes in all. */
uint64_t early_stop(void)
{
	atomic_store(&stop, 1);
	pthread_join(thread, NULL);
	return early_bytes();
}

/* 1 when libddprof was running at the constructor, 0 when not, -1 without it. */
int early_agent_ran_first(void)
{
	return agent_ran_first;
}

void early_relookup(void)
{
	atomic_store(&relookup, 1);
}

/* Wrapped calls, lookups made, and allocations served during them. */
void early_counts(uint64_t *calls, uint64_t *nlookups, uint64_t *during_lookups)
{
	*calls = atomic_load(&wrap_calls);
	*nlookups = atomic_load(&lookups);
	*during_lookups = atomic_load(&lookup_allocs);
}
