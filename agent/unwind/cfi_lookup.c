/*
 * cfi_lookup.c - one pc's unwind row from a loaded module's .eh_frame_hdr (see
 * cfi_lookup.h).
 *
 * This file is async-signal-safe: cfi_lookup_module_from_phdrs, cfi_lookup_pc and their
 * static helpers allocate nothing, take no lock, call only agent/unwind/cfi_decode.h (itself
 * async-signal-safe) and leave errno alone. Reads stay inside the caller's bounds:
 * the header's fixed fields and its whole search table are checked against hdr_len
 * before the first is read; the .eh_frame pointer, the FDE found and its CIE must lie
 * in [eh_lo, eh_hi), and cfi_decode's cursors keep every read after that inside it.
 *
 * .eh_frame_hdr (LSB "Exception Frame Header"):
 *   u8 version (1), u8 eh_frame_ptr_enc, u8 fde_count_enc, u8 table_enc,
 *   eh_frame_ptr, fde_count, then fde_count pairs (initial location, FDE address)
 *   sorted by initial location, each relative to the header's start (datarel).
 */
#include "agent/unwind/cfi_lookup.h"

#include <errno.h>
#include <stdbool.h>

#include "agent/unwind/cfi_decode.h"

#define HDR_VERSION 1
/* The only table form we search: 4-byte signed offsets from the header's start (what
 * GNU ld and lld emit for every x86-64 module). */
#define HDR_TABLE_ENC (CFI_PE_datarel | CFI_PE_sdata4)
#define HDR_ENTRY_SIZE 8 /* two sdata4 */
#define PAGE_MASK_4K (~(uint64_t)0xfff)

/* async-signal-safe */
int cfi_lookup_module_from_phdrs(uintptr_t bias, const ElfW(Phdr) * phdr, size_t phnum,
				 struct cfi_lookup_module *out)
{
	const ElfW(Phdr) *hdr = NULL;
	uint64_t base = UINT64_MAX;
	for (size_t i = 0; i < phnum; i++) {
		if (phdr[i].p_type == PT_GNU_EH_FRAME)
			hdr = &phdr[i];
		else if (phdr[i].p_type == PT_LOAD && phdr[i].p_vaddr < base)
			base = phdr[i].p_vaddr & PAGE_MASK_4K;
	}
	if (!hdr)
		return -ENOENT;
	uint64_t h_lo = hdr->p_vaddr, h_len = hdr->p_memsz;
	if (h_len == 0 || h_lo + h_len < h_lo)
		return -EINVAL;
	for (size_t i = 0; i < phnum; i++) {
		const ElfW(Phdr) *l = &phdr[i];
		/* File-backed bytes only: .eh_frame is never in a segment's bss part. */
		if (l->p_type != PT_LOAD || !(l->p_flags & PF_R) ||
		    l->p_vaddr + l->p_filesz < l->p_vaddr || h_lo < l->p_vaddr ||
		    h_lo + h_len > l->p_vaddr + l->p_filesz)
			continue;
		*out = (struct cfi_lookup_module){
		    .eh_frame_hdr = (const uint8_t *)(uintptr_t)(bias + h_lo),
		    .hdr_len = (size_t)h_len,
		    .eh_lo = (const uint8_t *)(uintptr_t)(bias + l->p_vaddr),
		    .eh_hi = (const uint8_t *)(uintptr_t)(bias + l->p_vaddr + l->p_filesz),
		    .bias = bias,
		    .base = base,
		};
		return 0;
	}
	return -EINVAL;
}

/* async-signal-safe. Reads a 4-byte signed value at p (any alignment). */
static int32_t load_s32(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* async-signal-safe. The row at link-time pc `target` from FDE fde of cie. Its own
 * frame (not inlined into cfi_lookup_pc): its struct cfi_prog (~630 bytes) and
 * cfi_decode_cie_read's are then never on the stack together. */
static __attribute__((noinline)) int
fde_row_at(const struct cfi_lookup_module *m, const struct cfi_section *s,
	   const struct cfi_cie *cie, const struct cfi_state *init, const struct cfi_fde *fde,
	   uint64_t target, struct cfi_row *out)
{
	struct cfi_prog pg;
	struct cfi_state st = *init;
	cfi_decode_prog_start(&pg, cie, s, init, fde->insns, fde->insns_end, fde->start,
			      fde->start + fde->range);
	pg.target = target;
	int rc = cfi_decode_prog_run(&pg, &st);
	/* After AT_TARGET or END, st holds from pg.loc; loc <= target unless an advance
	 * wrapped around (malformed). */
	if (rc == CFI_PROG_BAD || pg.loc > target || pg.loc < m->base)
		return -EINVAL;
	cfi_decode_row_from_state(&st, cie->signal, (uint32_t)(pg.loc - m->base), out);
	return 0;
}

/* async-signal-safe. The FDE the header's table lists last at or before runtime pc:
 * its address and initial location (runtime). -ENOENT before the first, -EINVAL for
 * a header we cannot read. Sets *eh_frame to .eh_frame's start. */
static int hdr_find(const struct cfi_lookup_module *m, uintptr_t pc, const uint8_t **fde,
		    uintptr_t *initial, const uint8_t **eh_frame)
{
	const uint8_t *hdr = m->eh_frame_hdr;
	struct cfi_cursor c = {hdr, hdr + m->hdr_len, false};
	uint8_t version = cfi_cur_u8(&c);
	uint8_t ptr_enc = cfi_cur_u8(&c);
	uint8_t count_enc = cfi_cur_u8(&c);
	uint8_t table_enc = cfi_cur_u8(&c);
	if (c.bad || version != HDR_VERSION || table_enc != HDR_TABLE_ENC ||
	    count_enc != CFI_PE_udata4 ||
	    (ptr_enc != (CFI_PE_pcrel | CFI_PE_sdata4) && ptr_enc != HDR_TABLE_ENC))
		return -EINVAL;
	const uint8_t *field = c.p;
	int32_t ptr = (int32_t)cfi_cur_u32(&c);
	uint32_t count = cfi_cur_u32(&c);
	if (c.bad || count > (size_t)(c.end - c.p) / HDR_ENTRY_SIZE)
		return -EINVAL;
	uintptr_t ef =
	    (uintptr_t)(ptr_enc == HDR_TABLE_ENC ? hdr : field) + (uintptr_t)(intptr_t)ptr;
	if (ef < (uintptr_t)m->eh_lo || ef >= (uintptr_t)m->eh_hi)
		return -EINVAL;
	*eh_frame = (const uint8_t *)ef;
	if (count == 0)
		return -ENOENT;
	const uint8_t *table = c.p; /* count entries, all inside hdr_len (checked above) */
	/* Offsets from the header; pc's too (exact for user-space addresses; for any
	 * other pc a wrong entry is caught by cfi_lookup_pc's range check). */
	int64_t want = (int64_t)(pc - (uintptr_t)hdr);
	if (want < load_s32(table))
		return -ENOENT;
	/* Last entry with initial location <= pc: table[lo] <= want < table[hi]. */
	size_t lo = 0, hi = count;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (load_s32(table + mid * HDR_ENTRY_SIZE) <= want)
			lo = mid;
		else
			hi = mid;
	}
	const uint8_t *e = table + lo * HDR_ENTRY_SIZE;
	*initial = (uintptr_t)hdr + (uintptr_t)(intptr_t)load_s32(e);
	*fde = (const uint8_t *)((uintptr_t)hdr + (uintptr_t)(intptr_t)load_s32(e + 4));
	return 0;
}

/* async-signal-safe */
int cfi_lookup_pc(const struct cfi_lookup_module *m, uintptr_t pc, struct cfi_row *out)
{
	if (!m || !m->eh_frame_hdr || !m->eh_lo || m->eh_hi <= m->eh_lo)
		return -EINVAL;
	const uint8_t *fde_at, *ef;
	uintptr_t initial;
	int rc = hdr_find(m, pc, &fde_at, &initial, &ef);
	if (rc < 0)
		return rc;
	/* .eh_frame from its start to the end of the readable memory: its length is not
	 * recorded anywhere, and entries need not stop before eh_hi. */
	struct cfi_section s = {ef, (size_t)(m->eh_hi - ef), (uint64_t)(uintptr_t)ef - m->bias,
				false};
	if ((uintptr_t)fde_at < (uintptr_t)ef || (uintptr_t)fde_at >= (uintptr_t)m->eh_hi)
		return -EINVAL;
	struct cfi_entry e;
	if (cfi_decode_entry_read(&s, (uint64_t)(fde_at - ef), &e) != CFI_ENTRY_FDE)
		return -EINVAL;
	struct cfi_cie cie;
	struct cfi_state init;
	struct cfi_fde fde;
	if (!cfi_decode_cie_read(&s, e.cie_off, &cie, &init) ||
	    !cfi_decode_fde_read(&s, &e, &cie, &fde) || !fde.aug_ok)
		return -EINVAL;
	/* The header must list the FDE at its own initial location. */
	uint64_t target = (uint64_t)pc - m->bias;
	if (fde.start != (uint64_t)initial - m->bias || fde.start + fde.range < fde.start)
		return -EINVAL;
	/* As the table builder: no rows for an empty FDE, nor outside base's 4 GiB. */
	if (target >= fde.start + fde.range || fde.start < m->base ||
	    fde.start + fde.range - m->base > UINT32_MAX)
		return -ENOENT;
	return fde_row_at(m, &s, &cie, &init, &fde, target, out);
}
