/*
 * sym_elf.c - ELF facts and symbol tables of a module file via libelf (see sym_elf.h).
 *
 * Context: uploader thread. libelf checks section and segment bounds itself; what we
 * read from section data (notes, symbols) goes through gelf_* accessors that check the
 * index against the data size, and string offsets through elf_strptr, which checks
 * them against the string section.
 */
#include "sym_elf.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NT_GNU_BUILD_ID_TYPE 3
#define GNU_NOTE_NAME "GNU"
#define GNU_NOTE_NAMESZ 4 /* "GNU" and its NUL */

/* An ELF handle on the file at path, or on image[0..size) when image is not NULL (then
 * *fd is -1). NULL with errno set on failure. */
static Elf *elf_open(const char *path, const void *image, size_t size, int *fd)
{
	elf_version(EV_CURRENT);
	if (image) {
		*fd = -1;
		/* libelf only reads an image opened for ELF_C_READ: the cast is safe. */
		Elf *e = elf_memory((char *)image, size);
		if (e && elf_kind(e) == ELF_K_ELF)
			return e;
		if (e)
			elf_end(e);
		errno = EINVAL;
		return NULL;
	}
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0)
		return NULL;
	Elf *e = elf_begin(*fd, ELF_C_READ_MMAP, NULL);
	if (e && elf_kind(e) == ELF_K_ELF)
		return e;
	if (e)
		elf_end(e);
	close(*fd);
	*fd = -1;
	errno = EINVAL;
	return NULL;
}

static void elf_close(Elf *e, int fd)
{
	elf_end(e);
	if (fd >= 0)
		close(fd);
}

static void read_build_id(Elf *e, struct sym_elf_info *out)
{
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(e, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		if (!d)
			continue;
		size_t off = 0, name_off, desc_off;
		GElf_Nhdr nh;
		while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
			if (nh.n_type != NT_GNU_BUILD_ID_TYPE || nh.n_namesz != GNU_NOTE_NAMESZ ||
			    memcmp((char *)d->d_buf + name_off, GNU_NOTE_NAME, GNU_NOTE_NAMESZ) !=
				0)
				continue;
			size_t n =
			    nh.n_descsz < SYM_ELF_BUILD_ID_MAX ? nh.n_descsz : SYM_ELF_BUILD_ID_MAX;
			const uint8_t *id = (const uint8_t *)d->d_buf + desc_off;
			for (size_t i = 0; i < n; i++)
				snprintf(out->build_id + 2 * i, 3, "%02x", id[i]);
			return;
		}
	}
}

static int read_info(const char *path, const void *image, size_t size, struct sym_elf_info *out)
{
	memset(out, 0, sizeof(*out));
	int fd;
	Elf *e = elf_open(path, image, size, &fd);
	if (!e)
		return -errno;
	GElf_Ehdr eh;
	if (!gelf_getehdr(e, &eh)) {
		elf_close(e, fd);
		return -EINVAL;
	}
	out->entry = eh.e_entry;
	out->is_program = eh.e_type == ET_EXEC;
	size_t nph = 0;
	int rc = elf_getphdrnum(e, &nph) == 0 ? 0 : -EINVAL;
	if (rc == 0) {
		for (size_t i = 0; i < nph; i++) {
			GElf_Phdr ph;
			if (!gelf_getphdr(e, (int)i, &ph)) {
				rc = -EINVAL; /* past the end of the file */
				break;
			}
			if (ph.p_type == PT_INTERP)
				out->is_program = true;
			if (ph.p_type == PT_LOAD && out->nloads < SYM_ELF_MAX_LOADS)
				out->loads[out->nloads++] =
				    (struct sym_elf_load){ph.p_offset, ph.p_vaddr, ph.p_filesz};
		}
	}
	if (out->nloads == 0)
		rc = -EINVAL; /* nothing of it can be mapped: not a module */
	read_build_id(e, out);
	elf_close(e, fd);
	return rc;
}

/* Adds the function symbols of one symbol table section. */
static int read_symtab(struct sym_table *t, Elf *e, Elf_Scn *scn, const GElf_Shdr *sh)
{
	Elf_Data *d = elf_getdata(scn, NULL);
	if (!d || sh->sh_entsize == 0)
		return 0;
	size_t count = sh->sh_size / sh->sh_entsize;
	for (size_t i = 0; i < count; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(d, (int)i, &sym))
			break;
		int type = GELF_ST_TYPE(sym.st_info);
		if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF)
			continue;
		int rc = sym_table_add(t, sym.st_value, sym.st_size,
				       elf_strptr(e, sh->sh_link, sym.st_name),
				       GELF_ST_BIND(sym.st_info) != STB_LOCAL);
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
	int fd;
	Elf *e = elf_open(path, image, size, &fd);
	if (!e)
		return -errno;
	int rc = 0;
	Elf_Scn *scn = NULL;
	while (rc == 0 && (scn = elf_nextscn(e, scn)) != NULL) {
		GElf_Shdr sh;
		if (gelf_getshdr(scn, &sh) &&
		    (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM))
			rc = read_symtab(t, e, scn, &sh);
	}
	elf_close(e, fd);
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
