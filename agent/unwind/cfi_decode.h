/*
 * cfi_decode.h - decoding of DWARF call frame information, shared by the table builder
 * (cfi_parse.c: every FDE of a section) and the single-pc lookup (cfi_lookup.c: one FDE,
 * from a signal handler).
 *
 * Owns: the bounded byte reader (struct cfi_cursor), CIE parsing and the state its
 * initial instructions give, FDE headers, the CFA program interpreter, and the one
 * conversion of the interpreter's state into a struct cfi_row, so both callers produce
 * the same rows.
 * Context: every function declared here is async-signal-safe: no allocation, no locks,
 * no stdio, no errno, no libc calls; every read goes through a cursor and is checked
 * against its end; the stack is bounded (the remember_state stack is a fixed array in
 * struct cfi_prog). The table builder calls them in normal context, the lookup from a
 * signal handler. x86-64 System V register numbers only.
 */
#ifndef DDPROF_AGENT_CFI_DECODE_H
#define DDPROF_AGENT_CFI_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "agent/unwind/cfi_table.h"

/* Pointer encodings of .eh_frame and .eh_frame_hdr (LSB "DWARF Extensions"). */
enum {
	CFI_PE_absptr = 0x00,
	CFI_PE_uleb128 = 0x01,
	CFI_PE_udata2 = 0x02,
	CFI_PE_udata4 = 0x03,
	CFI_PE_udata8 = 0x04,
	CFI_PE_sleb128 = 0x09,
	CFI_PE_sdata2 = 0x0a,
	CFI_PE_sdata4 = 0x0b,
	CFI_PE_sdata8 = 0x0c,
	CFI_PE_pcrel = 0x10,
	CFI_PE_datarel = 0x30,
	CFI_PE_indirect = 0x80,
	CFI_PE_omit = 0xff,
};

/* ---------------------------------------------------------------- bounded reader */

/* Reads [p, end). Once a read would pass end, bad is set and every later read gives 0:
 * callers check bad once after a group of reads. */
struct cfi_cursor {
	const uint8_t *p, *end;
	bool bad;
};

/* async-signal-safe. memcpy/memset of constant sizes: inlined by the compiler. */
static inline bool cfi_cur_take(struct cfi_cursor *c, void *dst, size_t n)
{
	if (c->bad || (size_t)(c->end - c->p) < n) {
		c->bad = true;
		memset(dst, 0, n);
		return false;
	}
	memcpy(dst, c->p, n);
	c->p += n;
	return true;
}

/* async-signal-safe */
static inline uint8_t cfi_cur_u8(struct cfi_cursor *c)
{
	uint8_t v;
	cfi_cur_take(c, &v, 1);
	return v;
}

/* async-signal-safe */
static inline uint16_t cfi_cur_u16(struct cfi_cursor *c)
{
	uint16_t v;
	cfi_cur_take(c, &v, 2);
	return v;
}

/* async-signal-safe */
static inline uint32_t cfi_cur_u32(struct cfi_cursor *c)
{
	uint32_t v;
	cfi_cur_take(c, &v, 4);
	return v;
}

/* async-signal-safe */
static inline uint64_t cfi_cur_u64(struct cfi_cursor *c)
{
	uint64_t v;
	cfi_cur_take(c, &v, 8);
	return v;
}

/* async-signal-safe */
static inline uint64_t cfi_cur_uleb(struct cfi_cursor *c)
{
	uint64_t v = 0;
	for (unsigned shift = 0;; shift += 7) {
		uint8_t b = cfi_cur_u8(c);
		if (c->bad)
			return 0;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return v;
		if (shift > 70) {
			c->bad = true; /* over-long encoding */
			return 0;
		}
	}
}

/* async-signal-safe */
static inline int64_t cfi_cur_sleb(struct cfi_cursor *c)
{
	/* Unsigned until the end: the sign extension of a 9-byte value shifts into bit
	 * 63, undefined behaviour in int64_t. */
	uint64_t v = 0;
	unsigned shift = 0;
	uint8_t b;
	do {
		b = cfi_cur_u8(c);
		if (c->bad)
			return 0;
		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (shift > 77) {
			c->bad = true;
			return 0;
		}
	} while (b & 0x80);
	if (shift < 64 && (b & 0x40))
		v |= ~(uint64_t)0 << shift;
	return (int64_t)v; /* two's complement: gcc and clang define the conversion */
}

/* async-signal-safe */
static inline void cfi_cur_skip(struct cfi_cursor *c, uint64_t n)
{
	if (c->bad || (uint64_t)(c->end - c->p) < n) {
		c->bad = true;
		return;
	}
	c->p += n;
}

/* ---------------------------------------------------------------- CIEs and FDEs */

struct cfi_cie {
	uint64_t caf; /* code alignment factor */
	int64_t daf;  /* data alignment factor */
	uint64_t ra_reg;
	uint8_t fde_enc; /* pointer encoding of FDE addresses */
	bool has_z;	 /* FDEs carry augmentation data */
	bool signal;	 /* 'S': frames of this CIE are signal trampolines */
	const uint8_t *insns, *insns_end;
};

/* The interpreter's register rules, before they become a row. */
enum cfi_reg_rule { CFI_RULE_SAME = 0, CFI_RULE_OFFSET, CFI_RULE_UNDEF, CFI_RULE_OTHER };

struct cfi_state {
	int64_t cfa_off, fp_off, ra_off;
	uint8_t cfa_kind;	  /* CFI_SP, CFI_FP, CFI_REG, CFI_PLT, CFI_DEREF_* or CFI_NONE */
	uint8_t cfa_reg;	  /* CFI_REG: the DWARF register (another than rsp and rbp) */
	uint8_t fp_rule, ra_rule; /* enum cfi_reg_rule */
};

/*
 * async-signal-safe. Parses the CIE at s->data + off and runs its initial instructions
 * into *init. False when it is unusable (malformed, an unknown augmentation, a return
 * address column other than rip): its FDEs are skipped.
 */
bool cfi_decode_cie_read(const struct cfi_section *s, uint64_t off, struct cfi_cie *cie,
			 struct cfi_state *init);

enum cfi_entry_kind {
	CFI_ENTRY_ZERO,	     /* length 0: .eh_frame's terminator, padding in .debug_frame */
	CFI_ENTRY_TRUNCATED, /* its length runs past the section: nothing after it is read */
	CFI_ENTRY_CIE,
	CFI_ENTRY_FDE,
	CFI_ENTRY_FDE_BAD_CIE, /* an FDE whose CIE pointer points before the section */
};

/* One CIE or FDE: the bytes after its CIE pointer, and where the next entry starts. */
struct cfi_entry {
	const uint8_t *body, *end;
	uint64_t next;	  /* offset of the next entry in the section */
	uint64_t cie_off; /* CFI_ENTRY_FDE: its CIE's offset in the section */
};

/* async-signal-safe. Reads the header of the entry at s->data + off (every byte of it
 * inside the section). Returns an enum cfi_entry_kind. */
int cfi_decode_entry_read(const struct cfi_section *s, uint64_t off, struct cfi_entry *e);

struct cfi_fde {
	uint64_t start, range;		  /* link-time pcs [start, start + range) */
	const uint8_t *insns, *insns_end; /* its CFA program */
	bool aug_ok;			  /* augmentation data inside the entry */
};

/* async-signal-safe. Decodes the pc range of FDE e of CIE cie. False when its pointers
 * cannot be read (an unsupported encoding, truncated); out->aug_ok false when they can
 * but its augmentation data runs past the entry. */
bool cfi_decode_fde_read(const struct cfi_section *s, const struct cfi_entry *e,
			 const struct cfi_cie *cie, struct cfi_fde *out);

/* ---------------------------------------------------------------- CFA programs */

/* Depth of DW_CFA_remember_state nesting we follow (deeper: the FDE is malformed for
 * us). GCC nests one level around each epilogue; 16 leaves ample room. */
#define CFI_STATE_STACK_MAX 16

/* One run of a CFA program. Three modes:
 *  - init == NULL: a CIE's initial instructions (advances and restores are ignored);
 *  - out != NULL: the table builder's, every row of the FDE into out[0..room);
 *  - out == NULL: the lookup's, stop at the row covering target.
 * Fill it with cfi_decode_prog_start (which leaves the remember_state stack uninitialized:
 * no 512-byte clear per FDE), then set the mode's fields. */
struct cfi_prog {
	const struct cfi_cie *cie;
	const struct cfi_section *sec;
	const struct cfi_state *init; /* after the CIE's program, for DW_CFA_restore */
	struct cfi_cursor c;	      /* the instructions not run yet */
	uint64_t loc, end;	      /* pc the current state applies from; the FDE's end */
	/* Table mode: rows written go to out[n] (n < room); row pcs are relative to base and
	 * rows outside [base, base + 4 GiB) are dropped. unsupported counts rows with a
	 * rule we cannot evaluate. */
	struct cfi_row *out;
	size_t n, room;
	uint64_t base;
	uint32_t unsupported;
	uint64_t target; /* lookup mode: the link-time pc whose row is wanted */
	int depth;
	struct cfi_state stack[CFI_STATE_STACK_MAX];
};

enum {
	CFI_PROG_BAD = -1,	/* malformed program: drop the FDE */
	CFI_PROG_END = 0,	/* program done: *st applies from pg->loc to pg->end */
	CFI_PROG_FULL = 1,	/* table mode: out is full; give more room and call again */
	CFI_PROG_AT_TARGET = 2, /* lookup mode: *st applies from pg->loc past target */
};

/* async-signal-safe. Sets up pg to run [insns, insns_end) for the FDE [start, end) of
 * cie (CIE program: init NULL, start = end = 0), in lookup mode with target 0: set
 * out/room/base (table mode) or target (lookup mode) after. */
void cfi_decode_prog_start(struct cfi_prog *pg, const struct cfi_cie *cie,
			   const struct cfi_section *sec, const struct cfi_state *init,
			   const uint8_t *insns, const uint8_t *insns_end, uint64_t start,
			   uint64_t end);

/* async-signal-safe. Runs pg's program on *st until it ends, fails, fills out, or
 * reaches the row covering target. Returns one of CFI_PROG_*; resumable after
 * CFI_PROG_FULL. In lookup mode the caller must have checked start <= target < end. */
int cfi_decode_prog_run(struct cfi_prog *pg, struct cfi_state *st);

/* async-signal-safe. The row for state st starting at pc (already relative to the
 * table's base), as the table stores it: CFI_SIGNAL for a signal CIE, CFI_ROOT when
 * the return address is undefined, SP/FP/PLT rules with the frame pointer's rule, or
 * CFI_NONE (returns false) for rules the unwinder cannot evaluate. */
bool cfi_decode_row_from_state(const struct cfi_state *st, bool signal, uint32_t pc,
			       struct cfi_row *out);

#endif
