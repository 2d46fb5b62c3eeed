/*
 * sym_short.c - naming a short process's only profile (names only: upload_cycle.c) at
 * the least cost: no libdw, and for a module's first SCAN_LOOKUPS_MAX addresses no
 * symbol table built, its file's symbols searched in place instead (sym_elf.h), all of
 * a profile's addresses of one module in one pass (symbolizer_prime).
 * Context: uploader thread only (as the symbolizer).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/symbolize/symbolizer_internal.h"
#include "common/clock.h"
#include "common/sort.h"

/* The module's debug file by build id (Debian's debug packages), when it has one. */
static bool debug_path(const struct module *m, char *out, size_t len)
{
	if (!m->elf.build_id[0])
		return false;
	int n = snprintf(out, len, "/usr/lib/debug/.build-id/%.2s/%s.debug", m->elf.build_id,
			 m->elf.build_id + 2);
	return n > 0 && (size_t)n < len && access(out, R_OK) == 0;
}

/* A short process's only profile (names only: upload_cycle.c): the module's functions
 * from its debug file found by build id (its .symtab holds the static functions a
 * stripped library's .dynsym lacks), else from the file itself, read by libelf. Not
 * libdw: loading it and opening its sessions cost such an exit more than its samples
 * are worth (cc1 running 19 ms: 10 ms to name its one sample). 0, or a negative errno
 * (then libdw is asked). */
int sym_short_symbols(struct module *m)
{
	char dbg[PATH_MAX];
	int rc = debug_path(m, dbg, sizeof(dbg)) ? sym_elf_read_symbols(dbg, &m->syms) : -ENOENT;
	if (rc < 0) {
		sym_table_free(&m->syms);
		rc = sym_elf_read_symbols(m->path, &m->syms);
	}
	if (rc < 0)
		sym_table_free(&m->syms);
	return rc;
}

/* Names only, a module's first SCAN_LOOKUPS_MAX lookups: the name sym_table_find would
 * give, searched in the file in place (sym_elf.h) instead of a table built from every
 * symbol. Returns whether it answered (into fr[0], its name in buf). */
static bool scan_open(struct module *m)
{
	if (m->image || m->symbols_read || m->scan_failed || m->scan_lookups >= SCAN_LOOKUPS_MAX)
		return false;
	if (!m->scan) {
		char dbg[PATH_MAX];
		if (!debug_path(m, dbg, sizeof(dbg)) || sym_elf_scan_open(dbg, &m->scan) < 0)
			m->scan = NULL;
		if (!m->scan && sym_elf_scan_open(m->path, &m->scan) < 0) {
			m->scan = NULL;
			m->scan_failed = true;
			return false;
		}
	}
	return true;
}

bool sym_short_scan(struct module *m, uint64_t vaddr, struct sym_frame *fr, char *buf, size_t len)
{
	if (!scan_open(m))
		return false;
	m->scan_lookups++;
	uint64_t size = 0;
	const char *name = NULL;
	if (sym_elf_scan_find(m->scan, vaddr, buf, len, &size))
		name = buf;
	/* outer_name's rules, without DWARF. */
	if ((!name || size == 0) && m->elf.is_program && vaddr - m->elf.entry < ENTRY_CODE_MAX)
		name = START_NAME;
	fr[0] = (struct sym_frame){name, NULL, 0};
	return true;
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
	if (n < 2 || !scan_open(m))
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
		symbolizer_store(s, m, v[i], &one, 1, &fr);
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
