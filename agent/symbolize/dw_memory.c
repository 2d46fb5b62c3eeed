/*
 * dw_memory.c - libdw's and libelf's allocator and qsort slots (see dw_memory.h).
 *
 * Context: install and uninstall on the uploader thread; the replacements on the threads
 * that call libdw, the registry under registry_lock (normal context only).
 */
#include "agent/symbolize/dw_memory.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "agent/alloc/got_image.h"
#include "agent/alloc/got_patch.h"
#include "agent/alloc/got_write.h"
#include "common/big_alloc.h"
#include "common/dl_guard.h"
#include "common/log.h"
#include "common/sort.h"

#define LIBELF_SONAME "libelf.so.1"

/* ---------------------------------------------------------------- the registry */

/* Large blocks live at once: libelf keeps one per decompressed section of each open
 * debug file (a dozen each), libdw a few tables per file. Open addressing with linear
 * probing, at most half full; untouched pages of it cost nothing. */
#define REGISTRY_SIZE 8192
#define REGISTRY_MAX (REGISTRY_SIZE / 2)

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t registry[REGISTRY_SIZE]; /* 0: empty */
static size_t registry_n;
static uint64_t live_bytes;

/* Counters: relaxed, they order nothing. */
static _Atomic uint64_t st_modules, st_shared, st_slots, st_slot_failures, st_mapped, st_live,
    st_peak, st_fallbacks;

static size_t slot_of(uintptr_t p)
{
	/* Blocks are page offsets plus a 16-byte header: mix the page number. */
	uint64_t h = (uint64_t)p * 0x9e3779b97f4a7c15ULL;
	return (size_t)(h >> 51) & (REGISTRY_SIZE - 1);
}

/* Under registry_lock. */
static bool registry_add(uintptr_t p, size_t bytes)
{
	if (registry_n >= REGISTRY_MAX)
		return false;
	size_t i = slot_of(p);
	while (registry[i])
		i = (i + 1) & (REGISTRY_SIZE - 1);
	registry[i] = p;
	registry_n++;
	live_bytes += bytes;
	atomic_store_explicit(&st_live, registry_n, memory_order_relaxed);
	if (live_bytes > atomic_load_explicit(&st_peak, memory_order_relaxed))
		atomic_store_explicit(&st_peak, live_bytes, memory_order_relaxed);
	return true;
}

/* Under registry_lock. Removes p (backward-shift deletion keeps every probe chain
 * unbroken); false when p is not there. */
static bool registry_remove(uintptr_t p, size_t bytes)
{
	size_t i = slot_of(p);
	while (registry[i] != p) {
		if (!registry[i])
			return false;
		i = (i + 1) & (REGISTRY_SIZE - 1);
	}
	registry[i] = 0;
	for (size_t j = (i + 1) & (REGISTRY_SIZE - 1); registry[j];
	     j = (j + 1) & (REGISTRY_SIZE - 1)) {
		size_t home = slot_of(registry[j]);
		/* registry[j] may move to the hole at i when i lies on its probe path, that is
		 * cyclically within [home, j). */
		if (((j - home) & (REGISTRY_SIZE - 1)) >= ((j - i) & (REGISTRY_SIZE - 1))) {
			registry[i] = registry[j];
			registry[j] = 0;
			i = j;
		}
	}
	registry_n--;
	live_bytes -= bytes;
	atomic_store_explicit(&st_live, registry_n, memory_order_relaxed);
	return true;
}

static bool registry_has(uintptr_t p)
{
	size_t i = slot_of(p);
	while (registry[i]) {
		if (registry[i] == p)
			return true;
		i = (i + 1) & (REGISTRY_SIZE - 1);
	}
	return false;
}

bool dw_memory_owns(const void *p)
{
	if (!p)
		return false;
	pthread_mutex_lock(&registry_lock);
	bool has = registry_has((uintptr_t)p);
	pthread_mutex_unlock(&registry_lock);
	return has;
}

/* ---------------------------------------------------------------- the replacements */

/* A large block, remembered; NULL when the registry is full (the caller falls back to
 * malloc) or the mapping failed (errno ENOMEM). */
static void *big_block(size_t size, bool zero, bool *full)
{
	void *p = zero ? big_calloc(1, size) : big_malloc(size);
	*full = false;
	if (!p)
		return NULL;
	pthread_mutex_lock(&registry_lock);
	bool added = registry_add((uintptr_t)p, size);
	pthread_mutex_unlock(&registry_lock);
	if (!added) {
		big_free(p);
		*full = true;
		atomic_fetch_add_explicit(&st_fallbacks, 1, memory_order_relaxed);
		return NULL;
	}
	atomic_fetch_add_explicit(&st_mapped, 1, memory_order_relaxed);
	return p;
}

void *dw_memory_malloc(size_t size)
{
	if (size >= DW_MEMORY_MAP_MIN) {
		bool full;
		void *p = big_block(size, false, &full);
		if (p || !full)
			return p;
	}
	return malloc(size);
}

void *dw_memory_calloc(size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size) {
		errno = ENOMEM;
		return NULL;
	}
	if (n * size >= DW_MEMORY_MAP_MIN) {
		bool full;
		void *p = big_block(n * size, true, &full);
		if (p || !full)
			return p;
	}
	return calloc(n, size);
}

void dw_memory_free(void *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&registry_lock);
	bool ours = registry_has((uintptr_t)p) && registry_remove((uintptr_t)p, big_size(p));
	pthread_mutex_unlock(&registry_lock);
	if (ours)
		big_free(p);
	else
		free(p);
}

void *dw_memory_realloc(void *p, size_t size)
{
	if (!p)
		return dw_memory_malloc(size);
	if (size == 0) {
		dw_memory_free(p);
		return NULL;
	}
	pthread_mutex_lock(&registry_lock);
	bool ours = registry_has((uintptr_t)p);
	pthread_mutex_unlock(&registry_lock);
	if (ours) {
		size_t old = big_size(p);
		void *q = big_realloc(p, size);
		if (!q)
			return NULL; /* p kept, errno set */
		pthread_mutex_lock(&registry_lock);
		registry_remove((uintptr_t)p, old);
		bool added = registry_add((uintptr_t)q, size);
		pthread_mutex_unlock(&registry_lock);
		/* The slot p freed is there for q: it cannot be full. */
		(void)added;
		return q;
	}
	if (size < DW_MEMORY_MAP_MIN)
		return realloc(p, size);
	/* A small block of malloc's grows past the line: moved into a block of ours. */
	void *q = dw_memory_malloc(size);
	if (!q)
		return NULL;
	if (dw_memory_owns(q)) {
		size_t had = malloc_usable_size(p);
		memcpy(q, p, had < size ? had : size);
		free(p);
		return q;
	}
	/* The registry was full and q is malloc's: realloc as before. */
	free(q);
	return realloc(p, size);
}

int dw_memory_posix_memalign(void **out, size_t align, size_t size)
{
	/* big_alloc's blocks are 16-byte aligned (malloc's alignment). */
	if (size >= DW_MEMORY_MAP_MIN && align <= 16 && align >= sizeof(void *) &&
	    (align & (align - 1)) == 0) {
		bool full;
		void *p = big_block(size, false, &full);
		if (p) {
			*out = p;
			return 0;
		}
		if (!full)
			return ENOMEM;
	}
	return posix_memalign(out, align, size);
}

/* ---------------------------------------------------------------- the slots */

static const char *const names[] = {"malloc", "calloc",		"realloc",
				    "free",   "posix_memalign", "qsort"};
#define NNAMES (sizeof(names) / sizeof(names[0]))

static void *replacement(size_t entry)
{
	switch (entry) {
	case 0:
		return (void *)dw_memory_malloc;
	case 1:
		return (void *)dw_memory_calloc;
	case 2:
		return (void *)dw_memory_realloc;
	case 3:
		return (void *)dw_memory_free;
	case 4:
		return (void *)dw_memory_posix_memalign;
	default:
		return (void *)sort_inplace;
	}
}

/* libdw and libelf, when the application had not loaded them before dw_api did. */
enum { MOD_DW, MOD_ELF, MOD_COUNT };
static const char *const sonames[MOD_COUNT] = {"libdw.so.1", LIBELF_SONAME};
static bool preloaded[MOD_COUNT];
static uintptr_t installed[MOD_COUNT]; /* the bases excluded from got_patch's walks */

struct patch_job {
	uintptr_t base;
	unsigned slots, failures;
	bool found;
};

/* Inside dl_iterate_phdr, under got_patch's lock (got_patch_exclude). */
static int patch_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct patch_job *job = arg;
	(void)size;
	if (info->dlpi_addr != job->base)
		return 0;
	job->found = true;
	struct got_image d;
	if (got_image_parse(info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum, &d) != 0)
		return 1;
	struct got_image_slot found[4 * NNAMES];
	size_t bad, n = got_image_find_slots(&d, names, NNAMES, found, 4 * NNAMES, &bad);
	if (n > 4 * NNAMES)
		n = 4 * NNAMES;
	struct got_write w[4 * NNAMES];
	for (size_t i = 0; i < n; i++)
		w[i] = (struct got_write){.addr = found[i].addr,
					  .value = (uintptr_t)replacement(found[i].entry)};
	uint64_t failed = 0;
	job->slots = (unsigned)got_write_slots(&d, w, n, &failed);
	job->failures = (unsigned)(n - job->slots);
	return 1;
}

static void patch_under_lock(void *arg)
{
	dl_iterate_phdr(patch_cb, arg);
}

void dw_memory_before_load(void)
{
	for (int m = 0; m < MOD_COUNT; m++) {
		void *h = dl_guard_dlopen(sonames[m], RTLD_LAZY | RTLD_NOLOAD);
		preloaded[m] = h != NULL;
		if (h)
			dl_guard_dlclose(h);
	}
}

static uintptr_t base_of(void *handle)
{
	struct link_map *lm = NULL;
	if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
		return 0;
	return (uintptr_t)lm->l_addr;
}

int dw_memory_install(void *libdw_handle)
{
	void *elf = dl_guard_dlopen(LIBELF_SONAME, RTLD_LAZY | RTLD_NOLOAD);
	uintptr_t bases[MOD_COUNT] = {base_of(libdw_handle), base_of(elf)};
	if (elf)
		dl_guard_dlclose(elf); /* libdw holds it */
	int done = 0;
	for (int m = 0; m < MOD_COUNT; m++) {
		if (preloaded[m]) {
			atomic_fetch_add_explicit(&st_shared, 1, memory_order_relaxed);
			log_debug("%s was loaded by the application: its allocations are left to "
				  "it",
				  sonames[m]);
			continue;
		}
		if (!bases[m] || installed[m])
			continue;
		struct patch_job job = {.base = bases[m]};
		if (got_patch_exclude(bases[m], patch_under_lock, &job) != 0)
			continue;
		installed[m] = bases[m];
		atomic_fetch_add_explicit(&st_slots, job.slots, memory_order_relaxed);
		atomic_fetch_add_explicit(&st_slot_failures, job.failures, memory_order_relaxed);
		if (job.slots) {
			atomic_fetch_add_explicit(&st_modules, 1, memory_order_relaxed);
			done++;
		}
	}
	return done;
}

void dw_memory_uninstall(void)
{
	for (int m = 0; m < MOD_COUNT; m++) {
		if (installed[m])
			got_patch_include(installed[m]);
		installed[m] = 0;
	}
}

void dw_memory_get_stats(struct dw_memory_stats *out)
{
#define GET(c) atomic_load_explicit(&c, memory_order_relaxed)
	*out = (struct dw_memory_stats){
	    .modules = GET(st_modules),
	    .modules_shared = GET(st_shared),
	    .slots = GET(st_slots),
	    .slot_failures = GET(st_slot_failures),
	    .blocks_mapped = GET(st_mapped),
	    .live_blocks = GET(st_live),
	    .peak_bytes = GET(st_peak),
	    .fallbacks = GET(st_fallbacks),
	};
#undef GET
}

void dw_memory_log(void)
{
	if (log_get_level() < LOG_LEVEL_DEBUG)
		return;
	struct dw_memory_stats s;
	dw_memory_get_stats(&s);
	log_debug("libdw and libelf: %llu blocks mapped (%llu live, %llu KiB at most at once, "
		  "%llu served by malloc), %llu slots set in %llu modules (%llu failed, %llu "
		  "modules the application's)",
		  (unsigned long long)s.blocks_mapped, (unsigned long long)s.live_blocks,
		  (unsigned long long)(s.peak_bytes >> 10), (unsigned long long)s.fallbacks,
		  (unsigned long long)s.slots, (unsigned long long)s.modules,
		  (unsigned long long)s.slot_failures, (unsigned long long)s.modules_shared);
}
