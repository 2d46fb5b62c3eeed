/*
 * test_got_patch.c - unit tests of agent/alloc/got_patch.c: GOT slots of the loaded
 * modules pointed at counting hooks, and put back.
 *
 * The hooks count each call by the module its return address is in (the libraries
 * under test, libstdc++), then call the original got_patch_apply stored. Libraries
 * (test/workloads): liballoc_lazy.so (lazy binding, partial RELRO), liballoc_now.so
 * (full RELRO), liballoc_late.so (full RELRO, malloc through a JUMP_SLOT, loaded after
 * a first patch), libcxx_caller.so (operator new and delete), liballoc_slowreloc.so
 * (long to relocate: loaded in a loop during walks), libctor_apply.so (patches from
 * its constructor); alloc_nopie (a non-PIE program, run as a child). This program is the module
 * holding got_patch's code, which is never patched: its own calls are never counted. Every test
 * restores the slots (the fixture's teardown too) and unloads what it loaded, forked by Check or
 * not. The module reader on synthetic images: test_got_image.c.
 */
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

static void note(enum fn f, const void *ret)
{
	uintptr_t pc = (uintptr_t)ret;
	int n = atomic_load_explicit(&nranges, memory_order_acquire);
	for (int i = 0; i < n; i++)
		if (pc >= ranges[i].start && pc < ranges[i].end)
			atomic_fetch_add_explicit(&counts[i][f], 1, memory_order_relaxed);
}

#define RET __builtin_return_address(0)

static void *hook_malloc(size_t n)
{
	note(F_MALLOC, RET);
	return ((void *(*)(size_t))orig[F_MALLOC])(n);
}

static void *hook_calloc(size_t n, size_t s)
{
	note(F_CALLOC, RET);
	return ((void *(*)(size_t, size_t))orig[F_CALLOC])(n, s);
}

static void *hook_realloc(void *p, size_t n)
{
	note(F_REALLOC, RET);
	return ((void *(*)(void *, size_t))orig[F_REALLOC])(p, n);
}

static void *hook_reallocarray(void *p, size_t n, size_t s)
{
	note(F_REALLOCARRAY, RET);
	return ((void *(*)(void *, size_t, size_t))orig[F_REALLOCARRAY])(p, n, s);
}

static void hook_free(void *p)
{
	note(F_FREE, RET);
	((void (*)(void *))orig[F_FREE])(p);
}

static int hook_posix_memalign(void **p, size_t a, size_t n)
{
	note(F_POSIX_MEMALIGN, RET);
	return ((int (*)(void **, size_t, size_t))orig[F_POSIX_MEMALIGN])(p, a, n);
}

static void *hook_aligned_alloc(size_t a, size_t n)
{
	note(F_ALIGNED_ALLOC, RET);
	return ((void *(*)(size_t, size_t))orig[F_ALIGNED_ALLOC])(a, n);
}

static void *hook_memalign(size_t a, size_t n)
{
	note(F_MEMALIGN, RET);
	return ((void *(*)(size_t, size_t))orig[F_MEMALIGN])(a, n);
}

static void *hook_valloc(size_t n)
{
	note(F_VALLOC, RET);
	return ((void *(*)(size_t))orig[F_VALLOC])(n);
}

static void *hook_pvalloc(size_t n)
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

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
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
static struct dl_phdr_info module_of(const void *pc)
{
	struct find_ctx c = {.pc = (uintptr_t)pc};
	dl_iterate_phdr(find_cb, &c);
	ck_assert_msg(c.found, "no module holds %p", pc);
	return c.info;
}

/* Counts calls whose return address is in the executable segment holding pc; returns
 * the counter row. */
static int track(const void *pc)
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

static uint64_t count_of(int row, enum fn f)
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
static uint64_t reallocs_per_reallocarray(void)
{
	int row = track((void *)&reallocs_per_reallocarray);
	void *(*volatile ra)(void *, size_t, size_t) = reallocarray;
	free(ra(NULL, 1, 1));
	return count_of(row, F_REALLOC);
}

/* Every function's count of one row against what one run of `rounds` rounds of
 * alloc_caller_run makes (ten functions once each, free eight times), times `times`;
 * for realloc, times + `extra` (reallocs_per_reallocarray: reached from libc). */
static void expect_run_counts(int row, uint64_t rounds, uint64_t times, uint64_t extra,
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

static struct lib load(const char *name)
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
static size_t slots_of(const void *pc, struct got_image_slot *out, size_t max, struct got_image *d)
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
static void perms_of(uintptr_t addr, char out[5])
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

static uintptr_t slot_value(uintptr_t addr)
{
	return *(volatile uintptr_t *)addr;
}

static struct got_patch_stats stats_now(void)
{
	struct got_patch_stats s;
	got_patch_get_stats(&s);
	return s;
}

static void setup(void)
{
	atomic_store_explicit(&nranges, 0, memory_order_relaxed);
}

static void teardown(void)
{
	got_patch_restore();
}

/* ---------------------------------------------------------------- real libraries */

START_TEST(calls_from_lazy_and_full_relro_libraries_are_counted_exactly)
{
	struct lib lazy = load("liballoc_lazy.so"), now = load("liballoc_now.so");
	int rl = track((void *)lazy.run), rn = track((void *)now.run);
	/* Before: the lazy library's PLT slots hold their stubs, in the library itself. */
	struct got_image_slot sl[64];
	struct got_image d;
	size_t stubs = 0, n = slots_of((void *)lazy.run, sl, 64, &d);
	for (size_t i = 0; i < n; i++)
		stubs += sl[i].jump_slot &&
			 module_of((void *)slot_value(sl[i].addr)).dlpi_addr == d.base;
	ck_assert_uint_eq(stubs, F_N - 1); /* all but malloc (its GLOB_DAT slot) */
	struct got_patch_stats before = stats_now();
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	for (int f = 0; f < F_N; f++)
		ck_assert_msg(orig[f] && orig[f] == dlsym(RTLD_DEFAULT, fn_names[f]),
			      "%s: original %p", fn_names[f], orig[f]);
	struct got_patch_stats after = stats_now();
	ck_assert_uint_ge(after.skipped_self - before.skipped_self, 1);
	ck_assert_uint_eq(after.skipped_vdso - before.skipped_vdso, 1);
	ck_assert_uint_eq(after.skipped_loader - before.skipped_loader, 1);
	ck_assert_uint_eq(after.failed_dynamic - before.failed_dynamic, 0);
	ck_assert_uint_eq(after.failed_reloc - before.failed_reloc, 0);

	/* The full-RELRO library's slots: hooks, on pages read-only again. */
	n = slots_of((void *)now.run, sl, 64, &d);
	ck_assert_uint_eq(n, F_N); /* malloc: one slot, shared by its PLT calls and pointer */
	for (size_t i = 0; i < n; i++) {
		char perms[5];
		perms_of(sl[i].addr, perms);
		ck_assert_msg(strcmp(perms, "r--p") == 0, "%s's slot on a %s page",
			      fn_names[sl[i].entry], perms);
		ck_assert_msg(slot_value(sl[i].addr) == (uintptr_t)table[sl[i].entry].replacement,
			      "%s's slot not patched", fn_names[sl[i].entry]);
	}

	uint64_t k = reallocs_per_reallocarray();
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	ck_assert_int_eq(now.run(ROUNDS), 0);
	expect_run_counts(rl, ROUNDS, 1, k, "lazy library");
	expect_run_counts(rn, ROUNDS, 1, k, "full-RELRO library");
	ck_assert_int_eq(lazy.via_pointer(ROUNDS), 0);
	ck_assert_uint_eq(count_of(rl, F_MALLOC), 2 * ROUNDS);
	/* This program is never patched: its own calls are not counted. */
	int rs = track((void *)&setup);
	void *(*volatile m)(size_t) = malloc;
	free(m(16));
	ck_assert_uint_eq(count_of(rs, F_MALLOC), 0);

	int restored = got_patch_restore();
	ck_assert_int_ge(restored, 2 * F_N);
	for (size_t i = 0; i < n; i++) {
		char perms[5];
		perms_of(sl[i].addr, perms);
		ck_assert_str_eq(perms, "r--p");
		ck_assert_msg(slot_value(sl[i].addr) == (uintptr_t)orig[sl[i].entry],
			      "%s's slot not restored", fn_names[sl[i].entry]);
	}
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	ck_assert_int_eq(now.run(ROUNDS), 0);
	ck_assert_int_eq(lazy.via_pointer(ROUNDS), 0);
	expect_run_counts(rn, ROUNDS, 1, k, "full-RELRO library after restore");
	ck_assert_uint_eq(count_of(rl, F_MALLOC), 2 * ROUNDS);
	ck_assert_uint_eq(count_of(rl, F_FREE), 8 * ROUNDS + ROUNDS);
	dlclose(lazy.handle);
	dlclose(now.handle);
}
END_TEST

START_TEST(library_loaded_later_is_patched_by_the_next_apply_only)
{
	struct lib lazy = load("liballoc_lazy.so");
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	uint64_t k = reallocs_per_reallocarray();
	struct lib late = load("liballoc_late.so");
	ck_assert_ptr_null(late.via_pointer); /* built PLT-only */
	int r = track((void *)late.run);
	ck_assert_int_eq(late.run(ROUNDS), 0);
	/* Not patched: only libc's own realloc calls, from its reallocarray. */
	expect_run_counts(r, ROUNDS, 0, k, "late library before apply");

	struct got_image_slot sl[64];
	struct got_image d;
	size_t n = slots_of((void *)late.run, sl, 64, &d);
	ck_assert_uint_eq(n, F_N);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(sl[i].jump_slot, true);
	struct got_patch_stats s0 = stats_now();
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s1 = stats_now();
	ck_assert_uint_eq(s1.walks - s0.walks, 1);
	ck_assert_uint_eq(s1.slots_patched - s0.slots_patched, n);
	ck_assert_uint_eq(s1.modules_patched - s0.modules_patched, 1);
	ck_assert_uint_ge(s1.modules_unchanged - s0.modules_unchanged, 3); /* libc, lazy, check */
	ck_assert_int_eq(late.run(ROUNDS), 0);
	expect_run_counts(r, ROUNDS, 1, 2 * k, "late library after apply"); /* both runs' libc */

	/* Nothing loaded since: returns at once, patches nothing. */
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s2 = stats_now();
	ck_assert_uint_eq(s2.quick - s1.quick, 1);
	ck_assert_uint_eq(s2.walks - s1.walks, 0);
	ck_assert_uint_eq(s2.slots_patched - s1.slots_patched, 0);
	ck_assert_int_ge(got_patch_restore(), 2 * F_N);
	dlclose(late.handle);
	dlclose(lazy.handle);
}
END_TEST

/* An unload makes the next walk check every module: the unloaded one's records are
 * dropped (restoring them would write into unmapped memory), the library loaded again
 * is patched again, and the modules that stayed are found intact. */
START_TEST(unloaded_library_is_forgotten_and_its_reload_patched)
{
	struct lib lazy = load("liballoc_lazy.so");
	struct got_patch_stats sb = stats_now();
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s0 = stats_now();
	uint64_t first_walk = s0.slots_patched - sb.slots_patched;
	struct lib late = load("liballoc_late.so");
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s1 = stats_now();
	ck_assert_uint_eq(s1.slots_patched - s0.slots_patched, F_N);
	ck_assert_int_eq(dlclose(late.handle), 0);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s2 = stats_now();
	ck_assert_uint_eq(s2.walks - s1.walks, 1);
	ck_assert_uint_eq(s2.slots_patched - s1.slots_patched, 0);
	ck_assert_uint_eq(s2.slots_already - s1.slots_already, 0); /* intact: not re-read */

	late = load("liballoc_late.so");
	int r = track((void *)late.run);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	struct got_patch_stats s3 = stats_now();
	ck_assert_uint_eq(s3.slots_patched - s2.slots_patched, F_N);
	uint64_t k = reallocs_per_reallocarray();
	ck_assert_int_eq(late.run(ROUNDS), 0);
	expect_run_counts(r, ROUNDS, 1, k, "reloaded library");
	ck_assert_int_eq(dlclose(late.handle), 0);
	/* The reload's records are dropped by this walk; restore touches only the rest. */
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	int restored = got_patch_restore();
	ck_assert_msg((uint64_t)restored == first_walk,
		      "restored %d slots, the first walk patched %llu", restored,
		      (unsigned long long)first_walk);
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	dlclose(lazy.handle);
}
END_TEST

START_TEST(cxx_new_and_delete_are_seen_through_libstdcxx)
{
	void *h = dlopen(lib_path("libcxx_caller.so"), RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h, "dlopen: %s", dlerror());
	int (*run)(int) = (int (*)(int))dlsym(h, "cxx_caller_run");
	ck_assert_ptr_nonnull(run);
	void *znwm = dlsym(h, "_Znwm"); /* libstdc++'s, a dependency of the library */
	ck_assert_ptr_nonnull(znwm);
	/* Whose operator new the library's calls reach: its _Znwm slot, bound (RTLD_NOW). */
	static const char *const znwm_name[] = {"_Znwm"};
	struct got_image d;
	struct got_image_slot sl[4];
	struct dl_phdr_info info = module_of((void *)run);
	ck_assert_int_eq(got_image_parse(info.dlpi_addr, info.dlpi_phdr, info.dlpi_phnum, &d), 0);
	size_t bad;
	ck_assert_uint_eq(got_image_find_slots(&d, znwm_name, 1, sl, 4, &bad), 1);
	void *bound = (void *)slot_value(sl[0].addr);
	bool libstdcxx = module_of(bound).dlpi_addr == module_of(znwm).dlpi_addr;
	Dl_info di = {0};
	dladdr(bound, &di);
	/* libstdc++'s code, and the library's: operator delete tail-calls free, which
	 * then returns to the library (that has no slot for free: the calls reach the hook
	 * through libstdc++'s). */
	int r = track(znwm), rc = track((void *)run);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	ck_assert_int_eq(run(ROUNDS), 0);
	if (libstdcxx) {
		/* new, new[] and nothrow new call malloc; aligned new aligned_alloc; the four
		 * deletes (sized, array, aligned) free. */
		for (int f = 0; f < F_N; f++) {
			uint64_t want = f == F_MALLOC	       ? 3 * ROUNDS
					: f == F_ALIGNED_ALLOC ? ROUNDS
					: f == F_FREE	       ? 4 * ROUNDS
							       : 0;
			uint64_t got = count_of(r, f) + count_of(rc, f);
			ck_assert_msg(got == want, "%s: %llu calls, expected %llu", fn_names[f],
				      (unsigned long long)got, (unsigned long long)want);
		}
	} else {
		/* Another module defines operator new (ASan's runtime): it serves it without
		 * a call through a patched slot, and libstdc++'s new is never called. */
		fprintf(stderr, "operator new is %s's, not libstdc++'s\n", di.dli_fname);
	}
	ck_assert_int_gt(got_patch_restore(), 0);
	uint64_t after = count_of(r, F_MALLOC);
	ck_assert_int_eq(run(ROUNDS), 0);
	ck_assert_uint_eq(count_of(r, F_MALLOC), after);
	dlclose(h);
}
END_TEST

/* A non-PIE program with a canonical PLT entry for malloc (alloc_nopie.c, patched
 * through got_patch.c in a library of its own): the hooks call malloc, not the entry,
 * and its calls through the PLT, the taken address and libc's strdup are all counted.
 * On glibc 2.36 dlsym answers with the entry: the correction is exercised. */
START_TEST(canonical_plt_entry_of_a_non_pie_program_is_not_the_original)
{
	char cmd[4200], out[1024] = "";
	snprintf(cmd, sizeof(cmd), "%s 2>&1", lib_path("alloc_nopie"));
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = 0;
	int status = pclose(p);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "alloc_nopie failed: %s", out);
	ck_assert_msg(strstr(out, "originals_past_plt 1,"),
		      "dlsym did not answer with the canonical entry: %s", out);
}
END_TEST

START_TEST(bad_tables_are_refused_and_max_tables_at_a_time)
{
	ck_assert_int_eq(got_patch_apply(NULL, 1), -EINVAL);
	ck_assert_int_eq(got_patch_apply(table, 0), -EINVAL);
	ck_assert_int_eq(got_patch_apply(table, GOT_PATCH_MAX_SYMBOLS + 1), -EINVAL);
	void *none = NULL;
	struct got_patch_entry nameless[] = {{"", (void *)hook_malloc, &none}};
	ck_assert_int_eq(got_patch_apply(nameless, 1), -EINVAL);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	/* The same table with another size, and one table more than GOT_PATCH_MAX_TABLES. */
	ck_assert_int_eq(got_patch_apply(table, F_N - 1), -EBUSY);
	_Static_assert(GOT_PATCH_MAX_TABLES == 3, "the tables below: one per hook set");
	void *none2 = NULL, *none3 = NULL, *none4 = NULL;
	struct got_patch_entry second[] = {
	    {"ddprof_test_no_such_function_2", (void *)hook_malloc, &none2}};
	struct got_patch_entry third[] = {
	    {"ddprof_test_no_such_function_3", (void *)hook_malloc, &none3}};
	struct got_patch_entry fourth[] = {
	    {"ddprof_test_no_such_function_4", (void *)hook_malloc, &none4}};
	ck_assert_int_eq(got_patch_apply(second, 1), 0);
	ck_assert_int_eq(got_patch_apply(third, 1), 0);
	ck_assert_int_eq(got_patch_apply(fourth, 1), -EBUSY);
	ck_assert_int_gt(got_patch_restore(), 0);
	struct got_patch_entry missing[] = {
	    {"ddprof_test_no_such_function", (void *)hook_malloc, &none}};
	/* A name nobody defines: counted, nothing patched. */
	struct got_patch_stats s0 = stats_now();
	ck_assert_int_eq(got_patch_apply(missing, 1), 0);
	struct got_patch_stats s1 = stats_now();
	ck_assert_ptr_null(none);
	ck_assert_uint_eq(s1.failed_symbol - s0.failed_symbol, 1);
	ck_assert_uint_eq(s1.slots_patched - s0.slots_patched, 0);
	ck_assert_int_eq(got_patch_restore(), 0);
}
END_TEST

/* ---------------------------------------------------------------- concurrency, fork */

static _Atomic bool stop;
static _Atomic long rounds_done; /* caller rounds finished */

static void *caller(void *arg)
{
	struct lib *l = arg;
	long bad = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		bad += l->run(10) != 0;
		atomic_fetch_add_explicit(&rounds_done, 1, memory_order_relaxed);
	}
	return (void *)bad;
}

/* Until at least `more` caller rounds have finished past `from`, or 10 s. */
static void wait_rounds(long from, long more)
{
	for (int ms = 0; ms < 10000 && atomic_load(&rounds_done) < from + more; ms++)
		usleep(1000);
}

/* Threads call through the slots while they are patched and put back (200 times, and
 * for at least 200 of their rounds): every call reaches a working allocator (one
 * 8-byte store per slot), and once the slots stay patched every call is counted. */
START_TEST(calls_stay_correct_while_slots_are_rewritten)
{
	struct lib lazy = load("liballoc_lazy.so"), now = load("liballoc_now.so");
	int r = track((void *)lazy.run);
	atomic_store(&stop, false);
	atomic_store(&rounds_done, 0);
	pthread_t t[2];
	ck_assert_int_eq(pthread_create(&t[0], NULL, caller, &lazy), 0);
	ck_assert_int_eq(pthread_create(&t[1], NULL, caller, &now), 0);
	wait_rounds(0, 10);
	long start = atomic_load(&rounds_done);
	for (int i = 0; i < 200 || (atomic_load(&rounds_done) < start + 200 && i < 100000); i++) {
		ck_assert_int_eq(got_patch_apply(table, F_N), 0);
		ck_assert_int_gt(got_patch_restore(), 0);
	}
	long during = atomic_load(&rounds_done) - start;
	atomic_store(&stop, true);
	for (int i = 0; i < 2; i++) {
		void *bad;
		pthread_join(t[i], &bad);
		ck_assert_ptr_null(bad);
	}
	ck_assert_msg(during > 0, "the callers made no call while the slots changed");
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	uint64_t before = count_of(r, F_MALLOC);
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	ck_assert_uint_eq(count_of(r, F_MALLOC) - before, ROUNDS);
	dlclose(lazy.handle);
	dlclose(now.handle);
}
END_TEST

static _Atomic int loads;

static void *loader_thread(void *arg)
{
	long bad = 0;
	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		void *h = dlopen(lib_path("liballoc_slowreloc.so"), RTLD_NOW | RTLD_LOCAL);
		if (!h)
			return (void *)-1L;
		int (*run)(int) = (int (*)(int))dlsym(h, "alloc_caller_run");
		bad += run(1) != 0;
		dlclose(h);
		atomic_fetch_add(&loads, 1);
	}
	return (void *)bad;
}

/* liballoc_slowreloc.so (full RELRO, thousands of slots the loader writes after
 * malloc's, on its page) loaded and unloaded in a loop while the main thread walks: a
 * walk that patched it while the loader is still relocating it would make that page
 * read-only under the loader (a crash: without the barrier of got_patch.c and the
 * lookups before it, this test dies in the loader), or write into a module being
 * unmapped. */
START_TEST(walks_during_dlopen_and_dlclose_are_safe)
{
	struct lib lazy = load("liballoc_lazy.so");
	atomic_store(&stop, false);
	atomic_store(&loads, 0);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, loader_thread, NULL), 0);
	int ok = 0, again = 0;
	for (int i = 0; i < 300 || atomic_load(&loads) < 200; i++) {
		int rc = got_patch_apply(table, F_N);
		ck_assert_msg(rc == 0 || rc == -EAGAIN, "apply: %d", rc);
		ok += rc == 0;
		again += rc == -EAGAIN;
		if (i % 50 == 49)
			got_patch_restore();
	}
	atomic_store(&stop, true);
	void *bad;
	pthread_join(t, &bad);
	ck_assert_ptr_null(bad);
	ck_assert_msg(ok > 0, "no walk completed (%d gave up: loads kept coming)", again);
	got_patch_restore();
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	dlclose(lazy.handle);
}
END_TEST

/*
 * A patch from a library constructor (the loader's dlopen lock held) while another
 * thread holds common/dl_guard's lock and waits in dlopen for the loader's, as the
 * uploader does loading libdw: the barrier must take neither that guard nor anything
 * the other thread holds. Each side waits for the other to be in place; a deadlock
 * shows as threads not done within CTOR_DEADLINE_S.
 */
#define CTOR_DEADLINE_S 20
static _Atomic int ctor_stage; /* 1: in the constructor; 2: the guard is held */
static _Atomic int ctor_rc = 1;

static void wait_stage(int stage)
{
	while (atomic_load(&ctor_stage) < stage)
		usleep(1000);
}

static void in_constructor(void)
{
	atomic_store(&ctor_stage, 1);
	wait_stage(2);
	usleep(20000); /* the other thread is blocked in dlopen by now */
	atomic_store(&ctor_rc, got_patch_apply(table, F_N));
}

static void *guard_holder(void *arg)
{
	(void)arg;
	wait_stage(1);
	dl_guard_lock();
	atomic_store(&ctor_stage, 2);
	void *h = dlopen(lib_path("liballoc_now.so"), RTLD_NOW | RTLD_LOCAL);
	dl_guard_unlock();
	if (h)
		dlclose(h);
	return h;
}

static void *ctor_loader(void *arg)
{
	(void)arg;
	return dlopen(lib_path("libctor_apply.so"), RTLD_NOW | RTLD_LOCAL);
}

START_TEST(apply_from_a_constructor_does_not_deadlock_with_the_guard)
{
	char hex[32];
	snprintf(hex, sizeof(hex), "%lx", (unsigned long)(uintptr_t)&in_constructor);
	setenv("GOT_PATCH_TEST_CTOR", hex, 1);
	atomic_store(&ctor_stage, 0);
	pthread_t holder, loader;
	ck_assert_int_eq(pthread_create(&holder, NULL, guard_holder, NULL), 0);
	ck_assert_int_eq(pthread_create(&loader, NULL, ctor_loader, NULL), 0);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += CTOR_DEADLINE_S;
	void *lib = NULL, *other = NULL;
	ck_assert_msg(pthread_timedjoin_np(loader, &lib, &until) == 0,
		      "deadlock: the constructor's dlopen not done after %d s", CTOR_DEADLINE_S);
	ck_assert_msg(pthread_timedjoin_np(holder, &other, &until) == 0,
		      "deadlock: the guard holder's dlopen not done after %d s", CTOR_DEADLINE_S);
	unsetenv("GOT_PATCH_TEST_CTOR");
	ck_assert_ptr_nonnull(lib);
	ck_assert_ptr_nonnull(other);
	ck_assert_int_eq(atomic_load(&ctor_rc), 0);
	ck_assert_int_gt(got_patch_restore(), 0);
	dlclose(lib);
}
END_TEST

START_TEST(fork_child_walks_after_the_handlers)
{
	struct lib lazy = load("liballoc_lazy.so");
	int r = track((void *)lazy.run);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	got_patch_atfork_prepare();
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		got_patch_atfork_child();
		/* Inherited slots still hooked; the lock is usable. */
		int ok = lazy.run(10) == 0 && count_of(r, F_MALLOC) == 10 &&
			 got_patch_apply(table, F_N) == 0 && got_patch_restore() > 0 &&
			 lazy.run(10) == 0 && count_of(r, F_MALLOC) == 10;
		_exit(ok ? 0 : 1);
	}
	got_patch_atfork_parent();
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
	ck_assert_int_gt(got_patch_restore(), 0);
	dlclose(lazy.handle);
}
END_TEST

static Suite *got_patch_suite(void)
{
	Suite *s = suite_create("got_patch");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, calls_from_lazy_and_full_relro_libraries_are_counted_exactly);
	tcase_add_test(tc, library_loaded_later_is_patched_by_the_next_apply_only);
	tcase_add_test(tc, unloaded_library_is_forgotten_and_its_reload_patched);
	tcase_add_test(tc, cxx_new_and_delete_are_seen_through_libstdcxx);
	tcase_add_test(tc, canonical_plt_entry_of_a_non_pie_program_is_not_the_original);
	tcase_add_test(tc, bad_tables_are_refused_and_max_tables_at_a_time);
	tcase_add_test(tc, calls_stay_correct_while_slots_are_rewritten);
	tcase_add_test(tc, walks_during_dlopen_and_dlclose_are_safe);
	tcase_add_test(tc, apply_from_a_constructor_does_not_deadlock_with_the_guard);
	tcase_add_test(tc, fork_child_walks_after_the_handlers);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(got_patch_suite());
}
