/*
 * modules.c - loaded modules, their CFI tables, and the map handlers search
 * (see modules.h).
 *
 * Context: normal context only: the "ddprof-modules" thread, tests, the preload
 * layer's dlopen/dlclose hooks and the fork handlers. The map's handler side
 * (lookups, publication, grace period) is agent/unwind/module_map.c.
 *
 * Locks: mod_lock serializes writers (the thread, tests) over the records and the
 * publication; it is held while tables are built (file I/O), so no fork handler and no
 * application thread ever takes it. ctl_lock guards the thread's wake-up flags and
 * retired_lock the retired list; both are held only for a few stores.
 */
#include "agent/unwind/modules.h"
#include "common/page_size.h"

#include <errno.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#include "agent/unwind/boot_cfi.h"
#include "agent/unwind/cfi_cache.h"
#include "agent/unwind/module_map.h"
#include "agent/sample/fork_local.h"
#include "agent/unwind/unwind.h"
#include "common/big_alloc.h"
#include "common/bg_host.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/own_thread.h"

#define MAX_SEGS 4 /* executable PT_LOAD segments kept per module (1 in practice) */
#define RESCAN_INTERVAL_NS (2ULL * NS_PER_SEC) /* catches libc's own dlopens */
#define GRACE_TIMEOUT_NS (200ULL * 1000000ULL)
#define RETIRED_MAX 256 /* unloaded segments kept for the symbolizer */
#define STOP_TIMEOUT_NS (1ULL * NS_PER_SEC)
/* After a dlopen starts, rescan every LOAD_POLL_NS until a new module appears, at most
 * LOAD_POLLS times (a dlopen with many dependencies and constructors can take long). */
#define LOAD_POLL_NS (2ULL * 1000000ULL)
#define LOAD_POLLS 100
/* The first scan. A process that lives a few milliseconds (a shell command) should not
 * pay for tables it never uses, nor wait at exit for work on them. Where the start-up
 * modules can be unwound from their CFI in memory (agent/unwind/boot_cfi.h: a slower walk,
 * as complete), tables only make later samples cheaper: they wait a second, so a program
 * that runs for less never builds them (milliseconds of CPU even with a warm cache,
 * taken from the application's cores in its first moments). A dlopen or dlclose scans
 * at once either way. Without boot CFI, samples walk frame pointers until the scan. */
#define START_DELAY_NS (1 * 1000000L)
#define START_DELAY_BOOT_CFI_NS (1000 * 1000000L)
/* While the first scan waits for START_DELAY_BOOT_CFI_NS, the service looks every
 * BOOT_POLL_NS at how many frames the samples walked from CFI in memory: past
 * BOOT_BUSY_FRAMES (a program that allocates a lot under allocation profiling samples
 * thousands of stacks a second) the tables pay for themselves at once, and the scan is
 * made then. */
#define BOOT_POLL_NS (50 * 1000000L)
#define BOOT_BUSY_FRAMES 5000

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
	uint64_t build_ns;
};

/* What a fork child re-initializes is FORK_CHILD_DATA (agent/sample/fork_local.h). */
FORK_CHILD_DATA static pthread_mutex_t mod_lock = PTHREAD_MUTEX_INITIALIZER;
FORK_CHILD_DATA static struct module **mods;
FORK_CHILD_DATA static size_t nmods, capmods;
/* Fork child: mods are the parent's until the first refresh rebuilds them from the
 * published map (adopt_published_map); most children never refresh. */
FORK_CHILD_DATA static bool mods_stale;

FORK_CHILD_DATA static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
FORK_CHILD_DATA static pthread_cond_t ctl_cond;
FORK_CHILD_DATA static bool ctl_stop, ctl_running;
FORK_CHILD_DATA static struct own_stack ctl_stack; /* our thread's (common/own_thread.h) */
/* Rescans left while waiting for a dlopen to finish: set by any thread without the
 * lock (relaxed: the thread re-reads it under ctl_lock after every wake-up). */
FORK_CHILD_DATA static _Atomic unsigned load_polls;
static _Atomic bool dirty;	       /* a dlclose returned: rescan at the next wake-up */
static uint64_t notify_gen, ready_gen; /* ready_gen: last notify_gen fully built */
static pthread_t ctl_thread;
FORK_CHILD_DATA static bool own_thread; /* ctl_thread runs the service (not hosted) */
/* Fork child: the thread is started on the first dlopen/dlclose only (the inherited map
 * already covers every module); a short-lived child never pays for it. */
FORK_CHILD_DATA static modules_thread_create_fn lazy_create;

FORK_CHILD_DATA static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held around dl_iterate_phdr only (microseconds of memory work), and by the fork
 * prepare handler: a fork never happens while our thread holds the loader's lock, which
 * the child would inherit locked. */
static pthread_mutex_t scan_lock_fallback = PTHREAD_MUTEX_INITIALIZER;
/* On the fork-local page when there is one: fork prepare takes it (fork_local.h). */
FORK_CHILD_DATA static pthread_mutex_t *scan_lock = &scan_lock_fallback;
static struct retired_segment retired[RETIRED_MAX];
FORK_CHILD_DATA static size_t nretired;

static _Atomic uint64_t st_modules, st_table_bytes, st_rows;
FORK_CHILD_DATA static _Atomic uint64_t st_tables; /* a fork child reads it */
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
};

static int scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct scan *s = arg;
	(void)size;
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
	qsort(m->e, m->n, sizeof(m->e[0]), entry_cmp);
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

static void build_table(struct module *mod, uintptr_t vdso)
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
		if (rc == 0 && !cached)
			cfi_cache_store(mod->path, &mod->table);
	}
	mod->built = true;
	mod->has_table = rc == 0;
	mod->build_ns = clock_now_ns(CLOCK_MONOTONIC) - t0;
	atomic_fetch_add_explicit(&st_build_ns, mod->build_ns, memory_order_relaxed);
	if (rc == 0) {
		atomic_fetch_add_explicit(&st_fdes_skipped, mod->table.fdes_skipped,
					  memory_order_relaxed);
		log_debug("modules: %s: %zu unwind rows (%zu KiB) in %.2f ms%s", mod->path,
			  mod->table.nrows, cfi_table_bytes(&mod->table) >> 10,
			  (double)mod->build_ns / 1e6, cached ? ", from the unwind cache" : "");
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

static int refresh(bool *changed_out, bool build);
static void update_live_stats(void);
static void adopt_published_map(void);

int modules_refresh(void)
{
	bool changed;
	return refresh(&changed, true);
}

void modules_retire_unloaded(void)
{
	/* Only after a dlclose the service has not rescanned for; and not while another
	 * thread holds the registry (our own module thread building a table): its
	 * rescan retires them soon enough for the next profile. */
	if (!atomic_load_explicit(&dirty, memory_order_relaxed) ||
	    pthread_mutex_trylock(&mod_lock) != 0)
		return;
	pthread_mutex_unlock(&mod_lock);
	bool changed;
	refresh(&changed, false);
}

/* build: also build the tables that are missing (modules_retire_unloaded does not). */
static int refresh(bool *changed_out, bool build)
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
	for (int pass = 0; build && pass < 2; pass++) {
		for (size_t i = 0; i < nmods; i++) {
			if (mods[i]->built || (pass == 0 && !build_first(mods[i], i)))
				continue;
			build_table(mods[i], s.vdso);
			if (mods[i]->has_table)
				publish(NULL, 0);
			update_live_stats();
		}
	}
	update_live_stats();
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
	uint64_t tables = 0, bytes = 0, rows = 0;
	for (size_t i = 0; i < nmods; i++) {
		if (!mods[i]->has_table)
			continue;
		tables++;
		bytes += cfi_table_bytes(&mods[i]->table);
		rows += mods[i]->table.nrows;
	}
	atomic_store_explicit(&st_modules, nmods, memory_order_relaxed);
	/* On the FORK_CHILD_DATA page: written only when it changes (every refresh ends
	 * here, and a store would copy the page the parent shares with its fork children). */
	if (atomic_load_explicit(&st_tables, memory_order_relaxed) != tables)
		atomic_store_explicit(&st_tables, tables, memory_order_relaxed);
	atomic_store_explicit(&st_table_bytes, bytes, memory_order_relaxed);
	atomic_store_explicit(&st_rows, rows, memory_order_relaxed);
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
	out->build_ns = atomic_load_explicit(&st_build_ns, memory_order_relaxed);
	out->build_failures = atomic_load_explicit(&st_build_failures, memory_order_relaxed);
	out->fdes_skipped = atomic_load_explicit(&st_fdes_skipped, memory_order_relaxed);
	out->publications = atomic_load_explicit(&st_publications, memory_order_relaxed);
	out->leaked = atomic_load_explicit(&st_leaked, memory_order_relaxed);
}

/* ---------------------------------------------------------------- the thread */

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
	/* An assignment, not pthread_cond_init: waits name their clock (clockwait), and a
	 * fork child touches no code page of libc's for it (common/raw_syscall.h). */
	pthread_cond_t fresh = PTHREAD_COND_INITIALIZER;
	ctl_cond = fresh;
}

/* Set by modules_set_host: the background host whose thread runs modules_service (the
 * uploader's), and the service's id in its table. */
static struct bg_host *host;
static unsigned host_id;
FORK_CHILD_DATA static uint64_t next_due_ns = UINT64_MAX; /* ctl_lock; CLOCK_MONOTONIC */
/* ctl_lock: until when the first scan waits for boot CFI's samples (0: it does not). */
static uint64_t boot_deadline_ns;
/* The service's thread only: the seccomp check for guarded reads is done (a fork child
 * inherits the answer with the filters). */
static bool guard_checked;

void modules_set_host(struct bg_host *h, unsigned id)
{
	host = h;
	host_id = id;
}

uint64_t modules_service(uint64_t now_ns)
{
	pthread_mutex_lock(&ctl_lock);
	uint64_t gen = notify_gen;
	bool active = ctl_running && !ctl_stop;
	bool due = active && (gen != ready_gen || now_ns >= next_due_ns);
	uint64_t next = active ? next_due_ns : UINT64_MAX;
	pthread_mutex_unlock(&ctl_lock);
	if (active && !guard_checked) {
		/* The service's first call, off the application's path (the first scan may
		 * be a second away): see unwind_dwarf_set_guarded_reads. */
		guard_checked = true;
		if (!unwind_dwarf_enable_guarded_reads(NULL))
			log_debug("seccomp filter active: unwinding reads only the thread's stack");
	}
	if (!due)
		return next;
	if (gen == ready_gen && now_ns < boot_deadline_ns) {
		struct unwind_stats us;
		unwind_dwarf_get_stats(&us);
		if (us.boot_cfi_steps < BOOT_BUSY_FRAMES) {
			pthread_mutex_lock(&ctl_lock);
			uint64_t poll = now_ns + BOOT_POLL_NS;
			next_due_ns = poll < boot_deadline_ns ? poll : boot_deadline_ns;
			next = next_due_ns;
			pthread_mutex_unlock(&ctl_lock);
			return next;
		}
	}
	pthread_mutex_lock(&ctl_lock);
	boot_deadline_ns = 0; /* the first scan is being made */
	pthread_mutex_unlock(&ctl_lock);
	bool changed = false;
	refresh(&changed, true);
	pthread_mutex_lock(&ctl_lock);
	ready_gen = gen;
	if (changed)
		atomic_store_explicit(&load_polls, 0, memory_order_relaxed);
	pthread_cond_broadcast(&ctl_cond); /* modules_wait_ready */
	uint64_t wait = RESCAN_INTERVAL_NS;
	unsigned polls = atomic_load_explicit(&load_polls, memory_order_relaxed);
	if (polls > 0 || atomic_exchange_explicit(&dirty, false, memory_order_relaxed)) {
		if (polls > 0)
			atomic_fetch_sub_explicit(&load_polls, 1, memory_order_relaxed);
		wait = LOAD_POLL_NS;
	}
	/* A notify during the refresh: due again at once. */
	next_due_ns = notify_gen != gen ? 0 : clock_now_ns(CLOCK_MONOTONIC) + wait;
	next = ctl_stop ? UINT64_MAX : next_due_ns;
	pthread_mutex_unlock(&ctl_lock);
	return next;
}

/* Our own thread, when no host runs the service (unit tests, or the uploader thread
 * could not be started). */
static void *modules_thread(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "ddprof-modules");
	for (;;) {
		uint64_t next = modules_service(clock_now_ns(CLOCK_MONOTONIC));
		pthread_mutex_lock(&ctl_lock);
		if (ctl_stop) {
			pthread_mutex_unlock(&ctl_lock);
			break;
		}
		if (notify_gen == ready_gen && next > clock_now_ns(CLOCK_MONOTONIC)) {
			struct timespec ts = clock_ns_to_timespec(next);
			pthread_cond_clockwait(&ctl_cond, &ctl_lock, CLOCK_MONOTONIC, &ts);
		}
		pthread_mutex_unlock(&ctl_lock);
	}
	return NULL;
}

static int start_own_thread(modules_thread_create_fn create);

int modules_start(modules_thread_create_fn create)
{
	pthread_mutex_lock(&ctl_lock);
	ctl_stop = false;
	/* See START_DELAY_NS and BOOT_POLL_NS. */
	uint64_t now = clock_now_ns(CLOCK_MONOTONIC);
	if (boot_cfi_covers_roots()) {
		boot_deadline_ns = now + START_DELAY_BOOT_CFI_NS;
		next_due_ns = now + BOOT_POLL_NS;
	} else {
		boot_deadline_ns = 0;
		next_due_ns = now + START_DELAY_NS;
	}
	ctl_running = true;
	pthread_mutex_unlock(&ctl_lock);
	/* Hosted: the uploader thread runs the service, so the process has one profiler
	 * thread, not two (each one costs every fork: its stack mappings and its malloc
	 * arena, which glibc locks and unlocks around fork). */
	if (host && bg_host_wake(host, host_id, false))
		return 0;
	return start_own_thread(create);
}

/* The thread never takes a profiling signal: it is never sampled, and a handler must
 * not run inside the writer side of the grace scheme. */
static int start_own_thread(modules_thread_create_fn create)
{
	int rc = own_thread_create(&ctl_stack, PROFILER_THREAD_STACK_BYTES, create, &ctl_thread,
				   modules_thread, NULL);
	if (rc != 0) {
		pthread_mutex_lock(&ctl_lock);
		ctl_running = false;
		pthread_mutex_unlock(&ctl_lock);
		return rc;
	}
	own_thread = true;
	return 0;
}

void modules_host_failed(modules_thread_create_fn create)
{
	pthread_mutex_lock(&ctl_lock);
	bool orphaned = ctl_running && !ctl_stop && !own_thread;
	pthread_mutex_unlock(&ctl_lock);
	if (orphaned)
		start_own_thread(create);
}

void modules_stop(void)
{
	if (!ctl_running)
		return;
	pthread_mutex_lock(&ctl_lock);
	ctl_stop = true;
	pthread_cond_broadcast(&ctl_cond);
	pthread_mutex_unlock(&ctl_lock);
	if (!own_thread)
		return;
	/* Bounded: the thread may be in the middle of a large table. */
	struct timespec ts = clock_ns_to_timespec(clock_now_ns(CLOCK_REALTIME) + STOP_TIMEOUT_NS);
	if (pthread_timedjoin_np(ctl_thread, NULL, &ts) == 0) {
		own_thread_stack_release(&ctl_stack);
		ctl_running = false;
		own_thread = false;
	}
}

/* Wakes whoever runs the service: our thread (ctl_cond, broadcast by the caller) or
 * the host. Called without ctl_lock. */
static void wake_service(void)
{
	if (host && !own_thread)
		bg_host_wake(host, host_id, true);
}

/* Cheap on the application's path: a store, and a wake-up only when the thread sleeps
 * its long interval (while it polls every LOAD_POLL_NS it sees the flags anyway). */
/* A fork child's first dlopen/dlclose starts the deferred work (normal context). */
bool modules_start_deferred(void)
{
	if (ctl_running)
		return true;
	modules_thread_create_fn create = lazy_create;
	if (!create)
		return false;
	pthread_mutex_lock(&ctl_lock);
	bool mine = lazy_create != NULL;
	lazy_create = NULL;
	pthread_mutex_unlock(&ctl_lock);
	if (mine)
		modules_start(create);
	return ctl_running;
}

void modules_notify(void)
{
	if (!modules_start_deferred())
		return;
	atomic_store_explicit(&dirty, true, memory_order_relaxed);
	if (atomic_load_explicit(&load_polls, memory_order_relaxed) > 0)
		return;
	pthread_mutex_lock(&ctl_lock);
	notify_gen++;
	pthread_cond_broadcast(&ctl_cond);
	pthread_mutex_unlock(&ctl_lock);
	wake_service();
}

void modules_notify_load(void)
{
	if (!modules_start_deferred())
		return;
	if (atomic_exchange_explicit(&load_polls, LOAD_POLLS, memory_order_relaxed) > 0)
		return; /* already polling */
	pthread_mutex_lock(&ctl_lock);
	notify_gen++;
	pthread_cond_broadcast(&ctl_cond);
	pthread_mutex_unlock(&ctl_lock);
	wake_service();
}

int modules_wait_ready(uint64_t timeout_ns)
{
	if (!ctl_running)
		return modules_refresh() < 0 ? -EIO : 0;
	uint64_t deadline = clock_now_ns(CLOCK_MONOTONIC) + timeout_ns;
	pthread_mutex_lock(&ctl_lock);
	uint64_t want = ++notify_gen;
	pthread_cond_broadcast(&ctl_cond);
	pthread_mutex_unlock(&ctl_lock);
	wake_service();
	pthread_mutex_lock(&ctl_lock);
	int rc = 0;
	while (ready_gen < want) {
		struct timespec ts = clock_ns_to_timespec(deadline);
		if (pthread_cond_clockwait(&ctl_cond, &ctl_lock, CLOCK_MONOTONIC, &ts) ==
		    ETIMEDOUT) {
			rc = -ETIMEDOUT;
			break;
		}
	}
	pthread_mutex_unlock(&ctl_lock);
	return rc;
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
	ctl_lock = fresh;
	retired_lock = fresh;
	/* Held by our prepare handler; on the fork-local page it is zero-filled already,
	 * and not touching that page spares most children a fault. */
	fork_local_mutex_after_fork(scan_lock);
	modules_init();
	module_map_after_fork();
	nretired = 0; /* the parent's profile owns them */
	atomic_store_explicit(&load_polls, 0, memory_order_relaxed);
	ctl_running = false;
	ctl_stop = false;
	own_thread = false; /* the parent's thread is not in the child */
	own_thread_stack_after_fork(&ctl_stack);
	next_due_ns = UINT64_MAX;
	mods_stale = true;
	lazy_create = create;
}
