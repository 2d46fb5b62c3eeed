/*
 * elf_image.c - ELF headers and sections without libelf (see elf_image.h).
 *
 * Every offset and count from the headers is checked against the bytes before use,
 * so a truncated or hostile file yields "not found", never a read out of bounds.
 * Context: normal context only.
 */
#include "agent/unwind/elf_image.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int elf_image_open(struct elf_image *im, const char *path)
{
	memset(im, 0, sizeof(*im));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) != 0) {
		rc = -errno;
	} else if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
		rc = -EINVAL;
	} else {
		void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			rc = -errno;
		} else {
			im->map = p;
			im->data = p;
			im->len = (size_t)st.st_size;
		}
	}
	close(fd);
	return rc;
}

void elf_image_memory(struct elf_image *im, const void *data, size_t len)
{
	im->data = data;
	im->len = len;
	im->map = NULL;
}

int elf_image_load(struct elf_image *im, const char *path, const void *image, size_t len,
		   uint16_t machine)
{
	if (image) {
		elf_image_memory(im, image, len);
	} else {
		int rc = elf_image_open(im, path);
		if (rc < 0)
			return rc;
	}
	if (elf_image_check(im, machine) < 0) {
		elf_image_close(im);
		return -EINVAL;
	}
	return 0;
}

void elf_image_close(struct elf_image *im)
{
	if (im->map)
		munmap(im->map, im->len);
	memset(im, 0, sizeof(*im));
}

/* Whether [off, off + n * size) lies inside the image (no overflow). */
static bool inside(const struct elf_image *im, uint64_t off, uint64_t n, uint64_t size)
{
	if (size != 0 && n > (UINT64_MAX - off) / size)
		return false;
	return off <= im->len && n * size <= im->len - off;
}

/* Whether the table at im->data + off may be read as an array of structs of alignment
 * align: a hostile file can put its header tables at any offset, and reading a struct
 * through a misaligned pointer is undefined behaviour (x86-64 tolerates it; the
 * compiler, which may assume alignment, need not). Real files align them. */
static bool aligned(const struct elf_image *im, uint64_t off, size_t align)
{
	return ((uintptr_t)im->data + off) % align == 0;
}

static const Elf64_Ehdr *ehdr(const struct elf_image *im)
{
	return (const Elf64_Ehdr *)im->data;
}

/* The section header table (count, and the string table index), 0 when unusable. */
static size_t sections(const struct elf_image *im, const Elf64_Shdr **tab, size_t *strndx)
{
	const Elf64_Ehdr *e = ehdr(im);
	if (e->e_shoff == 0 || e->e_shentsize != sizeof(Elf64_Shdr) ||
	    !aligned(im, e->e_shoff, _Alignof(Elf64_Shdr)) ||
	    !inside(im, e->e_shoff, 1, sizeof(Elf64_Shdr)))
		return 0;
	*tab = (const Elf64_Shdr *)(im->data + e->e_shoff);
	/* More than SHN_LORESERVE sections: the counts live in section 0. */
	size_t n = e->e_shnum ? e->e_shnum : (*tab)[0].sh_size;
	*strndx = e->e_shstrndx == SHN_XINDEX ? (*tab)[0].sh_link : e->e_shstrndx;
	if (!inside(im, e->e_shoff, n, sizeof(Elf64_Shdr)) || *strndx >= n)
		return 0;
	return n;
}

int elf_image_check(const struct elf_image *im, uint16_t machine)
{
	if (!im->data || im->len < sizeof(Elf64_Ehdr) || !aligned(im, 0, _Alignof(Elf64_Ehdr)))
		return -EINVAL;
	const Elf64_Ehdr *e = ehdr(im);
	if (memcmp(e->e_ident, ELFMAG, SELFMAG) != 0 || e->e_ident[EI_CLASS] != ELFCLASS64 ||
	    e->e_ident[EI_DATA] != ELFDATA2LSB || e->e_machine != machine)
		return -EINVAL;
	if (e->e_phnum && (e->e_phentsize != sizeof(Elf64_Phdr) ||
			   !aligned(im, e->e_phoff, _Alignof(Elf64_Phdr)) ||
			   !inside(im, e->e_phoff, e->e_phnum, sizeof(Elf64_Phdr))))
		return -EINVAL;
	return 0;
}

/* The program headers (NULL, *n 0 when there are none). elf_image_check bounds e_phoff
 * only when there are some: without, it may hold anything, and even computing
 * data + e_phoff could leave the object, undefined behaviour. */
static const Elf64_Phdr *phdrs(const struct elf_image *im, size_t *n)
{
	const Elf64_Ehdr *e = ehdr(im);
	*n = e->e_phnum;
	return *n ? (const Elf64_Phdr *)(im->data + e->e_phoff) : NULL;
}

uint64_t elf_image_load_base(const struct elf_image *im)
{
	size_t n;
	const Elf64_Phdr *ph = phdrs(im, &n);
	uint64_t base = UINT64_MAX;
	for (size_t i = 0; i < n; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr < base)
			base = ph[i].p_vaddr & ~(uint64_t)0xfff;
	return base == UINT64_MAX ? 0 : base;
}

size_t elf_image_nsections(const struct elf_image *im)
{
	const Elf64_Shdr *sh;
	size_t strndx;
	return sections(im, &sh, &strndx);
}

static bool fill(const struct elf_image *im, const Elf64_Shdr *sh, struct elf_section *out)
{
	if (sh->sh_type == SHT_NOBITS || !inside(im, sh->sh_offset, 1, sh->sh_size))
		return false;
	out->data = im->data + sh->sh_offset;
	out->len = sh->sh_size;
	out->vaddr = sh->sh_addr;
	out->type = sh->sh_type;
	out->flags = sh->sh_flags;
	out->link = sh->sh_link;
	out->entsize = sh->sh_entsize;
	return true;
}

bool elf_image_section_at(const struct elf_image *im, size_t i, struct elf_section *out)
{
	const Elf64_Shdr *sh;
	size_t strndx;
	size_t n = sections(im, &sh, &strndx);
	return i < n && fill(im, &sh[i], out);
}

const void *elf_image_ehdr(const struct elf_image *im)
{
	return ehdr(im);
}

const void *elf_image_phdrs(const struct elf_image *im, size_t *n)
{
	return phdrs(im, n);
}

bool elf_image_section(const struct elf_image *im, const char *name, uint32_t type,
		       struct elf_section *out)
{
	const Elf64_Shdr *sh;
	size_t strndx;
	size_t n = sections(im, &sh, &strndx);
	if (n == 0 || sh[strndx].sh_type != SHT_STRTAB ||
	    !inside(im, sh[strndx].sh_offset, 1, sh[strndx].sh_size))
		return false;
	const char *names = (const char *)im->data + sh[strndx].sh_offset;
	size_t names_len = sh[strndx].sh_size;
	size_t want = strlen(name) + 1; /* with its NUL, which must be inside the table */
	for (size_t i = 1; i < n; i++) {
		if ((type && sh[i].sh_type != type) || sh[i].sh_type == SHT_NOBITS)
			continue;
		if (sh[i].sh_name >= names_len || names_len - sh[i].sh_name < want ||
		    memcmp(names + sh[i].sh_name, name, want) != 0)
			continue;
		return fill(im, &sh[i], out);
	}
	return false;
}
