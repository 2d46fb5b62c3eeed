/*
 * cfi_table.h - compact unwind tables built from DWARF call frame information.
 *
 * Owns: turning a module's .eh_frame (and .debug_frame, where that is all a module has
 * for some code) into one sorted array of rows, each saying, from its pc up to the next
 * row's pc, how to find the caller: CFA = SP or FP plus an offset, the return address
 * at CFA - 8, and where the caller's frame pointer was saved. The CFA expressions real
 * code uses are rows too: GNU ld's PLT rule, and the caller's SP loaded from a slot
 * (CFI_DEREF_*). Rows the handler cannot evaluate (CFA in another register, other
 * expressions) say "no rule" and are counted (rows_unsupported): the unwinder then
 * falls back to frame pointers. x86-64 System V only.
 * Context: cfi_table_build* run in normal context (uploader thread, tests): they parse
 * untrusted bytes with every read bounds-checked and allocate with malloc.
 * cfi_table_find is async-signal-safe: a binary search over an immutable array.
 */
#ifndef DDPROF_AGENT_CFI_TABLE_H
#define DDPROF_AGENT_CFI_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How the canonical frame address (the caller's SP) is computed for a row. */
enum cfi_kind {
	CFI_NONE = 0, /* no usable rule here: fall back to frame pointers */
	CFI_SP,	      /* CFA = SP + cfa_off */
	CFI_FP,	      /* CFA = FP + cfa_off */
	/* PLT stub (the GNU ld expression): CFA = SP + 8, + 8 more when
	 * (pc & 15) >= cfa_off. */
	CFI_PLT,
	CFI_SIGNAL, /* signal trampoline: SP points at the kernel's ucontext */
	CFI_ROOT,   /* return address undefined: outermost frame (_start, clone3) */
	/* CFA = *(SP + n) + a, and *(FP + n) + a: the expression OpenSSL's assembly
	 * gives a function that realigned its stack and keeps the caller's SP in a slot
	 * (DW_OP_breg7/6 n; DW_OP_deref; DW_OP_plus_uconst a). cfa_off packs n and a:
	 * cfi_deref_pack. */
	CFI_DEREF_SP,
	CFI_DEREF_FP,
	/* CFA = another register + offset (OpenSSL's assembly copies rsp to rax or rsi
	 * before it realigns the stack). Such a register is caller-saved, so the rule can
	 * only hold in the interrupted frame, whose registers the signal frame gives.
	 * cfa_off packs the DWARF register and the offset: cfi_reg_pack. */
	CFI_REG,
};

/* The operands of a CFI_REG row in its cfa_off: the DWARF register number (0-15) in
 * the top 8 bits, the offset in the low 24 (signed). False when they do not fit. */
static inline bool cfi_reg_pack(uint64_t reg, int64_t off, int32_t *out)
{
	if (reg > 15 || off < -(1 << 23) || off >= (1 << 23))
		return false;
	*out = (int32_t)((uint32_t)reg << 24 | ((uint32_t)off & 0xffffff));
	return true;
}

/* async-signal-safe. The register of a CFI_REG row. */
static inline unsigned cfi_reg_number(int32_t cfa_off)
{
	return (uint32_t)cfa_off >> 24;
}

/* async-signal-safe. The offset of a CFI_REG row. */
static inline int32_t cfi_reg_offset(int32_t cfa_off)
{
	uint32_t v = (uint32_t)cfa_off & 0xffffff;
	return (int32_t)(v ^ 0x800000) - 0x800000; /* sign-extend 24 bits */
}

/* The operands of a CFI_DEREF_* row in its cfa_off: n in the low 16 bits (signed),
 * a in the high 16 (0 <= a < 32768). False when they do not fit. */
static inline bool cfi_deref_pack(int64_t n, uint64_t a, int32_t *out)
{
	if (n < INT16_MIN || n > INT16_MAX || a > INT16_MAX)
		return false;
	*out = (int32_t)((uint32_t)a << 16 | (uint16_t)(int16_t)n);
	return true;
}

/* async-signal-safe. n of a CFI_DEREF_* row. */
static inline int32_t cfi_deref_offset(int32_t cfa_off)
{
	return (int16_t)(uint16_t)((uint32_t)cfa_off & 0xffff);
}

/* async-signal-safe. a of a CFI_DEREF_* row. */
static inline int32_t cfi_deref_addend(int32_t cfa_off)
{
	return (int32_t)((uint32_t)cfa_off >> 16);
}

/* Where the caller's frame pointer (rbp) is after this frame returns. */
enum cfi_fp_rule {
	CFI_FP_SAME = 0, /* unchanged (callee did not touch it yet) */
	CFI_FP_SAVED,	 /* saved at CFA + fp_off */
	CFI_FP_UNKNOWN,	 /* undefined or an expression: unknown from here on */
};

struct cfi_row {
	uint32_t pc; /* link-time vaddr - table base */
	int32_t cfa_off;
	int16_t fp_off;
	uint8_t kind;	 /* enum cfi_kind */
	uint8_t fp_rule; /* enum cfi_fp_rule */
};

struct cfi_table {
	uint64_t base;	      /* link-time vaddr that row pc 0 stands for */
	struct cfi_row *rows; /* sorted by pc, no two neighbours with equal rules */
	size_t nrows;
	/* page[p]: the last row with pc <= p * CFI_PAGE (0 when none), p < npages. A
	 * lookup binary-searches only the rows of one page: ~5 steps instead of ~16. */
	uint32_t *page;
	uint32_t npages;
	/* Parse statistics: what was skipped and why, for diagnostics and tests. */
	uint32_t fdes;		   /* FDEs turned into rows */
	uint32_t fdes_skipped;	   /* malformed, unsupported encoding, out of range */
	uint32_t rows_unsupported; /* rows with a rule we cannot evaluate */
	/* Tables of CFI_SHARED_MIN bytes or more live in one MAP_SHARED mapping of this
	 * length (rows, then page), 0 when from big_malloc: see cfi_table.c. */
	size_t shared_len;
};

#define CFI_PAGE_SHIFT 12
#define CFI_PAGE (1u << CFI_PAGE_SHIFT)

/* One section holding CFI: its bytes and the link-time vaddr of data[0] (used for
 * pc-relative pointers in .eh_frame). */
struct cfi_section {
	const uint8_t *data;
	size_t len;
	uint64_t vaddr;
	bool is_debug_frame; /* .debug_frame format (CIE id ~0, absolute addresses) */
};

/*
 * Builds a table from up to two sections (.eh_frame first; .debug_frame FDEs only fill
 * pcs no .eh_frame FDE covers). base: the module's lowest link-time vaddr; pcs must lie
 * within 4 GiB above it. Returns 0 or a negative errno (-ENOMEM, -ENOENT when no FDE
 * could be used); on success *out owns its rows (cfi_table_free).
 */
int cfi_table_build(const struct cfi_section *secs, size_t nsecs, uint64_t base,
		    struct cfi_table *out);

/*
 * Builds the table of an ELF file on disk (or, with image != NULL, of an in-memory
 * image of image_len bytes such as the vdso), reading .eh_frame and .debug_frame
 * (elf_image.h). Returns 0 or a negative errno.
 */
int cfi_table_build_elf(const char *path, const void *image, size_t image_len,
			struct cfi_table *out);

void cfi_table_free(struct cfi_table *t);

/* async-signal-safe. The row covering link-time vaddr `vaddr`, or NULL when none: a
 * binary search over the immutable rows, narrowed by the page index; no calls, no
 * writes. Inline: the unwinder (agent/unwind/unwind_dwarf.c) looks up every frame of
 * every sample, one after another (a frame's pc is read where the previous frame's row
 * says), so what it waits for is the latency of this search. */
static inline const struct cfi_row *cfi_table_find(const struct cfi_table *t, uint64_t vaddr)
{
	if (!t || t->nrows == 0 || vaddr < t->base || vaddr - t->base > UINT32_MAX)
		return NULL;
	uint32_t pc = (uint32_t)(vaddr - t->base);
	size_t lo = 0, hi = t->nrows;
	if (pc < t->rows[0].pc)
		return NULL;
	uint32_t p = pc >> CFI_PAGE_SHIFT;
	if (t->page && p < t->npages) {
		/* The answer lies in [page[p], page[p + 1]]: page[p] has pc <= pc. */
		lo = t->page[p];
		if (p + 1 < t->npages)
			hi = (size_t)t->page[p + 1] + 1;
	} else if (t->page) {
		lo = t->nrows - 1; /* past the last page: the last row */
	}
	/* Last row with row.pc <= pc; it lies in [r, r + n). Each step keeps the upper
	 * half when its first row qualifies, else the lower n - half rows (for an odd n,
	 * one row more than the lower half: a row past the answer, never chosen since the
	 * rows are sorted). n does not depend on the comparisons: r is the only value
	 * carried from one step to the next that does, so a step waits for one load and
	 * one compare, not also for the bounds' arithmetic. */
	const struct cfi_row *r = &t->rows[lo];
	for (size_t n = hi - lo; n > 1;) {
		size_t half = n / 2;
		if (r[half].pc <= pc)
			r += half;
		n -= half;
	}
	return r->kind == CFI_NONE ? NULL : r;
}

/* Bytes the rows take. */
static inline size_t cfi_table_bytes(const struct cfi_table *t)
{
	return t->nrows * sizeof(struct cfi_row) + t->npages * sizeof(uint32_t);
}

#endif
