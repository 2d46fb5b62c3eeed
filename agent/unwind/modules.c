/*
 * modules.c - loaded modules, their CFI tables, and the map handlers search
 * (see modules.h): the registry.
 *
 * Owns: the dl_iterate_phdr scan, the module records, building their CFI tables,
 * publishing the module map, retiring unloaded modules (the list the symbolizer
 * takes), the stats, and the fork handlers of that state. When a rescan runs, and on
 * which thread, is the service's: agent/unwind/modules_service.c, which calls
 * modules_rescan (agent/unwind/modules_internal.h).
 *
 * Context: normal context only: the "ddprof-modules" thread or the host's (through
 * modules_service), tests, the thread that names a profile (modules_retire_unloaded)
 * and the fork handlers. The map's handler side (lookups, publication, grace period) is
 * agent/unwind/module_map.c.
 *
 * Locks: mod_lock serializes writers (the thread, tests) over the records and the
 * publication; it is held while tables are built (file I/O), so no fork handler and no
 * application thread ever takes it. retired_lock guards the retired list; it is held
 * only for a few stores. The service's ctl_lock is never held while this file runs.
 */
#include "agent/unwind/modules.h"
#include "common/sort.h"
#include "common/page_size.h"

#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#include "agent/unwind/boot_cfi.h"
#include "agent/unwind/cfi_cache.h"
#include "agent/unwind/module_map.h"
#include "agent/unwind/modules_internal.h"
#include "agent/sample/fork_local.h"
#include "common/big_alloc.h"
#include "common/clock.h"
#include "common/log.h"

#define MAX_SEGS 4 /* executable PT_LOAD segments kept per module (1 in practice) */
#define GRACE_TIMEOUT_NS (200ULL * 1000000ULL)
#define RETIRED_MAX 256 /* unloaded segments kept for the symbolizer */

struct module {
	char *path; /* file read for CFI; vdso: its soname */
	bool is_vdso;
	uintptr_t bias;
	size_t nsegs;
	uintptr_t seg_start[MAX_SEGS], seg_end[MAX_SEGS], seg_off[MAX_SEGS];
	struct cfi_table table;
	bool built; /* tried; has_table says whether it worked */
	bool has_table;
	bool seen; /* found by the current scan */
	/* Built by a dlopen caller (MODULES_BUILD_LATE): the service's next rescan writes
	 * it to the unwind cache, off the application's path. */
	bool store_pending;
	uint64_t build_ns;
};

/* What a fork child re-initializes is FORK_CHILD_DATA (agent/sample/fork_local.h). */
FORK_CHILD_DATA static pthread_mutex_t mod_lock = PTHREAD_MUTEX_INITIALIZER;
FORK_CHILD_DATA static struct module **mods;
FORK_CHILD_DATA static size_t nmods, capmods;
/* Fork child: mods are the parent's until the first refresh rebuilds them from the
 * published map (adopt_published_map); most children never refresh. */
FORK_CHILD_DATA static bool mods_stale;

FORK_CHILD_DATA static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held around dl_iterate_phdr only (microseconds of memory work), and by the fork
 * prepare handler: a fork never happens while our thread holds the loader's lock, which
 * the child would inherit locked. */
static pthread_mutex_t scan_lock_fallback = PTHREAD_MUTEX_INITIALIZER;
/* On the fork-local page when there is one: fork prepare takes it (fork_local.h). */
FORK_CHILD_DATA static pthread_mutex_t *scan_lock = &scan_lock_fallback;
static struct retired_segment retired[RETIRED_MAX];
FORK_CHILD_DATA static size_t nretired;

static _Atomic uint64_t st_modules, st_table_bytes, st_rows, st_rows_unsupported;
FORK_CHILD_DATA static _Atomic uint64_t st_tables; /* a fork child reads it */
/* Modules of the last scan whose table is not built yet (written when it changes). */
static _Atomic uint64_t st_unbuilt;
/* The loader's loads + unloads (loader_gen_of) at the walk of the last rescan that then
 * built every table a dlopen caller waits for (MODULES_BUILD_LATE's, or all): a later
 * walk that finds the same count has nothing to build for a caller. Stored once the
 * builds are done, under mod_lock; relaxed: a hint, checked again under the lock by
 * whoever rescans. */
static _Atomic uint64_t built_gen;
static _Atomic uint64_t st_build_ns, st_build_failures, st_fdes_skipped, st_publications, st_leaked;

/* ---------------------------------------------------------------- scanning */

struct found {
	char path[PATH_MAX];
	bool is_vdso;
	uintptr_t bias;
	size_t nsegs;
	uintptr_t seg_start[MAX_SEGS], seg_end[MAX_SEGS], seg_off[MAX_SEGS];
};

struct scan {
	struct found *f;
	size_t n, cap;
	uintptr_t vdso;
	int err;
	uint64_t loader_gen; /* the loader's loads + unloads when the walk began */
};

/* The loader's count of loads plus unloads (dl_phdr_info's dlpi_adds and dlpi_subs),
 * which every dlopen and dlclose that maps or unmaps a module moves; 0 when this libc
 * does not report them. */
static uint64_t loader_gen_of(const struct dl_phdr_info *info, size_t size)
{
	if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
		return 0;
	return (uint64_t)info->dlpi_adds + (uint64_t)info->dlpi_subs;
}

/* Reads the loader's counters from the first module and stops the walk. */
static int first_gen_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	((struct scan *)arg)->loader_gen = loader_gen_of(info, size);
	return 1;
}

static int scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct scan *s = arg;
	if (s->n == 0)
		s->loader_gen = loader_gen_of(info, size);
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct found *f = big_realloc(s->f, cap * sizeof(*f));
		if (!f) {
			s->err = -ENOMEM;
			return 1;
		}
		s->f = f;
		s->cap = cap;
	}
	struct found *f = &s->f[s->n];
	memset(f, 0, sizeof(*f));
	f->bias = info->dlpi_addr;
	for (int i = 0; i < info->dlpi_phnum && f->nsegs < MAX_SEGS; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || ph->p_memsz == 0)
			continue;
		f->seg_start[f->nsegs] = info->dlpi_addr + ph->p_vaddr;
		f->seg_end[f->nsegs] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		f->seg_off[f->nsegs] = ph->p_offset;
		f->nsegs++;
	}
	if (f->nsegs == 0)
		return 0;
	f->is_vdso = s->vdso && (uintptr_t)info->dlpi_phdr >= s->vdso &&
		     (uintptr_t)info->dlpi_phdr - s->vdso < 4096;
	const char *name = info->dlpi_name;
	if (f->is_vdso) {
		snprintf(f->path, sizeof(f->path), "[vdso]");
	} else if (!name || !name[0]) {
		if (s->n != 0)
			return 0; /* only the first unnamed object is the executable */
		f->path[0] = 0;	  /* named by modules_refresh after the walk */
	} else {
		snprintf(f->path, sizeof(f->path), "%s", name);
	}
	s->n++;
	return 0;
}

/* ---------------------------------------------------------------- publication */

static int entry_cmp(const void *a, const void *b)
{
	const struct module_entry *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

static void module_free(struct module *m)
{
	cfi_table_free(&m->table);
	free(m->path);
	free(m);
}

/* Publishes a map of the current records and frees what it replaces (and the unloaded
 * modules in `dead`: the old map's entries point at their tables) once no handler can
 * hold them. Called with mod_lock held. */
static void publish(struct module **dead, size_t ndead)
{
	size_t n = 0;
	for (size_t i = 0; i < nmods; i++)
		n += mods[i]->nsegs;
	struct module_map *m = malloc(sizeof(*m) + n * sizeof(m->e[0]));
	if (!m) {
		log_warn("modules: out of memory publishing the module map");
		return; /* the old map stays; dead tables are kept (leaked) */
	}
	m->n = 0;
	for (size_t i = 0; i < nmods; i++) {
		struct module *mod = mods[i];
		for (size_t s = 0; s < mod->nsegs; s++)
			m->e[m->n++] = (struct module_entry){
			    .start = mod->seg_start[s],
			    .end = mod->seg_end[s],
			    .bias = mod->bias,
			    .table = mod->has_table ? &mod->table : NULL,
			    .mod = mod,
			};
	}
	sort_inplace(m->e, m->n, sizeof(m->e[0]), entry_cmp);
	struct module_map *old = module_map_publish(m);
	atomic_fetch_add_explicit(&st_publications, 1, memory_order_relaxed);
	if (!module_map_grace_wait(GRACE_TIMEOUT_NS)) {
		atomic_fetch_add_explicit(&st_leaked, 1 + ndead, memory_order_relaxed);
		return;
	}
	if (old)
		free(old);
	for (size_t i = 0; i < ndead; i++)
		module_free(dead[i]);
}

static void retire(const struct module *mod)
{
	pthread_mutex_lock(&retired_lock);
	for (size_t s = 0; s < mod->nsegs; s++) {
		if (nretired == RETIRED_MAX)
			memmove(retired, retired + 1, (RETIRED_MAX - 1) * sizeof(retired[0]));
		else
			nretired++;
		struct retired_segment *r = &retired[nretired - 1];
		snprintf(r->path, sizeof(r->path), "%s", mod->path);
		r->start = mod->seg_start[s];
		r->end = mod->seg_end[s];
		r->file_offset = mod->seg_off[s];
	}
	pthread_mutex_unlock(&retired_lock);
}

size_t modules_take_retired(struct retired_segment *out, size_t max)
{
	pthread_mutex_lock(&retired_lock);
	size_t n = nretired < max ? nretired : max;
	memcpy(out, retired, n * sizeof(*out));
	memmove(retired, retired + n, (nretired - n) * sizeof(*retired));
	nretired -= n;
	pthread_mutex_unlock(&retired_lock);
	return n;
}

/* store: write a table built from the file to the unwind cache now; else later, by
 * the service (store_pending). */
static void build_table(struct module *mod, uintptr_t vdso, bool store)
{
	uint64_t t0 = clock_now_ns(CLOCK_MONOTONIC);
	int rc;
	bool cached = false;
	if (mod->is_vdso) {
		/* Read from memory (there is no file); a copy keeps libelf away from the
		 * live mapping. Its size: the end of its highest segment. */
		size_t len = 0;
		for (size_t s = 0; s < mod->nsegs; s++)
			if (mod->seg_end[s] - vdso > len)
				len = mod->seg_end[s] - vdso;
		/* The section headers (which libelf needs to find .eh_frame) sit past the
		 * segment's end, still inside its last page. */
		const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)vdso;
		size_t page = page_size();
		size_t mapped = (len + page - 1) & ~(page - 1);
		size_t sh_end = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
		if (sh_end > len && sh_end <= mapped)
			len = sh_end;
		void *copy = len ? malloc(len) : NULL;
		if (copy) {
			memcpy(copy, (const void *)vdso, len);
			rc = cfi_table_build_elf(NULL, copy, len, &mod->table);
			free(copy);
		} else {
			rc = -ENOMEM;
		}
	} else {
		/* Built once per file for every process (agent/unwind/cfi_cache.h). */
		cached = cfi_cache_load(mod->path, &mod->table) == 0;
		rc = cached ? 0 : cfi_table_build_elf(mod->path, NULL, 0, &mod->table);
		if (rc == 0 && !cached && store)
			cfi_cache_store(mod->path, &mod->table);
		mod->store_pending = rc == 0 && !cached && !store;
	}
	mod->built = true;
	mod->has_table = rc == 0;
	mod->build_ns = clock_now_ns(CLOCK_MONOTONIC) - t0;
	atomic_fetch_add_explicit(&st_build_ns, mod->build_ns, memory_order_relaxed);
	if (rc == 0) {
		atomic_fetch_add_explicit(&st_fdes_skipped, mod->table.fdes_skipped,
					  memory_order_relaxed);
		log_debug("modules: %s: %zu unwind rows (%zu KiB, %u with a rule the unwinder "
			  "cannot evaluate) in %.2f ms%s",
			  mod->path, mod->table.nrows, cfi_table_bytes(&mod->table) >> 10,
			  mod->table.rows_unsupported, (double)mod->build_ns / 1e6,
			  cached ? ", from the unwind cache" : "");
	} else {
		atomic_fetch_add_explicit(&st_build_failures, 1, memory_order_relaxed);
		log_debug("modules: %s: no unwind table (%s); frame pointers only", mod->path,
			  strerror(-rc));
	}
}

static bool build_first(const struct module *m, size_t index)
{
	const char *base = strrchr(m->path, '/');
	base = base ? base + 1 : m->path;
	return index == 0 || strncmp(base, "libc.so", 7) == 0;
}

static struct module *module_new(const struct found *f)
{
	struct module *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->path = strdup(f->path);
	if (!m->path) {
		free(m);
		return NULL;
	}
	m->is_vdso = f->is_vdso;
	m->bias = f->bias;
	m->nsegs = f->nsegs;
	memcpy(m->seg_start, f->seg_start, sizeof(m->seg_start));
	memcpy(m->seg_end, f->seg_end, sizeof(m->seg_end));
	memcpy(m->seg_off, f->seg_off, sizeof(m->seg_off));
	return m;
}

static bool same_module(const struct module *m, const struct found *f)
{
	return m->bias == f->bias && m->nsegs == f->nsegs && m->seg_start[0] == f->seg_start[0] &&
	       m->seg_end[0] == f->seg_end[0] && strcmp(m->path, f->path) == 0;
}

static void update_live_stats(void);
static void adopt_published_map(void);

int modules_refresh(void)
{
	bool changed;
	return modules_rescan(&changed, MODULES_BUILD_ALL);
}

void modules_retire_unloaded(void)
{
	/* Only after a dlclose the service has not rescanned for; and not while another
	 * thread holds the registry (our own module thread building a table): its
	 * rescan retires them soon enough for the next profile. */
	if (!modules_rescan_pending() || pthread_mutex_trylock(&mod_lock) != 0)
		return;
	pthread_mutex_unlock(&mod_lock);
	bool changed;
	modules_rescan(&changed, MODULES_BUILD_NONE);
}

/* build: which missing tables to build (modules_retire_unloaded builds none). */
int modules_rescan(bool *changed_out, enum modules_build build)
{
	struct scan s = {.vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR)};
	pthread_mutex_lock(scan_lock);
	dl_iterate_phdr(scan_cb, &s);
	pthread_mutex_unlock(scan_lock);
	if (s.n > 0 && s.f[0].path[0] == 0) {
		/* The executable (named after the walk: no syscall under the lock). */
		ssize_t n = readlink("/proc/self/exe", s.f[0].path, sizeof(s.f[0].path) - 1);
		if (n > 0)
			s.f[0].path[n] = 0;
		else
			snprintf(s.f[0].path, sizeof(s.f[0].path), "[exe]");
	}
	/* dlopen("dir/lib.so") leaves that relative name in the link map: resolve it now,
	 * while it still names the file (the cwd may change; an unloaded library is
	 * symbolized from this path after the fact). Relative names are rare; the others
	 * cost a byte compare. */
	for (size_t i = 1; i < s.n; i++) {
		char full[PATH_MAX];
		if (s.f[i].path[0] != '/' && s.f[i].path[0] != '[' && s.f[i].path[0] &&
		    realpath(s.f[i].path, full) && strlen(full) < sizeof(s.f[i].path))
			snprintf(s.f[i].path, sizeof(s.f[i].path), "%s", full);
	}
	if (s.err) {
		big_free(s.f);
		return s.err;
	}
	pthread_mutex_lock(&mod_lock);
	if (mods_stale)
		adopt_published_map();
	for (size_t i = 0; i < nmods; i++)
		mods[i]->seen = false;
	bool changed = false;
	for (size_t k = 0; k < s.n; k++) {
		struct module *found = NULL;
		for (size_t i = 0; i < nmods && !found; i++)
			if (!mods[i]->seen && same_module(mods[i], &s.f[k]))
				found = mods[i];
		if (found) {
			found->seen = true;
			continue;
		}
		if (nmods == capmods) {
			size_t cap = capmods ? capmods * 2 : 64;
			struct module **m = realloc(mods, cap * sizeof(*m));
			if (!m)
				continue;
			mods = m;
			capmods = cap;
		}
		struct module *m = module_new(&s.f[k]);
		if (!m)
			continue;
		m->seen = true;
		mods[nmods++] = m;
		changed = true;
	}
	/* Unloaded modules leave the map; their tables are freed after the grace. */
	struct module **dead = NULL;
	size_t ndead = 0;
	size_t w = 0;
	for (size_t i = 0; i < nmods; i++) {
		struct module *m = mods[i];
		if (m->seen) {
			mods[w++] = m;
			continue;
		}
		changed = true;
		retire(m);
		struct module **d = realloc(dead, (ndead + 1) * sizeof(*d));
		if (d) {
			dead = d;
			dead[ndead++] = m;
		} /* else leaked: freeing it now could pull it from under a handler */
	}
	nmods = w;
	if (changed)
		publish(dead, ndead);
	free(dead);
	/* Build missing tables one at a time, publishing after each: the executable and
	 * libc first (where most samples land), then the rest in load order. */
	for (int pass = 0; build != MODULES_BUILD_NONE && pass < 2; pass++) {
		for (size_t i = 0; i < nmods; i++) {
			if (mods[i]->built || (pass == 0 && !build_first(mods[i], i)))
				continue;
			if (build == MODULES_BUILD_LATE &&
			    (mods[i]->is_vdso || boot_cfi_holds(mods[i]->seg_start[0])))
				continue;
			build_table(mods[i], s.vdso, build == MODULES_BUILD_ALL);
			if (mods[i]->has_table)
				publish(NULL, 0);
			update_live_stats();
		}
	}
	/* The tables dlopen callers built, to the cache (a file write: tens of ms for a
	 * large library, which their dlopen did not wait for). */
	for (size_t i = 0; build == MODULES_BUILD_ALL && i < nmods; i++) {
		if (mods[i]->store_pending) {
			mods[i]->store_pending = false;
			cfi_cache_store(mods[i]->path, &mods[i]->table);
		}
	}
	update_live_stats();
	if (build != MODULES_BUILD_NONE)
		atomic_store_explicit(&built_gen, s.loader_gen, memory_order_relaxed);
	int n = (int)nmods;
	pthread_mutex_unlock(&mod_lock);
	big_free(s.f);
	*changed_out = changed;
	return n;
}

/* mod_lock held: the live figures, published for modules_get_stats (which an
 * application thread may call: it must not wait for mod_lock, held across builds). */
FORK_CHILD_PATH static void update_live_stats(void)
{
	uint64_t tables = 0, bytes = 0, rows = 0, unbuilt = 0, unsupported = 0;
	for (size_t i = 0; i < nmods; i++) {
		unbuilt += !mods[i]->built;
		if (!mods[i]->has_table)
			continue;
		tables++;
		bytes += cfi_table_bytes(&mods[i]->table);
		rows += mods[i]->table.nrows;
		unsupported += mods[i]->table.rows_unsupported;
	}
	atomic_store_explicit(&st_modules, nmods, memory_order_relaxed);
	atomic_store_explicit(&st_unbuilt, unbuilt, memory_order_relaxed);
	/* On the FORK_CHILD_DATA page: written only when it changes (every refresh ends
	 * here, and a store would copy the page the parent shares with its fork children). */
	if (atomic_load_explicit(&st_tables, memory_order_relaxed) != tables)
		atomic_store_explicit(&st_tables, tables, memory_order_relaxed);
	atomic_store_explicit(&st_table_bytes, bytes, memory_order_relaxed);
	atomic_store_explicit(&st_rows, rows, memory_order_relaxed);
	atomic_store_explicit(&st_rows_unsupported, unsupported, memory_order_relaxed);
}

/* The loader's loads + unloads now (loader_gen_of), read from the first module the
 * walk reports; 0 when unknown. Under scan_lock, as every walk: a fork never copies
 * the loader's lock held by one of our walks. */
static uint64_t loader_gen_now(void)
{
	struct scan s = {0};
	pthread_mutex_lock(scan_lock);
	dl_iterate_phdr(first_gen_cb, &s);
	pthread_mutex_unlock(scan_lock);
	return s.loader_gen;
}

void modules_load_sync(void)
{
	uint64_t gen = loader_gen_now();
	/* Nothing mapped or unmapped since the last build (the module was loaded already). */
	if (gen != 0 && gen == atomic_load_explicit(&built_gen, memory_order_relaxed))
		return;
	bool changed;
	modules_rescan(&changed, MODULES_BUILD_LATE);
}

bool modules_registry_behind(void)
{
	if (atomic_load_explicit(&st_unbuilt, memory_order_relaxed) != 0)
		return true;
	uint64_t gen = loader_gen_now();
	return gen == 0 || gen != atomic_load_explicit(&built_gen, memory_order_relaxed);
}

FORK_CHILD_PATH bool modules_have_tables(void)
{
	return atomic_load_explicit(&st_tables, memory_order_relaxed) != 0;
}

void modules_get_stats(struct modules_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->modules = atomic_load_explicit(&st_modules, memory_order_relaxed);
	out->tables = atomic_load_explicit(&st_tables, memory_order_relaxed);
	out->table_bytes = atomic_load_explicit(&st_table_bytes, memory_order_relaxed);
	out->rows = atomic_load_explicit(&st_rows, memory_order_relaxed);
	out->rows_unsupported = atomic_load_explicit(&st_rows_unsupported, memory_order_relaxed);
	out->build_ns = atomic_load_explicit(&st_build_ns, memory_order_relaxed);
	out->build_failures = atomic_load_explicit(&st_build_failures, memory_order_relaxed);
	out->fdes_skipped = atomic_load_explicit(&st_fdes_skipped, memory_order_relaxed);
	out->publications = atomic_load_explicit(&st_publications, memory_order_relaxed);
	out->leaked = atomic_load_explicit(&st_leaked, memory_order_relaxed);
}

/* ---------------------------------------------------------------- start-up and fork */

FORK_CHILD_PATH void modules_init(void)
{
	FORK_CHILD_DATA static bool lock_placed; /* a fork child reads it */
	if (!lock_placed) { /* start-up, one thread; a fork child keeps the parent's */
		lock_placed = true;
		module_map_place_grace();
		pthread_mutex_t *lock = fork_local_alloc(sizeof(*lock));
		if (lock && pthread_mutex_init(lock, NULL) == 0)
			scan_lock = lock;
	}
	modules_service_init(); /* modules_service.c */
}

void modules_atfork_prepare(void)
{
	pthread_mutex_lock(scan_lock);
}

void modules_atfork_parent(void)
{
	pthread_mutex_unlock(scan_lock);
}

/* mod_lock held, in a fork child's first refresh: the records again, from the published
 * map, which is always consistent (immutable once published); what the parent was
 * building when it forked is forgotten (leaked) and built again. */
static void adopt_published_map(void)
{
	mods_stale = false;
	const struct module_map *m = module_map_current();
	struct module **fresh_mods = calloc(m->n ? m->n : 1, sizeof(*fresh_mods));
	size_t n = 0;
	for (size_t i = 0; fresh_mods && i < m->n; i++) {
		struct module *mod = m->e[i].mod;
		bool dup = false;
		for (size_t k = 0; k < n && !dup; k++)
			dup = fresh_mods[k] == mod;
		if (dup)
			continue;
		if (!m->e[i].table) {
			mod->built = false; /* maybe half-built in the parent: again */
			mod->has_table = false;
		}
		fresh_mods[n++] = mod;
	}
	mods = fresh_mods;
	nmods = fresh_mods ? n : 0;
	capmods = fresh_mods ? (m->n ? m->n : 1) : 0;
}

/* Fork child: one thread, the forking one. The parent's modules thread is gone, maybe
 * in the middle of a refresh holding mod_lock with records half-updated. The records are
 * rebuilt from the published map when the child's own thread starts (on its first
 * dlopen/dlclose, or modules_refresh): not here, where it would cost every child an
 * allocation and copied heap pages. */
FORK_CHILD_PATH void modules_atfork_child(modules_thread_create_fn create)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	mod_lock = fresh;
	retired_lock = fresh;
	/* Held by our prepare handler; on the fork-local page it is zero-filled already,
	 * and not touching that page spares most children a fault. */
	fork_local_mutex_after_fork(scan_lock);
	modules_init();
	module_map_after_fork();
	nretired = 0; /* the parent's profile owns them */
	mods_stale = true;
	modules_service_after_fork(create); /* modules_service.c */
}
