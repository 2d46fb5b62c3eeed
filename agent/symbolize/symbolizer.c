/*
 * symbolizer.c - mappings, modules and the pc -> frames path (see symbolizer.h).
 *
 * Context: uploader thread only. The parts live in their own modules: sym_elf (libelf:
 * segments, build id, entry, fallback symbols), sym_table (sorted symbols), sym_dwarf
 * (libdwfl sessions: debug-file symbols, inlined frames, lines), sym_cache (pc ->
 * frames), sym_demangle (C++), dw_api (the dlopen'd libdw). This file ties them:
 *
 *   pc -> mapping (binary search) -> module + file virtual address
 *      -> module cache hit: done
 *      -> miss: DWARF frames (if libdw) + symbol-table name of the function holding the
 *         code + the _start rule + demangling -> cached, even when nothing was found.
 *
 * Address translation: a mapping at `start` shows file offset `offset`; the PT_LOAD
 * segment holding that offset maps file offset p_offset to vaddr p_vaddr, so
 *     vaddr(pc) = pc - start + offset - p_offset + p_vaddr.
 *
 * Naming the function that holds the code (the last frame): the symbol table first
 * (the linker's name, which perf, nm and symbol servers show; one per address, see
 * sym_table.h), else DWARF's subprogram, else the entry rule. Inlined frames can only
 * come from DWARF. A frame list is either all named or empty: a pc nothing names keeps
 * only its mapping and address in the profile (pprof consumers show module+offset and
 * can symbolize it later from the build id).
 *
 * The entry rule: in a program (ET_EXEC, or PIE with PT_INTERP), an address in
 * [e_entry, e_entry + ENTRY_CODE_MAX) that no sized symbol and no DWARF subprogram
 * covers is "_start". Stripped programs keep no symbol for their entry code, yet every
 * main-thread stack ends there (the return address of its call to __libc_start_main).
 * glibc's x86-64 crt1 _start is 34 bytes; the window is a little larger for other
 * crt1 variants, and reaches into the next function only when that one is unnamed too.
 *
 * The vdso has no file: its module is read from the image mapped in this process.
 *
 * JIT code: a pc in no module file (anonymous executable memory, or memory no longer
 * executable or mapped at all by the time of the upload) is named from the process's
 * perf map, /tmp/perf-<pid>.map (agent/symbolize/perf_map.h: read again at each refresh,
 * only what was appended), one frame, no file or line. An anonymous executable mapping
 * that the map covers in part is shown as "[jit]" (others keep "[anon]").
 */
#include "agent/symbolize/symbolizer.h"
#include "agent/symbolize/symbolizer_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "agent/symbolize/dw_api.h"
#include "agent/symbolize/perf_map.h"
#include "agent/symbolize/sym_cache.h"
#include "agent/symbolize/sym_demangle.h"
#include "agent/symbolize/sym_dwarf.h"
#include "agent/symbolize/sym_elf.h"
#include "agent/symbolize/sym_table.h"
#include "common/big_alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sort.h"

struct symbolizer *symbolizer_new(void)
{
	struct symbolizer *s = calloc(1, sizeof(*s));
	if (s)
		s->cache_limit = SYM_CACHE_DEFAULT_LIMIT;
	return s;
}

static void module_free(struct module *m)
{
	sym_dwarf_close(m->dw);
	sym_table_free(&m->syms);
	sym_elf_scan_close(m->scan);
	sym_cache_free(&m->cache);
	free(m->path);
	free(m);
}

void symbolizer_free(struct symbolizer *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nmods; i++)
		module_free(s->mods[i]);
	for (size_t i = 0; i < s->nmaps; i++)
		free(s->maps[i].pending_path);
	big_free(s->mods);
	big_free(s->maps);
	perf_map_free(s->jit);
	free(s);
}

static struct module *module_find(const struct symbolizer *s, const char *path, unsigned long inode,
				  const void *image)
{
	for (size_t i = 0; i < s->nmods; i++)
		if (s->mods[i]->inode == inode && s->mods[i]->image == image &&
		    strcmp(s->mods[i]->path, path) == 0)
			return s->mods[i];
	return NULL;
}

/* The module of a file (image NULL) or of an image in memory, created on first use. */
static struct module *module_get(struct symbolizer *s, const char *path, unsigned long inode,
				 const void *image, size_t image_size)
{
	struct module *found = module_find(s, path, inode, image);
	if (found)
		return found;
	if (s->nmods == s->capmods) {
		size_t nc = s->capmods ? s->capmods * 2 : 32;
		struct module **nm = big_realloc(s->mods, nc * sizeof(*nm));
		if (!nm)
			return NULL;
		s->mods = nm;
		s->capmods = nc;
	}
	struct module *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->path = strdup(path);
	if (!m->path) {
		free(m);
		return NULL;
	}
	m->inode = inode;
	m->image = image;
	m->image_size = image_size;
	m->debug_info = -1;
	sym_table_init(&m->syms);
	sym_cache_init(&m->cache);
	/* Segments and build id now (every mapping needs them); symbols and DWARF only
	 * when a pc of the module is first symbolized. */
	int rc = image ? sym_elf_read_info_mem(image, image_size, &m->elf)
		       : sym_elf_read_info(path, &m->elf);
	if (rc < 0) {
		log_debug("%s: cannot read ELF headers: %s", path, strerror(-rc));
		s->st.errors++;
	}
	s->mods[s->nmods++] = m;
	return m;
}

static void mapping_translate(struct mapping_entry *me)
{
	const struct module *m = me->mod;
	for (size_t i = 0; m && i < m->elf.nloads; i++) {
		const struct sym_elf_load *l = &m->elf.loads[i];
		/* The mapping's offset is page-aligned, the segment's need not be. */
		uint64_t seg_page = l->offset & ~(uint64_t)0xfff;
		if (me->pub.offset >= seg_page && me->pub.offset < l->offset + l->filesz) {
			me->vaddr_delta = (int64_t)me->pub.offset - (int64_t)me->pub.start -
					  (int64_t)l->offset + (int64_t)l->vaddr;
			me->delta_known = true;
			return;
		}
	}
}

static void mapping_fill(struct mapping_entry *me, struct module *mod, const char *anon_name)
{
	me->mod = mod;
	if (mod) {
		me->pub.path = mod->path;
		me->pub.build_id = mod->elf.build_id;
		mapping_translate(me);
	} else {
		me->pub.path = anon_name;
		me->pub.build_id = "";
	}
}

/* Room for one more mapping; false on allocation failure. */
static bool maps_reserve(struct symbolizer *s)
{
	if (s->nmaps < s->capmaps)
		return true;
	size_t nc = s->capmaps ? s->capmaps * 2 : 64;
	struct mapping_entry *nm = big_realloc(s->maps, nc * sizeof(*nm));
	if (!nm)
		return false;
	s->maps = nm;
	s->capmaps = nc;
	return true;
}

static size_t caches_bytes(const struct symbolizer *s)
{
	size_t b = 0;
	for (size_t i = 0; i < s->nmods; i++)
		b += sym_cache_bytes(&s->mods[i]->cache);
	return b;
}

/* The memory rules of symbolizer.h, applied once per refresh after the maps are read:
 * nothing handed out before the refresh is referenced any more. */
static void apply_budget(struct symbolizer *s)
{
	if (caches_bytes(s) > s->cache_limit) {
		for (size_t i = 0; i < s->nmods; i++)
			sym_cache_clear(&s->mods[i]->cache);
		s->st.cache_flushes++;
	}
	size_t w = 0;
	for (size_t i = 0; i < s->nmods; i++) {
		struct module *m = s->mods[i];
		if (m->dw && m->dw_used_gen + DWFL_IDLE_REFRESHES <= s->gen) {
			sym_dwarf_close(m->dw);
			m->dw = NULL;
			s->st.dwfl_sessions_ended++;
		}
		if (m->seen_gen + MODULE_IDLE_REFRESHES <= s->gen)
			module_free(m); /* not mapped now: no mapping entry points at it */
		else
			s->mods[w++] = m;
	}
	s->nmods = w;
}

void symbolizer_set_names_only(struct symbolizer *s, bool on)
{
	s->names_only = on;
}

void symbolizer_release_dwarf(struct symbolizer *s)
{
	for (size_t i = 0; s && i < s->nmods; i++) {
		struct module *m = s->mods[i];
		if (m->dw) {
			sym_dwarf_close(m->dw);
			m->dw = NULL;
			s->st.dwfl_sessions_ended++;
		}
	}
	/* No session left: libdw and its libraries go too (dw_api.h); the next miss
	 * loads them again. */
	if (s && s->api && dw_api_unload()) {
		s->api = NULL;
		s->api_tried = false;
	}
}

/* Reads what is new in the perf map (this pid's: a fork child's own) and names the
 * anonymous executable mappings it covers "[jit]". */
static void refresh_jit(struct symbolizer *s)
{
	if (!s->jit)
		s->jit = perf_map_new();
	if (!s->jit || perf_map_refresh(s->jit) <= 0)
		return;
	for (size_t i = 0; i < s->nmaps; i++) {
		struct mapping_entry *me = &s->maps[i];
		if (!me->mod && !me->pending_path &&
		    perf_map_overlaps(s->jit, me->pub.start, me->pub.end))
			me->pub.path = JIT_NAME;
	}
}

void symbolizer_refresh_jit(struct symbolizer *s)
{
	if (!s->jit)
		s->jit = perf_map_new();
	if (s->jit)
		perf_map_refresh(s->jit);
}

int symbolizer_refresh(struct symbolizer *s)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -errno;
	s->gen++;
	for (size_t i = 0; i < s->nmaps; i++) {
		free(s->maps[i].pending_path);
		s->maps[i].pending_path = NULL;
	}
	s->nmaps = 0;
	char line[MAPS_LINE_MAX];
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, offset, inode;
		char perms[5];
		int path_at = 0;
		if (sscanf(line, "%lx-%lx %4s %lx %*s %lu %n", &start, &end, perms, &offset, &inode,
			   &path_at) < 5)
			continue;
		if (perms[2] != 'x' || !maps_reserve(s))
			continue;
		char *path = line + path_at;
		path[strcspn(path, "\n")] = 0;
		struct mapping_entry *me = &s->maps[s->nmaps++];
		memset(me, 0, sizeof(*me));
		me->pub.start = start;
		me->pub.end = end;
		me->pub.offset = offset;
		bool vdso = strcmp(path, VDSO_NAME) == 0;
		struct module *mod = NULL;
		if (path[0] == '/') {
			mod = module_find(s, path, inode, NULL);
			if (!mod) {
				me->pending_path = strdup(path);
				me->pending_inode = inode;
				if (!me->pending_path) /* no memory: read it now */
					mod = module_get(s, path, inode, NULL, 0);
			}
		} else if (vdso) { /* an ELF image the kernel maps whole: named from memory */
			mod = module_get(s, path, 0, (const void *)start, end - start);
		}
		if (mod)
			mod->seen_gen = s->gen;
		if (me->pending_path) {
			me->pub.path = me->pending_path;
			me->pub.build_id = "";
			continue;
		}
		/* Anonymous executable memory (JIT...): named below when the perf map covers it. */
		mapping_fill(me, mod, ANON_NAME);
	}
	fclose(f);
	refresh_jit(s);
	apply_budget(s);
	return (int)s->nmaps;
}

int symbolizer_note_module(struct symbolizer *s, const char *path, uintptr_t start, uintptr_t end,
			   uintptr_t file_offset)
{
	if (!path || path[0] != '/' || start >= end)
		return -EINVAL;
	size_t at = 0, hi = s->nmaps; /* first mapping ending after start */
	while (at < hi) {
		size_t mid = at + (hi - at) / 2;
		if (s->maps[mid].pub.end <= start)
			at = mid + 1;
		else
			hi = mid;
	}
	if (at < s->nmaps && s->maps[at].pub.start < end) {
		const struct mapping_entry *o = &s->maps[at];
		bool same = o->pub.start == start && o->pub.end == end &&
			    o->pub.offset == file_offset && strcmp(o->pub.path, path) == 0;
		return same ? (int)at : -EEXIST;
	}
	struct stat sb;
	unsigned long inode = stat(path, &sb) == 0 ? (unsigned long)sb.st_ino : 0;
	struct module *mod = module_get(s, path, inode, NULL, 0);
	if (!mod || !maps_reserve(s))
		return -ENOMEM;
	mod->seen_gen = s->gen;
	memmove(&s->maps[at + 1], &s->maps[at], (s->nmaps - at) * sizeof(s->maps[0]));
	s->nmaps++;
	struct mapping_entry *me = &s->maps[at];
	memset(me, 0, sizeof(*me));
	me->pub.start = start;
	me->pub.end = end;
	me->pub.offset = file_offset;
	mapping_fill(me, mod, NULL);
	return (int)at;
}

/* The module of a mapping seen but not read yet (symbolizer_refresh). */
static void mapping_resolve(struct symbolizer *s, struct mapping_entry *me)
{
	struct module *mod = module_get(s, me->pending_path, me->pending_inode, NULL, 0);
	if (!mod)
		return; /* no memory: tried again at the next pc */
	mod->seen_gen = s->gen;
	mapping_fill(me, mod, NULL);
	free(me->pending_path);
	me->pending_path = NULL;
}

int symbolizer_find_mapping(struct symbolizer *s, uintptr_t pc)
{
	size_t lo = 0, hi = s->nmaps;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (pc < s->maps[mid].pub.start) {
			hi = mid;
		} else if (pc >= s->maps[mid].pub.end) {
			lo = mid + 1;
		} else {
			if (s->maps[mid].pending_path)
				mapping_resolve(s, &s->maps[mid]);
			return (int)mid;
		}
	}
	return -1;
}

const struct sym_mapping *symbolizer_mapping(const struct symbolizer *s, int idx)
{
	return &s->maps[idx].pub;
}

size_t symbolizer_mapping_count(const struct symbolizer *s)
{
	return s->nmaps;
}

int symbolizer_mapping_debug_info(const struct symbolizer *s, int idx)
{
	const struct module *m = s->maps[idx].mod;
	return m ? m->debug_info : 0;
}

static const struct dw_api *api_get(struct symbolizer *s)
{
	if (!s->api_tried) {
		s->api_tried = true;
		s->api = dw_api_get();
		s->st.libdw = s->api != NULL;
	}
	return s->api;
}

/* Opens (or reopens after idling) the module's libdwfl session; NULL without libdw or
 * when libdwfl cannot read the file. */
static struct sym_dwarf *module_dwarf(struct symbolizer *s, struct module *m)
{
	const struct dw_api *api = api_get(s);
	if (!api || m->dw_failed || m->image)
		return NULL;
	if (!m->dw) {
		m->dw = sym_dwarf_open(api, m->path);
		if (!m->dw) {
			m->dw_failed = true;
			s->st.errors++;
			return NULL;
		}
	}
	m->dw_used_gen = s->gen;
	return m->dw;
}

/* Builds the module's symbol table once: libdwfl's view (debug file included), else
 * libelf's. */
static void module_symbols(struct symbolizer *s, struct module *m)
{
	if (m->symbols_read)
		return;
	m->symbols_read = true;
	s->st.tables_read++;
	if (s->names_only && !m->image && sym_short_symbols(m) == 0) {
		sym_table_finish(&m->syms);
		return;
	}
	struct sym_dwarf *dw = module_dwarf(s, m);
	int rc = dw ? sym_dwarf_read_symbols(dw, &m->syms) : -ENOENT;
	if (rc < 0 && dw)
		s->st.errors++; /* every module has at least .dynsym: the file is damaged */
	if (rc < 0) {
		sym_table_free(&m->syms);
		rc = m->image ? sym_elf_read_symbols_mem(m->image, m->image_size, &m->syms)
			      : sym_elf_read_symbols(m->path, &m->syms);
	}
	if (rc < 0) {
		log_debug("%s: no symbols: %s", m->path, strerror(-rc));
		s->st.errors++;
	}
	sym_table_finish(&m->syms);
}

/* The name of the function holding the code at vaddr, by the rules at the top. */
static const char *outer_name(const struct module *m, uint64_t vaddr, const char *dwarf_name)
{
	const struct sym_entry *e = sym_table_find(&m->syms, vaddr);
	if (e && e->size != 0)
		return sym_table_name(&m->syms, e);
	if (dwarf_name)
		return dwarf_name;
	/* Unsigned: addresses below the entry wrap far out of the window. */
	if (m->elf.is_program && vaddr - m->elf.entry < ENTRY_CODE_MAX)
		return START_NAME;
	return e ? sym_table_name(&m->syms, e) : NULL; /* sizeless: the nearest label */
}

/* Caches the frames found for vaddr in m (demangled; all named or nothing) and returns
 * how many are stored. */
static size_t store(struct symbolizer *s, struct module *m, uint64_t vaddr, struct sym_frame *fr,
		    size_t n, const struct sym_frame **stored);

/* Resolves vaddr in m (a cache miss) and caches the result, named or not. */
static size_t resolve(struct symbolizer *s, struct module *m, uint64_t vaddr,
		      const struct sym_frame **stored)
{
	struct sym_frame fr[SYM_MAX_FRAMES];
	size_t n = 0;
	char scanned[SCAN_NAME_MAX];
	bool scan = s->names_only && sym_short_scan(m, vaddr, fr, scanned, sizeof(scanned));
	if (!scan)
		module_symbols(s, m);
	struct sym_dwarf *dw = s->names_only ? NULL : module_dwarf(s, m);
	if (scan) {
		n = 1;
		m->debug_info = 0;
		s->st.elf_lookups++;
	} else if (dw) {
		bool err = false;
		n = sym_dwarf_frames(dw, vaddr, fr, SYM_MAX_FRAMES, &err);
		m->debug_info = sym_dwarf_has_debug_info(dw);
		s->st.errors += err;
		s->st.dwarf_lookups++;
	} else {
		m->debug_info = 0;
		s->st.elf_lookups++;
	}
	if (n == 0)
		fr[n++] = (struct sym_frame){NULL, NULL, 0};
	if (!scan)
		fr[n - 1].function = outer_name(m, vaddr, fr[n - 1].function);
	return store(s, m, vaddr, fr, n, stored);
}

/* Caches the frames found for vaddr (demangled; all named or nothing) and returns how
 * many are stored. */
static size_t store(struct symbolizer *s, struct module *m, uint64_t vaddr, struct sym_frame *fr,
		    size_t n, const struct sym_frame **stored)
{
	/* All named or nothing (see the top of the file). */
	for (size_t i = 0; i < n; i++)
		if (!fr[i].function)
			n = 0;
	char *demangled[SYM_MAX_FRAMES] = {0};
	for (size_t i = 0; i < n; i++)
		if ((demangled[i] = sym_demangle(fr[i].function)) != NULL)
			fr[i].function = demangled[i];
	int rc = sym_cache_put(&m->cache, vaddr, fr, n, stored);
	for (size_t i = 0; i < n; i++)
		free(demangled[i]);
	if (rc < 0) {
		s->st.errors++;
		return 0;
	}
	return n;
}

/* A pc in no module file: its name in the perf map, one frame, or nothing. */
static size_t jit_frames(struct symbolizer *s, uintptr_t pc, bool is_return_address,
			 struct sym_frame *out, size_t max)
{
	const char *name = s->jit && max > 0 ? perf_map_find(s->jit, pc - is_return_address) : NULL;
	if (!name)
		return 0;
	out[0] = (struct sym_frame){name, NULL, 0};
	s->st.jit_frames++;
	return 1;
}

uint32_t symbolizer_jit_epoch(const struct symbolizer *s)
{
	return s->jit ? perf_map_epoch(s->jit) : 0;
}

bool symbolizer_jit_renamed(const struct symbolizer *s, uintptr_t pc, bool is_return_address,
			    uint32_t epoch)
{
	return s->jit && perf_map_renamed_since(s->jit, pc - is_return_address, epoch);
}

size_t symbolizer_jit_frames_at(struct symbolizer *s, uintptr_t pc, bool is_return_address,
				uint32_t epoch, struct sym_frame *out, size_t max)
{
	const char *name =
	    s->jit && max > 0 ? perf_map_find_at(s->jit, pc - is_return_address, epoch) : NULL;
	if (!name)
		return 0;
	out[0] = (struct sym_frame){name, NULL, 0};
	s->st.jit_frames++;
	return 1;
}

void symbolizer_jit_last_span(const struct symbolizer *s, uint64_t *lo, uint64_t *hi)
{
	*lo = *hi = 0;
	if (s->jit)
		perf_map_last_span(s->jit, lo, hi);
}

void symbolizer_jit_prune(struct symbolizer *s, uint32_t epoch)
{
	if (s->jit)
		perf_map_prune(s->jit, epoch);
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Names only: one module's uncached addresses, named in one pass over its symbols. */
static void prime_module(struct symbolizer *s, struct module *m, uint64_t *v, size_t n)
{
	sort_inplace(v, n, sizeof(*v), u64_cmp);
	size_t w = 0;
	for (size_t i = 0; i < n; i++)
		if (w == 0 || v[w - 1] != v[i])
			v[w++] = v[i];
	n = w;
	char buf[SCAN_NAME_MAX];
	if (n < 2 || !sym_short_open(m))
		return;
	struct sym_elf_hit *hits = calloc(n, sizeof(*hits));
	if (!hits)
		return;
	sym_elf_scan_find_many(m->scan, v, n, hits);
	uint64_t cpu0 = clock_now_ns(CLOCK_THREAD_CPUTIME_ID);
	for (size_t i = 0; i < n; i++) {
		const struct sym_frame *fr;
		size_t k;
		if (sym_cache_get(&m->cache, v[i], &fr, &k))
			continue;
		const char *name = NULL;
		if (hits[i].name) {
			size_t len = hits[i].len < sizeof(buf) - 1 ? hits[i].len : sizeof(buf) - 1;
			memcpy(buf, hits[i].name, len);
			buf[len] = 0;
			name = buf;
		}
		if ((!name || hits[i].size == 0) && m->elf.is_program &&
		    v[i] - m->elf.entry < ENTRY_CODE_MAX)
			name = START_NAME;
		struct sym_frame one = {name, NULL, 0};
		store(s, m, v[i], &one, 1, &fr);
		s->st.elf_lookups++;
	}
	s->st.resolve_cpu_ns += clock_now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	free(hits);
}

bool symbolizer_names_only(const struct symbolizer *s)
{
	return s->names_only;
}

void symbolizer_prime(struct symbolizer *s, const uintptr_t *pcs, const bool *is_return, size_t n)
{
	if (!s->names_only || n == 0)
		return;
	/* Per module: its file virtual addresses not cached yet. */
	uint64_t *v = malloc(n * sizeof(*v));
	struct module **of = malloc(n * sizeof(*of));
	if (!v || !of) {
		free(v);
		free(of);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		int idx = symbolizer_find_mapping(s, pcs[i]);
		of[i] = NULL;
		if (idx < 0 || !s->maps[idx].mod || !s->maps[idx].delta_known)
			continue;
		of[i] = s->maps[idx].mod;
		v[i] =
		    (uint64_t)((int64_t)pcs[i] + s->maps[idx].vaddr_delta) - (is_return[i] ? 1 : 0);
	}
	uint64_t *mine = malloc(n * sizeof(*mine));
	for (size_t i = 0; mine && i < n; i++) {
		struct module *m = of[i];
		if (!m)
			continue;
		size_t k = 0;
		for (size_t j = i; j < n; j++)
			if (of[j] == m) {
				mine[k++] = v[j];
				of[j] = NULL;
			}
		prime_module(s, m, mine, k);
	}
	free(mine);
	free(v);
	free(of);
}

size_t symbolizer_frames(struct symbolizer *s, uintptr_t pc, bool is_return_address,
			 struct sym_frame *out, size_t max)
{
	int idx = symbolizer_find_mapping(s, pc);
	if (idx < 0 || !s->maps[idx].mod)
		return jit_frames(s, pc, is_return_address, out, max);
	const struct mapping_entry *me = &s->maps[idx];
	struct module *m = me->mod;
	if (!me->delta_known)
		return 0;
	uint64_t vaddr = (uint64_t)((int64_t)pc + me->vaddr_delta) - (is_return_address ? 1 : 0);
	s->st.lookups++;
	const struct sym_frame *fr;
	size_t n;
	if (sym_cache_get(&m->cache, vaddr, &fr, &n)) {
		s->st.cache_hits++;
	} else {
		uint64_t cpu0 = clock_now_ns(CLOCK_THREAD_CPUTIME_ID);
		uint64_t wall0 = clock_now_ns(CLOCK_MONOTONIC);
		n = resolve(s, m, vaddr, &fr);
		s->st.resolve_cpu_ns += clock_now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
		s->st.resolve_wall_ns += clock_now_ns(CLOCK_MONOTONIC) - wall0;
	}
	if (n > max) { /* keep the innermost and the function holding the code */
		if (max == 0)
			return 0;
		memcpy(out, fr, (max - 1) * sizeof(*out));
		out[max - 1] = fr[n - 1];
		return max;
	}
	if (n)
		memcpy(out, fr, n * sizeof(*out));
	return n;
}

int symbolizer_warm(struct symbolizer *s, uintptr_t pc)
{
	int idx = symbolizer_find_mapping(s, pc);
	struct module *m = idx < 0 ? NULL : s->maps[idx].mod;
	if (!m)
		return -ENOENT;
	bool read_before = m->symbols_read;
	module_symbols(s, m);
	return read_before ? 0 : 1;
}

const char *symbolizer_function(struct symbolizer *s, uintptr_t pc, bool is_return_address)
{
	struct sym_frame fr[SYM_MAX_FRAMES];
	size_t n = symbolizer_frames(s, pc, is_return_address, fr, SYM_MAX_FRAMES);
	return n ? fr[n - 1].function : NULL;
}

void symbolizer_set_cache_limit(struct symbolizer *s, size_t bytes)
{
	s->cache_limit = bytes;
}

void symbolizer_get_stats(const struct symbolizer *s, struct symbolizer_stats *out)
{
	*out = s->st;
	out->cache_entries = 0;
	for (size_t i = 0; i < s->nmods; i++)
		out->cache_entries += sym_cache_entries(&s->mods[i]->cache);
	out->cache_bytes = caches_bytes(s);
}

size_t symbolizer_module_count(const struct symbolizer *s)
{
	return s->nmods;
}

size_t symbolizer_bytes(const struct symbolizer *s)
{
	size_t b = sizeof(*s) + s->capmods * sizeof(s->mods[0]) + s->capmaps * sizeof(s->maps[0]) +
		   (s->jit ? perf_map_bytes(s->jit) : 0);
	for (size_t i = 0; i < s->nmods; i++) {
		const struct module *m = s->mods[i];
		b += sizeof(*m) + strlen(m->path) + 1 + sym_table_bytes(&m->syms) +
		     sym_cache_bytes(&m->cache);
	}
	return b;
}
