/*
 * elf_image.h - the headers and sections of a 64-bit ELF file or in-memory image,
 * read without libelf.
 *
 * Owns: a read-only private mapping of the file (or nothing, for an image in memory),
 * and every bounds check on what the headers say: offsets, sizes and names are trusted
 * only once they fall inside the bytes. Section data is returned as it is in the file
 * (compressed sections are reported as such, not inflated).
 * Why not libelf: unwind tables are built early in every profiled process that lives
 * long enough (modules_service.c, START_DELAY_NS); linking libelf for these few headers would
 * make every process map it (start-up time, and five more mappings for every fork to
 * copy), and libelf's allocations would give the building thread its own malloc arena,
 * which glibc locks around every fork. libelf stays for the symbolizer, loaded with
 * libdw when a profile is uploaded.
 * Context: normal context (module thread, uploader thread, tests); never a signal
 * handler.
 */
#ifndef DDPROF_AGENT_ELF_IMAGE_H
#define DDPROF_AGENT_ELF_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct elf_image {
	const uint8_t *data;
	size_t len;
	void *map; /* our mapping of the file, NULL for an image in memory */
};

struct elf_section {
	const uint8_t *data;
	size_t len;
	uint64_t vaddr;	  /* sh_addr */
	uint32_t type;	  /* sh_type */
	uint64_t flags;	  /* sh_flags (SHF_COMPRESSED: data is compressed) */
	uint32_t link;	  /* sh_link (a symbol table's string table) */
	uint64_t entsize; /* sh_entsize */
};

/* Maps path read-only. 0 or a negative errno. */
int elf_image_open(struct elf_image *im, const char *path);
/* An image already in memory (the vdso); nothing is copied. */
void elf_image_memory(struct elf_image *im, const void *data, size_t len);
void elf_image_close(struct elf_image *im);

/* The file at path, or image[0..len) when image is not NULL, checked for machine
 * (elf_image_check). 0, -errno of open, or -EINVAL; on failure nothing is kept. */
int elf_image_load(struct elf_image *im, const char *path, const void *image, size_t len,
		   uint16_t machine);
/* 0 when the image is a little-endian ELF64 for machine (an EM_* value) with sane
 * header tables; -EINVAL otherwise. The functions below require it. */
int elf_image_check(const struct elf_image *im, uint16_t machine);
/* Lowest PT_LOAD vaddr rounded down to 4 KiB: the link-time load base (0 if none). */
uint64_t elf_image_load_base(const struct elf_image *im);
/* The first section named name (of any type when type is 0). */
bool elf_image_section(const struct elf_image *im, const char *name, uint32_t type,
		       struct elf_section *out);
/* Number of sections (0 when the table is unusable), and section i (false when its
 * data is not inside the image, or it has none: SHT_NOBITS). */
size_t elf_image_nsections(const struct elf_image *im);
bool elf_image_section_at(const struct elf_image *im, size_t i, struct elf_section *out);
/* The file header and program headers (bounds checked by elf_image_check). */
const void *elf_image_ehdr(const struct elf_image *im); /* const Elf64_Ehdr * */
/* const Elf64_Phdr *, NULL (with *n 0) when there are none */
const void *elf_image_phdrs(const struct elf_image *im, size_t *n);

#endif
