/*
 * sym_elf.h - what libelf tells about one module file: load segments, build id, entry
 * point, and (when libdw is not available, or for the vdso) its function symbols.
 *
 * Owns: reading ELF headers, program headers, the GNU build-id note and the .symtab and
 * .dynsym sections of a file, with libelf (linked: small, and robust against malformed
 * files). Every read is checked; a file that is not ELF, truncated or hostile gives
 * -EINVAL or fewer facts, never a crash.
 * Context: uploader thread only (and unit tests); never a signal handler.
 */
#ifndef DDPROF_AGENT_SYM_ELF_H
#define DDPROF_AGENT_SYM_ELF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/symbolize/sym_table.h"

#define SYM_ELF_MAX_LOADS 16	/* PT_LOAD segments kept per module; real modules have 2-5 */
#define SYM_ELF_BUILD_ID_MAX 64 /* bytes of build id kept (GNU build ids are 20) */

struct sym_elf_load {
	uint64_t offset, vaddr, filesz;
};

struct sym_elf_info {
	struct sym_elf_load loads[SYM_ELF_MAX_LOADS];
	size_t nloads;
	char build_id[2 * SYM_ELF_BUILD_ID_MAX + 1]; /* lowercase hex, "" when none */
	uint64_t entry;				     /* e_entry */
	bool is_program; /* ET_EXEC, or has PT_INTERP (a PIE program): e_entry is _start */
};

/* Fills *out (zeroed first) from the file at path. 0, -errno of open, or -EINVAL (not
 * ELF, unreadable program headers, no PT_LOAD; what could be read is kept). */
int sym_elf_read_info(const char *path, struct sym_elf_info *out);

/* Adds the function symbols of the file's .symtab and .dynsym to t (not finished).
 * 0, -errno of open, -EINVAL, or -ENOMEM. */
int sym_elf_read_symbols(const char *path, struct sym_table *t);

/* The same for an image mapped in this process (the vdso, which has no file): every
 * read stays inside image[0..size). */
int sym_elf_read_info_mem(const void *image, size_t size, struct sym_elf_info *out);
int sym_elf_read_symbols_mem(const void *image, size_t size, struct sym_table *t);

/*
 * A module file's function symbols searched in place, for a few lookups: no table is
 * built (a short process naming its few pcs would otherwise read and sort every symbol
 * of each module it touched: cc1's 29k exported ones). The file stays mapped until
 * sym_elf_scan_close. Each lookup reads every symbol: for a handful of pcs only.
 */
struct sym_elf_scan;
/* 0, -errno of open, -EINVAL, -ENOMEM. */
int sym_elf_scan_open(const char *path, struct sym_elf_scan **out);
/* What sym_table_find would give for vaddr in a table of this file's symbols (the
 * symbol at the greatest address at or below vaddr, its preferred alias; NULL when it
 * is sized and vaddr lies past it): its name without version suffix, written to
 * out[0..len) (cut to fit), and *size. false when there is none. */
bool sym_elf_scan_find(const struct sym_elf_scan *sc, uint64_t vaddr, char *out, size_t len,
		       uint64_t *size);
/* One address's answer from sym_elf_scan_find_many: the name (in the file's mapping,
 * len bytes, no version suffix, not NUL-terminated) and size of its symbol, name NULL
 * when there is none. */
struct sym_elf_hit {
	const char *name;
	size_t len;
	uint64_t size;
};
/* sym_elf_scan_find for each of v[0..n) (ascending, no duplicates) in one pass over the
 * symbols: hits[i] for v[i]. */
void sym_elf_scan_find_many(const struct sym_elf_scan *sc, const uint64_t *v, size_t n,
			    struct sym_elf_hit *hits);
void sym_elf_scan_close(struct sym_elf_scan *sc);

#endif
