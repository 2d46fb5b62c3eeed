/*
 * got_image.h - what a loaded module's program headers and dynamic section say about
 * its GOT: the slots its JUMP_SLOT and GLOB_DAT relocations name, found by symbol name;
 * and where it defines a function of a given name (its GNU hash table).
 *
 * Owns: nothing but the reading. Everything is read from the module in memory (the
 * image the loader mapped, not its file), and every pointer, size and index is checked
 * against the module's PT_LOAD segments before it is followed: a corrupt or unusual
 * dynamic section is refused (-EINVAL), a relocation naming a symbol, a name or a slot
 * out of bounds is counted and skipped, nothing is read outside the segments. Used by
 * got_patch.c, and by the tests on synthetic images.
 * Context: any thread, normal context; nothing here allocates or takes a lock. The
 * caller keeps the module mapped while it reads (got_patch.c: inside dl_iterate_phdr).
 */
#ifndef DDPROF_AGENT_GOT_IMAGE_H
#define DDPROF_AGENT_GOT_IMAGE_H

#include <elf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GOT_IMAGE_MAX_NAMES 40 /* names one search looks for */

#define GOT_IMAGE_MAX_LOADS 16 /* PT_LOAD segments kept (a module has 2-5) */

struct got_image_load {
	uintptr_t start, end; /* runtime addresses, end exclusive */
	uint32_t flags;	      /* PF_R, PF_W, PF_X */
};

/* What one module's program headers and dynamic section say, every pointer checked to
 * lie inside one of its PT_LOAD segments (readable ones, for the tables). */
struct got_image {
	uintptr_t base; /* dlpi_addr: runtime address = link-time vaddr + base */
	size_t nloads;
	struct got_image_load loads[GOT_IMAGE_MAX_LOADS];
	/* What the loader made read-only after relocation (PT_GNU_RELRO rounded down to
	 * pages at both ends, as glibc does); empty (start == end) when none. */
	uintptr_t relro_start, relro_end;
	uintptr_t dynamic; /* the PT_DYNAMIC section in memory, 0 when there is none */
	size_t ndyn;	   /* entries PT_DYNAMIC's size allows */
	bool dyn_writable; /* inside a writable segment: glibc made its d_ptr absolute */
	const Elf64_Sym *symtab;
	size_t nsyms; /* entries before the end of symtab's segment: an upper bound */
	const char *strtab;
	size_t strsz;
	const Elf64_Rela *rela; /* DT_RELA: GLOB_DAT among others */
	size_t nrela;
	const Elf64_Rela *jmprel; /* DT_JMPREL: JUMP_SLOT */
	size_t njmprel;
	/* DT_GNU_HASH (got_image_lookup), NULL when absent: its header, bloom filter and
	 * buckets checked in bounds; each chain entry is, when read. */
	const uint32_t *gnu_buckets;
	const uint64_t *gnu_bloom;
	uintptr_t gnu_chain; /* the chain entry of symbol gnu_symoffset */
	uint32_t gnu_nbuckets, gnu_symoffset, gnu_bloom_size, gnu_bloom_shift;
	uintptr_t versym; /* DT_VERSYM (uint16_t per symbol), 0 when absent */
};

/* Reads a module: base and its program headers as dl_iterate_phdr gives them
 * (got_image_read_phdrs), then its dynamic section (got_image_read_dynamic). d_ptr
 * values may be absolute (glibc adds base to those of a writable dynamic section) or
 * relative (a read-only one: the vdso; other loaders); both are accepted, checked
 * against the segments. 0; -ENOENT when there is no PT_DYNAMIC; -EINVAL when anything
 * is out of bounds or unusual (then *out holds nothing usable). */
int got_image_parse(uintptr_t base, const Elf64_Phdr *phdr, size_t phnum, struct got_image *out);
/* The two halves: segments, RELRO and where the dynamic section is (-ENOENT: none;
 * base and what was read before a failure are kept), then the tables it names. */
int got_image_read_phdrs(uintptr_t base, const Elf64_Phdr *phdr, size_t phnum,
			 struct got_image *out);
int got_image_read_dynamic(struct got_image *im);

/* Whether [addr, addr + len) lies inside one PT_LOAD segment with every flag of
 * `flags` (PF_*). */
bool got_image_contains(const struct got_image *im, uintptr_t addr, uint64_t len, uint32_t flags);
/* Whether addr is on a page the loader made read-only (RELRO). */
bool got_image_in_relro(const struct got_image *im, uintptr_t addr);

/* The function name defines (STT_FUNC, in a section, the default version when the
 * module has versions), found through DT_GNU_HASH; NULL when there is none (or no
 * hash table). Its address is im->base + st_value. */
const Elf64_Sym *got_image_lookup(const struct got_image *im, const char *name);

/* One slot a relocation names. */
struct got_image_slot {
	uintptr_t addr; /* base + r_offset: 8 bytes inside a writable PT_LOAD, aligned */
	/* The canonical PLT entry of the symbol in this module (an undefined symbol with a
	 * value: a non-PIE executable that takes the function's address), or 0. */
	uintptr_t plt;
	uint32_t entry; /* index of the name in names[] */
	bool jump_slot; /* R_X86_64_JUMP_SLOT; else R_X86_64_GLOB_DAT */
};

/* The JUMP_SLOT and GLOB_DAT relocations of im naming one of names[0..nnames) (at most
 * GOT_IMAGE_MAX_NAMES: those past it are not looked for; a NULL or empty name matches
 * nothing): writes
 * the first max to out and returns how many there are; *bad counts the relocations
 * refused (symbol index, name or slot out of bounds, a misaligned slot). */
size_t got_image_find_slots(const struct got_image *im, const char *const *names, size_t nnames,
			    struct got_image_slot *out, size_t max, size_t *bad);

#endif
