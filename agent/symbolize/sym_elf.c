/*
 * sym_elf.c - ELF facts and symbol tables of a module file (see sym_elf.h).
 *
 * Context: uploader thread. The headers come through elf_image.c, which checks every
 * table against the file's bytes; what is read from section data here (notes,
 * symbols, their names) is checked against that section's size.
 * No libelf: the module thread's elf_image.c already reads these headers, and a
 * process that never loads libdw then never maps libelf either.
 */
#include "agent/symbolize/sym_elf.h"

#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/unwind/elf_image.h"
#include "common/mem_populate.h"

#define NT_GNU_BUILD_ID_TYPE 3
#define GNU_NOTE_NAME "GNU"
#define GNU_NOTE_NAMESZ 4 /* "GNU" and its NUL */

#define NOTE_ALIGN(x) (((x) + 3) & ~(size_t)3)

static void read_build_id(const struct elf_image *im, struct sym_elf_info *out)
{
	size_t n = elf_image_nsections(im);
	for (size_t i = 1; i < n; i++) {
		struct elf_section sec;
		if (!elf_image_section_at(im, i, &sec) || sec.type != SHT_NOTE)
			continue;
		size_t off = 0;
		while (sec.len - off >= sizeof(Elf64_Nhdr)) {
			Elf64_Nhdr nh;
			memcpy(&nh, sec.data + off, sizeof(nh));
			size_t name_off = off + sizeof(nh);
			if (NOTE_ALIGN(nh.n_namesz) > sec.len - name_off)
				break;
			size_t desc_off = name_off + NOTE_ALIGN(nh.n_namesz);
			if (nh.n_descsz > sec.len - desc_off)
				break;
			if (nh.n_type == NT_GNU_BUILD_ID_TYPE && nh.n_namesz == GNU_NOTE_NAMESZ &&
			    memcmp(sec.data + name_off, GNU_NOTE_NAME, GNU_NOTE_NAMESZ) == 0) {
				size_t k = nh.n_descsz < SYM_ELF_BUILD_ID_MAX
					       ? nh.n_descsz
					       : SYM_ELF_BUILD_ID_MAX;
				for (size_t b = 0; b < k; b++)
					snprintf(out->build_id + 2 * b, 3, "%02x",
						 sec.data[desc_off + b]);
				return;
			}
			if (NOTE_ALIGN(nh.n_descsz) > sec.len - desc_off)
				break;
			off = desc_off + NOTE_ALIGN(nh.n_descsz);
		}
	}
}

static int read_info(const char *path, const void *image, size_t size, struct sym_elf_info *out)
{
	memset(out, 0, sizeof(*out));
	struct elf_image im;
	int rc = elf_image_load(&im, path, image, size, EM_X86_64);
	if (rc < 0)
		return rc;
	const Elf64_Ehdr *eh = elf_image_ehdr(&im);
	out->entry = eh->e_entry;
	out->is_program = eh->e_type == ET_EXEC;
	size_t nph;
	const Elf64_Phdr *ph = elf_image_phdrs(&im, &nph);
	for (size_t i = 0; i < nph; i++) {
		if (ph[i].p_type == PT_INTERP)
			out->is_program = true;
		if (ph[i].p_type == PT_LOAD && out->nloads < SYM_ELF_MAX_LOADS)
			out->loads[out->nloads++] =
			    (struct sym_elf_load){ph[i].p_offset, ph[i].p_vaddr, ph[i].p_filesz};
	}
	rc = out->nloads == 0 ? -EINVAL : 0; /* nothing of it can be mapped: not a module */
	read_build_id(&im, out);
	elf_image_close(&im);
	return rc;
}

/* Adds the function symbols of one symbol table section. */
static int read_symtab(struct sym_table *t, const struct elf_image *im,
		       const struct elf_section *sec)
{
	struct elf_section strs;
	if (sec->entsize != sizeof(Elf64_Sym) || !elf_image_section_at(im, sec->link, &strs))
		return 0;
	size_t count = sec->len / sizeof(Elf64_Sym);
	for (size_t i = 0; i < count; i++) {
		Elf64_Sym sym;
		memcpy(&sym, sec->data + i * sizeof(sym), sizeof(sym));
		int type = ELF64_ST_TYPE(sym.st_info);
		if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF)
			continue;
		/* The name must end inside the string table. */
		const char *name = NULL;
		if (sym.st_name < strs.len &&
		    memchr(strs.data + sym.st_name, '\0', strs.len - sym.st_name))
			name = (const char *)strs.data + sym.st_name;
		int rc = sym_table_add(t, sym.st_value, sym.st_size, name,
				       ELF64_ST_BIND(sym.st_info) != STB_LOCAL);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int sym_elf_read_info(const char *path, struct sym_elf_info *out)
{
	return read_info(path, NULL, 0, out);
}

int sym_elf_read_info_mem(const void *image, size_t size, struct sym_elf_info *out)
{
	return read_info(NULL, image, size, out);
}

static int read_symbols(const char *path, const void *image, size_t size, struct sym_table *t)
{
	struct elf_image im;
	int rc = elf_image_load(&im, path, image, size, EM_X86_64);
	if (rc < 0)
		return rc;
	size_t n = elf_image_nsections(&im);
	for (size_t i = 1; rc == 0 && i < n; i++) {
		struct elf_section sec;
		if (elf_image_section_at(&im, i, &sec) &&
		    (sec.type == SHT_SYMTAB || sec.type == SHT_DYNSYM))
			rc = read_symtab(t, &im, &sec);
	}
	elf_image_close(&im);
	return rc;
}

int sym_elf_read_symbols(const char *path, struct sym_table *t)
{
	return read_symbols(path, NULL, 0, t);
}

int sym_elf_read_symbols_mem(const void *image, size_t size, struct sym_table *t)
{
	return read_symbols(NULL, image, size, t);
}

/* At most the symbol tables a file has (.symtab, .dynsym). */
#define SCAN_TABLES 2

struct sym_elf_scan {
	struct elf_image im;
	struct elf_section syms[SCAN_TABLES], strs[SCAN_TABLES];
	size_t ntables;
};

int sym_elf_scan_open(const char *path, struct sym_elf_scan **out)
{
	struct sym_elf_scan *sc = calloc(1, sizeof(*sc));
	if (!sc)
		return -ENOMEM;
	int rc = elf_image_load(&sc->im, path, NULL, 0, EM_X86_64);
	if (rc < 0) {
		free(sc);
		return rc;
	}
	size_t n = elf_image_nsections(&sc->im);
	for (size_t i = 1; i < n && sc->ntables < SCAN_TABLES; i++) {
		struct elf_section sec, strs;
		if (elf_image_section_at(&sc->im, i, &sec) &&
		    (sec.type == SHT_SYMTAB || sec.type == SHT_DYNSYM) &&
		    sec.entsize == sizeof(Elf64_Sym) &&
		    elf_image_section_at(&sc->im, sec.link, &strs)) {
			sc->syms[sc->ntables] = sec;
			sc->strs[sc->ntables++] = strs;
			/* Read whole by every search: its pages mapped in one call, not one
			 * fault each. The strings are read for the few candidates only. */
			mem_populate_read(sec.data, sec.len);
		}
	}
	*out = sc;
	return 0;
}

/* The name of sym in strs, and its length without version suffix; NULL when it does not
 * end inside the table or is empty. */
static const char *scan_name(const struct elf_section *strs, const Elf64_Sym *sym, size_t *len)
{
	if (sym->st_name >= strs->len)
		return NULL;
	const char *name = (const char *)strs->data + sym->st_name;
	const char *end = memchr(name, '\0', strs->len - sym->st_name);
	if (!end || end == name)
		return NULL;
	const char *at = memchr(name, '@', (size_t)(end - name));
	*len = (size_t)((at ? at : end) - name);
	return *len ? name : NULL;
}

/* Whether sym (named name, nl bytes) is the better answer than the hit's symbol (at b):
 * a greater address, or the preferred alias at the same one. */
static bool scan_better(const Elf64_Sym *sym, const char *name, size_t nl,
			const struct sym_elf_hit *h, const Elf64_Sym *b)
{
	if (!h->name || sym->st_value > b->st_value)
		return true;
	if (sym->st_value < b->st_value)
		return false;
	return sym_table_alias_cmp(sym->st_size, ELF64_ST_BIND(sym->st_info) != STB_LOCAL, name, nl,
				   b->st_size, ELF64_ST_BIND(b->st_info) != STB_LOCAL, h->name,
				   h->len) < 0;
}

#define SCAN_BUCKETS 1024

void sym_elf_scan_find_many(const struct sym_elf_scan *sc, const uint64_t *v, size_t n,
			    struct sym_elf_hit *hits)
{
	Elf64_Sym *best = calloc(n ? n : 1, sizeof(*best));
	for (size_t i = 0; i < n; i++)
		hits[i] = (struct sym_elf_hit){NULL, 0, 0};
	if (!best || n == 0) {
		free(best);
		return;
	}
	/* The first address at or above a symbol, found from a table of buckets over
	 * [v[0], v[n - 1]] (first[b]: the first address at or above bucket b's start) and a
	 * step or two: a big table (a compiler's 29 000 exported functions) costs a few
	 * nanoseconds a symbol, not a binary search's unpredictable branches. */
	unsigned shift = 0;
	while (((v[n - 1] - v[0]) >> shift) >= SCAN_BUCKETS)
		shift++;
	size_t nb = (size_t)((v[n - 1] - v[0]) >> shift) + 1;
	uint32_t first[SCAN_BUCKETS];
	for (size_t b = 0, i = 0; b < nb; b++) {
		uint64_t at = v[0] + ((uint64_t)b << shift);
		while (v[i] < at) /* v[n - 1] is at or above every bucket's start */
			i++;
		first[b] = (uint32_t)i;
	}
	/* Each symbol is offered to the first address at or above it only; a sweep then
	 * carries each answer up to the addresses above (a symbol at or below v[i - 1] is at
	 * or below v[i]). */
	for (size_t t = 0; t < sc->ntables; t++) {
		size_t count = sc->syms[t].len / sizeof(Elf64_Sym);
		for (size_t k = 0; k < count; k++) {
			Elf64_Sym sym;
			memcpy(&sym, sc->syms[t].data + k * sizeof(sym), sizeof(sym));
			int type = ELF64_ST_TYPE(sym.st_info);
			if ((type != STT_FUNC && type != STT_GNU_IFUNC) ||
			    sym.st_shndx == SHN_UNDEF || sym.st_value == 0 ||
			    sym.st_value > v[n - 1])
				continue;
			size_t lo = 0;
			if (sym.st_value > v[0]) {
				lo = first[(sym.st_value - v[0]) >> shift];
				while (v[lo] < sym.st_value)
					lo++;
			}
			/* Below the answer so far: not a candidate (its name is not read: a big
			 * table has many more symbols than the profile has addresses). */
			if (hits[lo].name && sym.st_value < best[lo].st_value)
				continue;
			size_t nl;
			const char *name = scan_name(&sc->strs[t], &sym, &nl);
			if (name && scan_better(&sym, name, nl, &hits[lo], &best[lo])) {
				hits[lo] = (struct sym_elf_hit){name, nl, sym.st_size};
				best[lo] = sym;
			}
		}
	}
	for (size_t i = 1; i < n; i++)
		if (hits[i - 1].name && scan_better(&best[i - 1], hits[i - 1].name, hits[i - 1].len,
						    &hits[i], &best[i])) {
			hits[i] = hits[i - 1];
			best[i] = best[i - 1];
		}
	for (size_t i = 0; i < n; i++)
		if (hits[i].name && best[i].st_size != 0 &&
		    v[i] - best[i].st_value >= best[i].st_size)
			hits[i].name = NULL;
	free(best);
}

bool sym_elf_scan_find(const struct sym_elf_scan *sc, uint64_t vaddr, char *out, size_t len,
		       uint64_t *size)
{
	struct sym_elf_hit hit;
	sym_elf_scan_find_many(sc, &vaddr, 1, &hit);
	if (!hit.name || len == 0)
		return false;
	size_t k = hit.len < len - 1 ? hit.len : len - 1;
	memcpy(out, hit.name, k);
	out[k] = 0;
	*size = hit.size;
	return true;
}

void sym_elf_scan_close(struct sym_elf_scan *sc)
{
	if (!sc)
		return;
	elf_image_close(&sc->im);
	free(sc);
}
