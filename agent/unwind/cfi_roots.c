/*
 * cfi_roots.c - the Go runtime's outermost frames as CFI roots (see cfi_roots.h).
 * Context: normal context (the table builder), single-threaded per call.
 */
#include "agent/unwind/cfi_roots.h"

#include <elf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Where a Go stack begins: goroutines return into runtime.goexit; an M's g0 stack
 * starts in runtime.mstart (threads the runtime clones itself) or runtime.rt0_go (the
 * first thread). Go 1.17 on names the assembly ones with the ABI suffix. */
static const char *const go_roots[] = {
    "runtime.goexit.abi0", "runtime.goexit",	  "runtime.mstart.abi0",
    "runtime.mstart",	   "runtime.rt0_go.abi0", "runtime.rt0_go",
};
#define NROOTS (sizeof(go_roots) / sizeof(go_roots[0]))
/* A symbol of size 0 covers this much: goexit is a NOP and a CALL. */
#define ROOT_MIN_BYTES 8

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* The CIE: version 1, no augmentation, code alignment 1, data alignment -8, return
 * address column 16, initial rule DW_CFA_undefined rip; padded to 8 bytes. */
static const uint8_t cie[] = {
    20,	  0,	0,    0,		   /* length */
    0xff, 0xff, 0xff, 0xff,		   /* CIE id (.debug_frame) */
    1,	  0,				   /* version, augmentation "" */
    1,	  0x78, 16,			   /* code align, data align -8, return address column */
    0x07, 16,				   /* DW_CFA_undefined 16 */
    0,	  0,	0,    0,    0, 0, 0, 0, 0, /* DW_CFA_nop padding */
};
_Static_assert(sizeof(cie) == 24, "the CIE's length field says 20 bytes follow it");
#define FDE_BYTES 24 /* length, CIE pointer, initial location, address range */

static bool is_go(const struct elf_image *im)
{
	struct elf_section s;
	return elf_image_section(im, ".go.buildinfo", 0, &s) ||
	       elf_image_section(im, ".note.go.buildid", 0, &s);
}

int cfi_roots_go(const struct elf_image *im, struct cfi_section *out, uint8_t **buf)
{
	*buf = NULL;
	memset(out, 0, sizeof(*out));
	struct elf_section sym, str;
	if (!is_go(im) || !elf_image_section(im, ".symtab", SHT_SYMTAB, &sym) ||
	    sym.entsize != sizeof(Elf64_Sym) || !elf_image_section(im, ".strtab", SHT_STRTAB, &str))
		return 0;
	uint64_t start[NROOTS], size[NROOTS];
	bool found[NROOTS] = {false};
	int n = 0;
	size_t nsyms = sym.len / sizeof(Elf64_Sym);
	for (size_t i = 0; i < nsyms && n < (int)NROOTS; i++) {
		Elf64_Sym s;
		memcpy(&s, sym.data + i * sizeof(s), sizeof(s));
		if (ELF64_ST_TYPE(s.st_info) != STT_FUNC || s.st_value == 0 || s.st_name >= str.len)
			continue;
		const char *name = (const char *)str.data + s.st_name;
		size_t room = str.len - s.st_name;
		if (strnlen(name, room) == room || strncmp(name, "runtime.", 8) != 0)
			continue;
		for (size_t k = 0; k < NROOTS; k++) {
			if (!found[k] && strcmp(name, go_roots[k]) == 0) {
				found[k] = true;
				start[n] = s.st_value;
				size[n] = s.st_size < ROOT_MIN_BYTES ? ROOT_MIN_BYTES : s.st_size;
				n++;
				break;
			}
		}
	}
	if (n == 0)
		return 0;
	size_t len = sizeof(cie) + (size_t)n * FDE_BYTES;
	uint8_t *b = malloc(len);
	if (!b)
		return 0;
	memcpy(b, cie, sizeof(cie));
	for (int i = 0; i < n; i++) {
		uint8_t *f = b + sizeof(cie) + (size_t)i * FDE_BYTES;
		put32(f, FDE_BYTES - 4); /* length */
		put32(f + 4, 0);	 /* the CIE, at offset 0 */
		put64(f + 8, start[i]);
		put64(f + 16, size[i]);
	}
	*out = (struct cfi_section){b, len, 0, true};
	*buf = b;
	return n;
}
