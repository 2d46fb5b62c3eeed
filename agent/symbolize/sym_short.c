/*
 * sym_short.c - naming a short process's only profile (names only: upload_cycle.c) at
 * the least cost: no libdw, and for a module's first SCAN_LOOKUPS_MAX addresses no
 * symbol table built, its file's symbols searched in place instead (sym_elf.h); the
 * symbolizer names all of a profile's addresses of one module in one pass
 * (symbolizer_prime).
 * Context: uploader thread only (as the symbolizer).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/symbolize/symbolizer_internal.h"

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
bool sym_short_open(struct module *m)
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
	if (!sym_short_open(m))
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
