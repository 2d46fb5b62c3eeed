/*
 * got_patch.c - GOT slots of the loaded modules pointed at replacements (see
 * got_patch.h).
 *
 * A walk: dl_iterate_phdr, and for each module not walked before, its program headers
 * and dynamic section read from memory (got_image.c: every pointer checked against the
 * module's PT_LOAD segments), its JUMP_SLOT and GLOB_DAT relocations matched by name
 * (got_image_find_slots), each slot to patch written with one aligned 8-byte
 * store, its RELRO pages made writable around the stores and read-only again. The
 * stores are made inside the dl_iterate_phdr callback, where the loader holds its list
 * lock: a module being unloaded is taken off the list under that lock before it is
 * unmapped, so the module a callback sees stays mapped until the callback returns.
 *
 * Modules being loaded: glibc lists a new module before it relocates it, and makes its
 * RELRO read-only only after. Patching it then would lose our store to the loader's,
 * or make a RELRO page read-only before the loader has written it, and the loader
 * would crash. So a walk starts with a barrier: the loads counter (dlpi_adds) is read,
 * then dl_guard_wait_loader (a dlopen(NULL, RTLD_NOLOAD)) takes and releases the
 * loader's dlopen lock, which every dlopen holds from mapping to the end of relocation,
 * so the loads in flight have finished when it returns; the walk then reads the
 * counter again under the list lock. Unchanged: every module listed was listed before the barrier,
 * so it is complete (a failed load is unlisted). Changed: a load began in between, and the walk is
 * started again (BUSY_RETRIES). A call from a library's constructor passes the barrier at once (its
 * thread holds the dlopen lock, a recursive one): the modules of that dlopen are all relocated
 * before constructors run.
 *
 * Bookkeeping: a record per module walked (base and dynamic section address, the key
 * under which later walks skip it) and per slot patched (address, old value), in
 * memory mapped once and never unmapped (the functions patched may be malloc's). With
 * nothing unloaded since the last walk (dlpi_subs), known modules are skipped; after
 * an unload, every module is checked (its recorded slots must still hold their
 * replacements, else it is patched again: a library unloaded and another loaded at the
 * same address) and the records of modules no longer listed are dropped.
 *
 * Locks: walk_lock (one writer: apply, restore, the fork handlers) is held around the
 * walk only, never while waiting for the loader's dlopen lock (the barrier and dlsym,
 * which takes it too, come before): a thread in a library constructor holds that lock
 * and may call got_patch_apply (from the preload layer's dlopen hook, for a dlopen the
 * constructor makes). The barrier takes no other lock of ours either (not dl_guard's,
 * whose holder may be waiting for the loader's lock). Inside walk_lock,
 * dl_iterate_phdr takes the loader's list lock, whose holders never wait for ours.
 * Context: normal context only; nothing here allocates.
 */
#include "agent/alloc/got_patch.h"
#include "agent/alloc/got_image.h"
#include "agent/alloc/got_write.h"
#include "common/dl_guard.h"
#include "common/fork_child.h"
#include "common/page_size.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

/* Walks started again because a library was being loaded, before the call gives up:
 * a load must begin inside the few microseconds between the barrier and the walk to
 * send it back, and the caller's next call (after its own dlopen) catches up. */
#define BUSY_RETRIES 4
/* Modules and slots remembered. A module has at most a few slots per name (a
 * JUMP_SLOT, a GLOB_DAT): 16 Ki slots cover thousands of libraries. The arrays are
 * mapped once, untouched pages cost nothing. */
#define MAX_MODULES 4096
#define MAX_SLOTS 16384
#define HASH_SIZE (2 * MAX_MODULES) /* open addressing, at most half full */
/* Slots one module may have for the table's names (each name: a JUMP_SLOT, a GLOB_DAT,
 * rarely more); past it the module's extra slots are counted as failures. */
#define MAX_MODULE_SLOTS (4 * GOT_PATCH_MAX_SYMBOLS)
#define DEAD_GEN 0 /* a module record replaced during a full walk */
_Static_assert(GOT_PATCH_MAX_SYMBOLS <= GOT_IMAGE_MAX_NAMES, "every name of a table is searched");

struct mod_rec {
	uintptr_t base, dynamic; /* the key */
	uint32_t first, nslots;	 /* its slot records: slots[first .. first + nslots) */
	uint32_t gen;		 /* the full walk that last found it listed */
};

struct slot_rec {
	uintptr_t addr, old;
	uint32_t entry; /* index in the active table */
};

/* What a slot to patch held and which name it is, beside its store (todo_w). */
struct pending {
	uintptr_t old;
	uint32_t entry;
};

struct store {
	struct mod_rec mods[MAX_MODULES];
	struct slot_rec slots[MAX_SLOTS];
	uint32_t hash[HASH_SIZE]; /* index + 1 into mods, 0: empty */
	/* One module's work (under walk_lock): here rather than on the stack of the
	 * caller, an application thread back from dlopen whose stack may be small. */
	struct got_image_slot found[MAX_MODULE_SLOTS];
	struct pending todo[MAX_MODULE_SLOTS];
	struct got_write todo_w[MAX_MODULE_SLOTS];
};

static pthread_mutex_t fallback_lock = PTHREAD_MUTEX_INITIALIZER;
/* Read by a fork child's handler: on the page it touches anyway (fork_child.h). */
FORK_CHILD_DATA static pthread_mutex_t *walk_lock = &fallback_lock;

/* One applied table's records. Everything below is guarded by walk_lock. */
struct table_state {
	const struct got_patch_entry *owner; /* the table this state belongs to; NULL: free */
	struct store *store;		     /* mapped at the table's first walk, kept */
	uint32_t nmods, nslots, gen;
	const struct got_patch_entry *active; /* the table the records belong to */
	size_t active_n;
	bool done_valid; /* done_adds and done_subs describe a completed walk */
	unsigned long long done_adds, done_subs;
	/* Per name: the executable's canonical PLT entry for it, once seen (got_patch.h). */
	uintptr_t canon_plt[GOT_PATCH_MAX_SYMBOLS];
};
static struct table_state tables[GOT_PATCH_MAX_TABLES];
/* The state the current apply or restore works on: set under walk_lock before any
 * function below reads it, meaningful only while walk_lock is held. */
static struct table_state *ts;

/* Counters: relaxed, they order nothing (read by got_patch_get_stats at any time). */
enum {
	ST_WALKS,
	ST_QUICK,
	ST_BUSY,
	ST_MODULES_PATCHED,
	ST_MODULES_UNCHANGED,
	ST_SLOTS_PATCHED,
	ST_SLOTS_ALREADY,
	ST_SLOTS_FOREIGN,
	ST_SLOTS_RESTORED,
	ST_PAST_PLT,
	ST_SKIP_SELF,
	ST_SKIP_VDSO,
	ST_SKIP_LOADER,
	ST_SKIP_NO_DYNAMIC,
	ST_FAIL_DYNAMIC,
	ST_FAIL_RELOC,
	ST_FAIL_SYMBOL,
	ST_FAIL_PLT,
	ST_FAIL_MPROTECT,
	ST_FAIL_FULL,
	ST_COUNT
};
static _Atomic uint64_t stats[ST_COUNT];

static void count(int which, uint64_t n)
{
	atomic_fetch_add_explicit(&stats[which], n, memory_order_relaxed);
}

/* ---------------------------------------------------------------- writing slots */

static uintptr_t load_slot(uintptr_t addr)
{
	return got_write_load(addr);
}

/* The stores of w (agent/alloc/got_write.h), failures counted. */
static size_t write_slots(const struct got_image *d, struct got_write *w, size_t n)
{
	uint64_t failed = 0;
	size_t written = got_write_slots(d, w, n, &failed);
	count(ST_FAIL_MPROTECT, failed);
	return written;
}

/* ---------------------------------------------------------------- records */

static int map_store(void)
{
	if (ts->store)
		return 0;
	void *p = mmap(NULL, sizeof(struct store), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	ts->store = p;
	return 0;
}

static uint32_t hash_of(uintptr_t base, uintptr_t dynamic)
{
	uint64_t h = ((uint64_t)base ^ ((uint64_t)dynamic * 0x9e3779b97f4a7c15ULL)) *
		     0xff51afd7ed558ccdULL; /* multiply-shift: the high bits mix every input bit */
	return (uint32_t)(h >> 40) & (HASH_SIZE - 1);
}

/* The record of (base, dynamic), or NULL; *where gets its hash cell, or the empty cell
 * where it would go. */
static struct mod_rec *mod_find(uintptr_t base, uintptr_t dynamic, uint32_t **where)
{
	uint32_t h = hash_of(base, dynamic);
	for (;;) {
		uint32_t *cell = &ts->store->hash[h];
		if (*cell == 0) {
			*where = cell;
			return NULL;
		}
		struct mod_rec *m = &ts->store->mods[*cell - 1];
		if (m->base == base && m->dynamic == dynamic) {
			*where = cell;
			return m;
		}
		h = (h + 1) & (HASH_SIZE - 1);
	}
}

/* A new record for the module whose hash cell is `cell` (empty, or its old record's,
 * which the new one replaces); slots from slots[first] on are its own. */
static void mod_add(uint32_t *cell, uintptr_t base, uintptr_t dynamic, uint32_t first)
{
	if (*cell)
		ts->store->mods[*cell - 1].gen = DEAD_GEN;
	ts->store->mods[ts->nmods] = (struct mod_rec){.base = base,
						      .dynamic = dynamic,
						      .first = first,
						      .nslots = ts->nslots - first,
						      .gen = ts->gen};
	*cell = ++ts->nmods;
}

/* After a full walk: drops the records of modules it did not find (unloaded) or
 * replaced. Records are kept in creation order, and each module's slots after those of
 * the modules created before it, so the arrays compact in place. */
static void sweep(void)
{
	uint32_t nm = 0, ns = 0;
	for (uint32_t i = 0; i < ts->nmods; i++) {
		struct mod_rec m = ts->store->mods[i];
		if (m.gen != ts->gen)
			continue;
		memmove(&ts->store->slots[ns], &ts->store->slots[m.first],
			m.nslots * sizeof(ts->store->slots[0]));
		m.first = ns;
		ns += m.nslots;
		ts->store->mods[nm++] = m;
	}
	ts->nmods = nm;
	ts->nslots = ns;
	memset(ts->store->hash, 0, sizeof(ts->store->hash));
	for (uint32_t i = 0; i < ts->nmods; i++) {
		uint32_t *cell;
		mod_find(ts->store->mods[i].base, ts->store->mods[i].dynamic, &cell);
		*cell = i + 1;
	}
}

static void forget_all(void)
{
	ts->nmods = ts->nslots = 0;
	if (ts->store)
		memset(ts->store->hash, 0, sizeof(ts->store->hash));
	ts->active = NULL;
	ts->active_n = 0;
	ts->done_valid = false;
	memset(ts->canon_plt, 0, sizeof(ts->canon_plt));
}

/* ---------------------------------------------------------------- walking modules */

enum kind { MOD_PATCH, MOD_SELF, MOD_VDSO, MOD_LOADER };

struct walk {
	struct got_patch_entry *table;
	size_t n;
	const char *names[GOT_PATCH_MAX_SYMBOLS];
	unsigned long long adds, subs; /* adds: read before the barrier */
	uintptr_t vdso, loader;
	bool first, busy, full;
	int err;
	uint32_t restored;
};

static int walk_cb(struct dl_phdr_info *info, size_t size, void *arg);

/* Modules the profiler loaded for itself and redirects on its own (got_patch_exclude):
 * never walked, never restored. Guarded by walk_lock. */
#define MAX_EXCLUDED 4
static uintptr_t excluded[MAX_EXCLUDED];

static enum kind classify(const struct dl_phdr_info *info, const struct walk *w)
{
	for (size_t i = 0; i < MAX_EXCLUDED; i++)
		if (excluded[i] && info->dlpi_addr == excluded[i])
			return MOD_SELF;
	if (w->vdso && (uintptr_t)info->dlpi_phdr - w->vdso < page_size())
		return MOD_VDSO;
	if (w->loader && info->dlpi_addr == w->loader)
		return MOD_LOADER;
	/* This module: the one whose segments hold this file's code. */
	uintptr_t self = (uintptr_t)&walk_cb;
	for (size_t i = 0; i < info->dlpi_phnum; i++) {
		const Elf64_Phdr *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && self - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
			return MOD_SELF;
	}
	return MOD_PATCH;
}

/* Whether cur is what the loader would have put in the slot from the global scope. */
static bool slot_is_ours_to_patch(const struct got_image *d, const struct got_image_slot *s,
				  uintptr_t cur, uintptr_t orig)
{
	if (cur == orig || (ts->canon_plt[s->entry] && cur == ts->canon_plt[s->entry]))
		return true;
	/* A lazy JUMP_SLOT not called yet: it holds the PLT stub of its own module, and
	 * the loader would bind it from the same scope dlsym searched. */
	return s->jump_slot && got_image_contains(d, cur, 1, PF_X);
}

/* Patches one module; prev: its record from an earlier walk, when patched again. */
static void patch_module(struct walk *w, const struct got_image *d, const struct mod_rec *prev,
			 uint32_t *cell)
{
	struct got_image_slot *found = ts->store->found;
	struct pending *todo = ts->store->todo;
	struct got_write *todo_w = ts->store->todo_w;
	size_t bad, n = got_image_find_slots(d, w->names, w->n, found, MAX_MODULE_SLOTS, &bad);
	if (n > MAX_MODULE_SLOTS) {
		bad += n - MAX_MODULE_SLOTS;
		n = MAX_MODULE_SLOTS;
	}
	count(ST_FAIL_RELOC, bad);
	uint32_t first = ts->nslots;
	size_t ntodo = 0;
	for (size_t i = 0; i < n; i++) {
		const struct got_image_slot *s = &found[i];
		uintptr_t orig = (uintptr_t)*w->table[s->entry].original;
		uintptr_t repl = (uintptr_t)w->table[s->entry].replacement;
		if (!orig)
			continue;
		if (s->plt) {
			if (s->plt == orig) { /* the hook would call back into this slot */
				count(ST_FAIL_PLT, 1);
				continue;
			}
			ts->canon_plt[s->entry] = s->plt;
		}
		uintptr_t cur = load_slot(s->addr);
		if (cur == repl) {
			/* Patched already: keep its old value if an earlier record had it. */
			for (uint32_t k = 0; prev && k < prev->nslots; k++) {
				const struct slot_rec *r = &ts->store->slots[prev->first + k];
				if (r->addr == s->addr && ts->nslots < MAX_SLOTS)
					ts->store->slots[ts->nslots++] = *r;
			}
			count(ST_SLOTS_ALREADY, 1);
		} else if (!slot_is_ours_to_patch(d, s, cur, orig)) {
			count(ST_SLOTS_FOREIGN, 1);
		} else if (ts->nslots + ntodo >= MAX_SLOTS) {
			count(ST_FAIL_FULL, 1);
		} else {
			todo_w[ntodo] = (struct got_write){.addr = s->addr, .value = repl};
			todo[ntodo++] = (struct pending){.old = cur, .entry = s->entry};
		}
	}
	size_t written = write_slots(d, todo_w, ntodo);
	for (size_t i = 0; i < ntodo; i++)
		if (todo_w[i].done)
			ts->store->slots[ts->nslots++] = (struct slot_rec){
			    .addr = todo_w[i].addr, .old = todo[i].old, .entry = todo[i].entry};
	count(ST_SLOTS_PATCHED, written);
	if (written)
		count(ST_MODULES_PATCHED, 1);
	mod_add(cell, d->base, d->dynamic, first);
}

/* Whether every recorded slot of m still holds its replacement. */
static bool module_intact(const struct walk *w, const struct mod_rec *m, const struct got_image *d)
{
	for (uint32_t k = 0; k < m->nslots; k++) {
		const struct slot_rec *r = &ts->store->slots[m->first + k];
		if (!got_image_contains(d, r->addr, sizeof(uintptr_t), PF_R | PF_W) ||
		    load_slot(r->addr) != (uintptr_t)w->table[r->entry].replacement)
			return false;
	}
	return true;
}

static void walk_module(struct walk *w, struct dl_phdr_info *info)
{
	struct got_image d;
	int rc = got_image_read_phdrs(info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum, &d);
	uint32_t *cell;
	struct mod_rec *m = mod_find(d.base, d.dynamic, &cell);
	if (m && (!w->full || (rc == 0 ? module_intact(w, m, &d) : m->nslots == 0))) {
		m->gen = ts->gen;
		count(ST_MODULES_UNCHANGED, 1);
		return;
	}
	if (ts->nmods == MAX_MODULES) {
		/* No record for it: left as it is (an earlier record stays, so that
		 * got_patch_restore still finds the slots it holds). */
		if (m)
			m->gen = ts->gen;
		count(ST_FAIL_FULL, 1);
		return;
	}
	if (rc == 0)
		rc = got_image_read_dynamic(&d);
	if (rc == 0) {
		patch_module(w, &d, m, cell);
		return;
	}
	count(rc == -ENOENT ? ST_SKIP_NO_DYNAMIC : ST_FAIL_DYNAMIC, 1);
	/* Remembered, slotless: not read again while it stays loaded. */
	mod_add(cell, d.base, d.dynamic, ts->nslots);
}

static int walk_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct walk *w = arg;
	if (w->first) {
		w->first = false;
		if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
			w->err = -ENOTSUP; /* glibc before 2.4: no load counters */
			return 1;
		}
		if (info->dlpi_adds != w->adds) {
			w->busy = true;
			return 1;
		}
		w->subs = info->dlpi_subs;
		w->full = !ts->done_valid || w->subs != ts->done_subs;
		if (w->full && ++ts->gen == DEAD_GEN)
			ts->gen++;
	}
	switch (classify(info, w)) {
	case MOD_SELF:
		count(ST_SKIP_SELF, 1);
		break;
	case MOD_VDSO:
		count(ST_SKIP_VDSO, 1);
		break;
	case MOD_LOADER:
		count(ST_SKIP_LOADER, 1);
		break;
	case MOD_PATCH:
		walk_module(w, info);
		break;
	}
	return 0;
}

static int counters_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *c = arg;
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
		c[0] = info->dlpi_adds;
		c[1] = info->dlpi_subs;
	}
	return 1;
}

/* The loader's (loads, unloads) counters. */
static void load_counters(unsigned long long c[2])
{
	c[0] = c[1] = 0;
	dl_iterate_phdr(counters_cb, c);
}

static void init_walk(struct walk *w, struct got_patch_entry *table, size_t n)
{
	memset(w, 0, sizeof(*w));
	w->table = table;
	w->n = n;
	for (size_t i = 0; i < n; i++)
		w->names[i] = table[i].name;
	w->vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
	w->loader = (uintptr_t)getauxval(AT_BASE); /* 0 when the program is ld.so itself */
	w->first = true;
}

/*
 * Originals that dlsym answered with the executable's canonical PLT entry, corrected.
 * A non-PIE program that takes a function's address in its code gets an entry in its
 * own PLT that stands for the function everywhere (an undefined symbol with a value),
 * and a lookup may return it. A hook calling it would jump through the program's own
 * slot, patched to the hook. The original is then the definition behind it: the first
 * module after the program that defines the name, in dl_iterate_phdr's order (the
 * global scope's: LD_PRELOAD libraries, then dependencies), found through its GNU hash
 * table. Where none is found, the entry stays and the program's own slot is left alone
 * (failed_plt): no hook ever calls itself.
 */
struct resolve {
	const struct walk *w;
	void **cand;	   /* in: dlsym's answers; out: corrected */
	const bool *fresh; /* names without an original yet: the only ones changed */
	bool canonical[GOT_PATCH_MAX_SYMBOLS];
	bool first;
};

static int resolve_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct resolve *r = arg;
	(void)size;
	bool first = r->first;
	r->first = false;
	struct got_image im;
	if ((!first && classify(info, r->w) != MOD_PATCH) ||
	    got_image_parse(info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum, &im) != 0)
		return first; /* an unreadable program: nothing to correct */
	bool pending = false;
	if (first) {
		size_t bad, n = got_image_find_slots(&im, r->w->names, r->w->n, ts->store->found,
						     MAX_MODULE_SLOTS, &bad);
		for (size_t i = 0; i < n && i < MAX_MODULE_SLOTS; i++) {
			const struct got_image_slot *s = &ts->store->found[i];
			if (r->fresh[s->entry] && s->plt && s->plt == (uintptr_t)r->cand[s->entry])
				r->canonical[s->entry] = pending = true;
		}
		return !pending;
	}
	for (size_t e = 0; e < r->w->n; e++) {
		if (!r->canonical[e])
			continue;
		const Elf64_Sym *sym = got_image_lookup(&im, r->w->names[e]);
		if (sym) {
			r->cand[e] = (void *)(im.base + sym->st_value);
			r->canonical[e] = false;
			count(ST_PAST_PLT, 1);
		} else {
			pending = true;
		}
	}
	return !pending;
}

/* Under walk_lock: points ts at the state of table, claiming a free one for a table
 * seen for the first time. -EBUSY when every state belongs to another table. */
static int select_state(const struct got_patch_entry *table)
{
	struct table_state *free_state = NULL;
	for (size_t i = 0; i < GOT_PATCH_MAX_TABLES; i++) {
		if (tables[i].owner == table) {
			ts = &tables[i];
			return 0;
		}
		if (!tables[i].owner && !free_state)
			free_state = &tables[i];
	}
	if (!free_state)
		return -EBUSY;
	free_state->owner = table;
	ts = free_state;
	return 0;
}

/* One walk, under walk_lock. resolved: dlsym's answers, looked up before the lock. */
static int walk_locked(struct got_patch_entry *table, size_t n, void *const *resolved,
		       unsigned long long adds)
{
	if (ts->active && (ts->active != table || ts->active_n != n))
		return -EBUSY;
	if (map_store() != 0)
		return -ENOMEM;
	struct walk w;
	init_walk(&w, table, n);
	w.adds = adds;
	void *cand[GOT_PATCH_MAX_SYMBOLS];
	bool fresh[GOT_PATCH_MAX_SYMBOLS], any = false;
	for (size_t i = 0; i < n; i++) {
		cand[i] = resolved[i];
		fresh[i] = !*table[i].original && resolved[i];
		any |= fresh[i];
	}
	if (any) {
		struct resolve r = {.w = &w, .cand = cand, .fresh = fresh, .first = true};
		dl_iterate_phdr(resolve_cb, &r);
	}
	for (size_t i = 0; i < n; i++) {
		/* Set once, before any slot points at the hook (got_write_slots stores with
		 * release). */
		if (fresh[i])
			*table[i].original = cand[i];
		if (!*table[i].original)
			count(ST_FAIL_SYMBOL, 1);
	}
	dl_iterate_phdr(walk_cb, &w);
	if (w.err || w.busy)
		return w.err ? w.err : -EAGAIN;
	if (w.full)
		sweep();
	ts->active = table;
	ts->active_n = n;
	ts->done_adds = adds;
	ts->done_subs = w.subs;
	ts->done_valid = true;
	count(ST_WALKS, 1);
	return 0;
}

int got_patch_apply(struct got_patch_entry *table, size_t n)
{
	if (!table || n == 0 || n > GOT_PATCH_MAX_SYMBOLS)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!table[i].name || !table[i].name[0] || !table[i].replacement ||
		    !table[i].original)
			return -EINVAL;
	unsigned long long c[2];
	load_counters(c);
	pthread_mutex_lock(walk_lock);
	int rc = select_state(table);
	if (rc == 0 && ts->active && (ts->active != table || ts->active_n != n))
		rc = -EBUSY;
	bool quick = rc == 0 && ts->active && ts->done_valid && c[0] == ts->done_adds &&
		     c[1] == ts->done_subs;
	pthread_mutex_unlock(walk_lock);
	if (rc != 0)
		return rc;
	if (quick) {
		count(ST_QUICK, 1);
		return 0;
	}
	/* dlsym takes the loader's dlopen lock: looked up before walk_lock is taken. A
	 * name found as the replacement itself would make the hook call itself. */
	void *resolved[GOT_PATCH_MAX_SYMBOLS];
	for (size_t i = 0; i < n; i++) {
		resolved[i] = dlsym(RTLD_DEFAULT, table[i].name);
		if (resolved[i] == table[i].replacement)
			resolved[i] = NULL;
	}
	for (int attempt = 0; attempt < BUSY_RETRIES; attempt++) {
		if (attempt > 0) {
			count(ST_BUSY, 1);
			load_counters(c);
		}
		dl_guard_wait_loader(); /* the barrier (see the top) */
		pthread_mutex_lock(walk_lock);
		rc = select_state(table);
		if (rc == 0)
			rc = walk_locked(table, n, resolved, c[0]);
		pthread_mutex_unlock(walk_lock);
		if (rc != -EAGAIN)
			return rc;
	}
	count(ST_BUSY, 1);
	return -EAGAIN;
}

/* ---------------------------------------------------------------- restoring */

static int restore_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct walk *w = arg;
	(void)size;
	if (classify(info, w) != MOD_PATCH)
		return 0;
	struct got_image d;
	if (got_image_read_phdrs(info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum, &d) != 0)
		return 0;
	uint32_t *cell;
	const struct mod_rec *m = mod_find(d.base, d.dynamic, &cell);
	if (!m || m->nslots == 0)
		return 0;
	struct got_write *todo = ts->store->todo_w;
	size_t n = 0;
	for (uint32_t k = 0; k < m->nslots && n < MAX_MODULE_SLOTS; k++) {
		const struct slot_rec *r = &ts->store->slots[m->first + k];
		/* Only a slot that still holds our replacement: the module may be another
		 * one loaded at the same address since. */
		if (got_image_contains(&d, r->addr, sizeof(uintptr_t), PF_R | PF_W) &&
		    load_slot(r->addr) == (uintptr_t)w->table[r->entry].replacement)
			todo[n++] = (struct got_write){.addr = r->addr, .value = r->old};
	}
	w->restored += (uint32_t)write_slots(&d, todo, n);
	return 0;
}

int got_patch_restore(void)
{
	pthread_mutex_lock(walk_lock);
	uint32_t restored = 0;
	for (size_t i = 0; i < GOT_PATCH_MAX_TABLES; i++) {
		ts = &tables[i];
		if (ts->store && ts->active) {
			struct walk w;
			init_walk(&w, (struct got_patch_entry *)ts->active, ts->active_n);
			dl_iterate_phdr(restore_cb, &w);
			restored += w.restored;
		}
		forget_all();
		ts->owner = NULL;
	}
	pthread_mutex_unlock(walk_lock);
	count(ST_SLOTS_RESTORED, restored);
	return (int)restored;
}

/* ---------------------------------------------------------------- stats, fork */

void got_patch_get_stats(struct got_patch_stats *out)
{
#define GET(i) atomic_load_explicit(&stats[i], memory_order_relaxed)
	*out = (struct got_patch_stats){
	    .walks = GET(ST_WALKS),
	    .quick = GET(ST_QUICK),
	    .busy_retries = GET(ST_BUSY),
	    .modules_patched = GET(ST_MODULES_PATCHED),
	    .modules_unchanged = GET(ST_MODULES_UNCHANGED),
	    .slots_patched = GET(ST_SLOTS_PATCHED),
	    .slots_already = GET(ST_SLOTS_ALREADY),
	    .slots_foreign = GET(ST_SLOTS_FOREIGN),
	    .slots_restored = GET(ST_SLOTS_RESTORED),
	    .originals_past_plt = GET(ST_PAST_PLT),
	    .skipped_self = GET(ST_SKIP_SELF),
	    .skipped_vdso = GET(ST_SKIP_VDSO),
	    .skipped_loader = GET(ST_SKIP_LOADER),
	    .skipped_no_dynamic = GET(ST_SKIP_NO_DYNAMIC),
	    .failed_dynamic = GET(ST_FAIL_DYNAMIC),
	    .failed_reloc = GET(ST_FAIL_RELOC),
	    .failed_symbol = GET(ST_FAIL_SYMBOL),
	    .failed_plt = GET(ST_FAIL_PLT),
	    .failed_mprotect = GET(ST_FAIL_MPROTECT),
	    .failed_full = GET(ST_FAIL_FULL),
	};
#undef GET
}

int got_patch_exclude(uintptr_t base, void (*under_lock)(void *), void *arg)
{
	int rc = -ENOSPC;
	pthread_mutex_lock(walk_lock);
	for (size_t i = 0; i < MAX_EXCLUDED && rc != 0; i++)
		if (!excluded[i] || excluded[i] == base) {
			excluded[i] = base;
			rc = 0;
		}
	if (rc == 0)
		under_lock(arg);
	pthread_mutex_unlock(walk_lock);
	return rc;
}

void got_patch_include(uintptr_t base)
{
	pthread_mutex_lock(walk_lock);
	for (size_t i = 0; i < MAX_EXCLUDED; i++)
		if (excluded[i] == base)
			excluded[i] = 0;
	pthread_mutex_unlock(walk_lock);
}

void got_patch_place(pthread_mutex_t *mem)
{
	if (!mem)
		return;
	pthread_mutex_init(mem, NULL);
	walk_lock = mem;
}

void got_patch_atfork_prepare(void)
{
	pthread_mutex_lock(walk_lock);
}

void got_patch_atfork_parent(void)
{
	pthread_mutex_unlock(walk_lock);
}

FORK_CHILD_PATH void got_patch_atfork_child(void)
{
	/* Held by this thread (prepare). A placed lock is found zero-filled, that is
	 * unlocked, and left untouched: each page a fork child touches costs it a fault. */
	if (walk_lock == &fallback_lock)
		pthread_mutex_init(walk_lock, NULL);
}
