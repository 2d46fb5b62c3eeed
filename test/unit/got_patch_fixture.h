/*
 * got_patch_fixture.h - what the got_patch suites share (test_got_patch.c,
 * test_got_patch_threads.c): counting hooks that count each call by the module its
 * return address is in and call the original got_patch_apply stored, their table, and
 * helpers to load the test libraries and read GOT slots. Included by one test program
 * each: the state below is that program's.
 */
#ifndef DDPROF_TEST_UNIT_GOT_PATCH_FIXTURE_H
#define DDPROF_TEST_UNIT_GOT_PATCH_FIXTURE_H

#include "agent/alloc/got_patch.h"
#include "agent/alloc/got_image.h"
#include "common/dl_guard.h"

#include <check.h>

#include "test/unit/check_run.h"
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 1000

/* ---------------------------------------------------------------- counting hooks */

enum fn {
	F_MALLOC,
	F_CALLOC,
	F_REALLOC,
	F_REALLOCARRAY,
	F_FREE,
	F_POSIX_MEMALIGN,
	F_ALIGNED_ALLOC,
	F_MEMALIGN,
	F_VALLOC,
	F_PVALLOC,
	F_N
};

#define MAX_RANGES 4
struct range {
	uintptr_t start, end;
};
static struct range ranges[MAX_RANGES];
static _Atomic int nranges;
static _Atomic uint64_t counts[MAX_RANGES][F_N];
static void *orig[F_N];

static inline void note(enum fn f, const void *ret)
{
	uintptr_t pc = (uintptr_t)ret;
	int n = atomic_load_explicit(&nranges, memory_order_acquire);
	for (int i = 0; i < n; i++)
		if (pc >= ranges[i].start && pc < ranges[i].end)
			atomic_fetch_add_explicit(&counts[i][f], 1, memory_order_relaxed);
}

#define RET __builtin_return_address(0)

static inline void *hook_malloc(size_t n)
{
	note(F_MALLOC, RET);
	return ((void *(*)(size_t))orig[F_MALLOC])(n);
}

static inline void *hook_calloc(size_t n, size_t s)
{
	note(F_CALLOC, RET);
	return ((void *(*)(size_t, size_t))orig[F_CALLOC])(n, s);
}

static inline void *hook_realloc(void *p, size_t n)
{
	note(F_REALLOC, RET);
	return ((void *(*)(void *, size_t))orig[F_REALLOC])(p, n);
}

static inline void *hook_reallocarray(void *p, size_t n, size_t s)
{
	note(F_REALLOCARRAY, RET);
	return ((void *(*)(void *, size_t, size_t))orig[F_REALLOCARRAY])(p, n, s);
}

static inline void hook_free(void *p)
{
	note(F_FREE, RET);
	((void (*)(void *))orig[F_FREE])(p);
}

static inline int hook_posix_memalign(void **p, size_t a, size_t n)
{
	note(F_POSIX_MEMALIGN, RET);
	return ((int (*)(void **, size_t, size_t))orig[F_POSIX_MEMALIGN])(p, a, n);
}

static inline void *hook_aligned_alloc(size_t a, size_t n)
{
	note(F_ALIGNED_ALLOC, RET);
	return ((void *(*)(size_t, size_t))orig[F_ALIGNED_ALLOC])(a, n);
}

static inline void *hook_memalign(size_t a, size_t n)
{
	note(F_MEMALIGN, RET);
	return ((void *(*)(size_t, size_t))orig[F_MEMALIGN])(a, n);
}

static inline void *hook_valloc(size_t n)
{
	note(F_VALLOC, RET);
	return ((void *(*)(size_t))orig[F_VALLOC])(n);
}

static inline void *hook_pvalloc(size_t n)
{
	note(F_PVALLOC, RET);
	return ((void *(*)(size_t))orig[F_PVALLOC])(n);
}

static const char *const fn_names[F_N] = {
    "malloc",	      "calloc",	       "realloc",  "reallocarray", "free",
    "posix_memalign", "aligned_alloc", "memalign", "valloc",	   "pvalloc"};

static struct got_patch_entry table[F_N] = {
    {"malloc", (void *)hook_malloc, &orig[F_MALLOC]},
    {"calloc", (void *)hook_calloc, &orig[F_CALLOC]},
    {"realloc", (void *)hook_realloc, &orig[F_REALLOC]},
    {"reallocarray", (void *)hook_reallocarray, &orig[F_REALLOCARRAY]},
    {"free", (void *)hook_free, &orig[F_FREE]},
    {"posix_memalign", (void *)hook_posix_memalign, &orig[F_POSIX_MEMALIGN]},
    {"aligned_alloc", (void *)hook_aligned_alloc, &orig[F_ALIGNED_ALLOC]},
    {"memalign", (void *)hook_memalign, &orig[F_MEMALIGN]},
    {"valloc", (void *)hook_valloc, &orig[F_VALLOC]},
    {"pvalloc", (void *)hook_pvalloc, &orig[F_PVALLOC]},
};

/* ---------------------------------------------------------------- helpers */

struct find_ctx {
	uintptr_t pc;
	struct dl_phdr_info info;
	bool found;
};

static inline int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct find_ctx *c = arg;
	(void)size;
	for (size_t i = 0; i < info->dlpi_phnum; i++) {
		const Elf64_Phdr *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD &&
		    c->pc - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz) {
			c->info = *info;
			c->found = true;
			return 1;
		}
	}
	return 0;
}

/* The module holding pc (its dl_iterate_phdr view). */
static inline struct dl_phdr_info module_of(const void *pc)
{
	struct find_ctx c = {.pc = (uintptr_t)pc};
	dl_iterate_phdr(find_cb, &c);
	ck_assert_msg(c.found, "no module holds %p", pc);
	return c.info;
}

/* Counts calls whose return address is in the executable segment holding pc; returns
 * the counter row. */
static inline int track(const void *pc)
{
	struct dl_phdr_info info = module_of(pc);
	int i = atomic_load_explicit(&nranges, memory_order_relaxed);
	ck_assert_int_lt(i, MAX_RANGES);
	for (size_t k = 0; k < info.dlpi_phnum; k++) {
		const Elf64_Phdr *ph = &info.dlpi_phdr[k];
		uintptr_t s = info.dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) &&
		    (uintptr_t)pc - s < ph->p_memsz)
			ranges[i] = (struct range){s, s + ph->p_memsz};
	}
	for (int f = 0; f < F_N; f++)
		atomic_store_explicit(&counts[i][f], 0, memory_order_relaxed);
	/* Release: the range is written before a hook on another thread can read it
	 * (pairs with the acquire in note). */
	atomic_store_explicit(&nranges, i + 1, memory_order_release);
	return i;
}

static inline uint64_t count_of(int row, enum fn f)
{
	return atomic_load_explicit(&counts[row][f], memory_order_relaxed);
}

/*
 * glibc's reallocarray calls realloc through libc's own GOT, as a tail call: with both
 * patched, each reallocarray also reaches the realloc hook, with the caller's return
 * address. How many realloc calls one reallocarray makes here (1, or 0 where another
 * module serves reallocarray itself: ASan's runtime), measured from this program's
 * code (never patched) while the slots are patched.
 */
static inline uint64_t reallocs_per_reallocarray(void)
{
	int row = track((void *)&reallocs_per_reallocarray);
	void *(*volatile ra)(void *, size_t, size_t) = reallocarray;
	free(ra(NULL, 1, 1));
	return count_of(row, F_REALLOC);
}

/* Every function's count of one row against what one run of `rounds` rounds of
 * alloc_caller_run makes (ten functions once each, free eight times), times `times`;
 * for realloc, times + `extra` (reallocs_per_reallocarray: reached from libc). */
static inline void expect_run_counts(int row, uint64_t rounds, uint64_t times, uint64_t extra,
				     const char *what)
{
	for (int f = 0; f < F_N; f++) {
		uint64_t want = (f == F_FREE ? 8 : 1) * rounds * (times + (f == F_REALLOC) * extra);
		ck_assert_msg(count_of(row, f) == want, "%s: %s counted %llu times, expected %llu",
			      what, fn_names[f], (unsigned long long)count_of(row, f),
			      (unsigned long long)want);
	}
}

static const char *lib_path(const char *name)
{
	static char path[4][4096];
	static int next;
	const char *dir = getenv("DDPROF_BUILD_DIR");
	char *p = path[next++ % 4];
	snprintf(p, sizeof(path[0]), "%s/workloads/%s", dir ? dir : "build", name);
	return p;
}

struct lib {
	void *handle;
	int (*run)(int);
	int (*via_pointer)(int);
};

static inline struct lib load(const char *name)
{
	struct lib l = {0};
	/* Lazy: the lazy library's PLT slots keep their stubs until first called. */
	l.handle = dlopen(lib_path(name), RTLD_LAZY | RTLD_LOCAL);
	ck_assert_msg(l.handle, "dlopen %s: %s", name, dlerror());
	l.run = (int (*)(int))dlsym(l.handle, "alloc_caller_run");
	ck_assert_ptr_nonnull(l.run);
	l.via_pointer = (int (*)(int))dlsym(l.handle, "alloc_caller_via_pointer");
	return l;
}

/* The slots of the module holding pc for the table's names, and its reader's view. */
static inline size_t slots_of(const void *pc, struct got_image_slot *out, size_t max,
			      struct got_image *d)
{
	struct dl_phdr_info info = module_of(pc);
	ck_assert_int_eq(got_image_parse(info.dlpi_addr, info.dlpi_phdr, info.dlpi_phnum, d), 0);
	size_t bad;
	size_t n = got_image_find_slots(d, fn_names, F_N, out, max, &bad);
	ck_assert_uint_eq(bad, 0);
	ck_assert_uint_le(n, max);
	return n;
}

/* The permissions ("r--p") of the mapping holding addr, from /proc/self/maps (test
 * code: it allocates). */
static inline void perms_of(uintptr_t addr, char out[5])
{
	FILE *f = fopen("/proc/self/maps", "r");
	ck_assert_ptr_nonnull(f);
	char line[512];
	out[0] = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[5];
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && addr >= lo && addr < hi) {
			memcpy(out, perms, 5);
			break;
		}
	}
	fclose(f);
	ck_assert_msg(out[0], "no mapping holds %#lx", (unsigned long)addr);
}

static inline uintptr_t slot_value(uintptr_t addr)
{
	return *(volatile uintptr_t *)addr;
}

static inline struct got_patch_stats stats_now(void)
{
	struct got_patch_stats s;
	got_patch_get_stats(&s);
	return s;
}

static inline void setup(void)
{
	atomic_store_explicit(&nranges, 0, memory_order_relaxed);
}

static inline void teardown(void)
{
	got_patch_restore();
}

#endif
