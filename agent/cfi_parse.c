/*
 * cfi_parse.c - DWARF call frame information to unsorted unwind rows (see cfi_parse.h).
 *
 * Context: normal context (the ddprof-modules thread, tests); never a signal handler.
 *
 * Why our own CFI interpreter instead of libdw's dwarf_cfi_addrframe: libdw answers one
 * address at a time and re-runs the FDE's program from its start for each, which is
 * quadratic per FDE and too slow to tabulate a large binary before its first samples
 * (python3 has ~10k FDEs). One linear pass over each FDE's instructions gives every
 * row at once.
 *
 * Every read goes through struct cursor, which checks bounds: a malformed entry skips
 * that FDE (counted in fdes_skipped), never reads past the section.
 */
#include "cfi_parse.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem_populate.h"

/* How far ahead of the rows written emit maps the row buffer. */
#define POPULATE_STEP (256 * 1024)

#define REG_FP 6       /* rbp */
#define REG_SP 7       /* rsp */
#define REG_RA 16      /* return address (rip) */
#define RA_OFFSET (-8) /* the call pushed it just below the CFA */

/* Call frame instructions (DWARF 5, section 6.4.2) and GNU extensions. */
enum {
	CFA_nop = 0x00,
	CFA_set_loc = 0x01,
	CFA_advance_loc1 = 0x02,
	CFA_advance_loc2 = 0x03,
	CFA_advance_loc4 = 0x04,
	CFA_offset_extended = 0x05,
	CFA_restore_extended = 0x06,
	CFA_undefined = 0x07,
	CFA_same_value = 0x08,
	CFA_register = 0x09,
	CFA_remember_state = 0x0a,
	CFA_restore_state = 0x0b,
	CFA_def_cfa = 0x0c,
	CFA_def_cfa_register = 0x0d,
	CFA_def_cfa_offset = 0x0e,
	CFA_def_cfa_expression = 0x0f,
	CFA_expression = 0x10,
	CFA_offset_extended_sf = 0x11,
	CFA_def_cfa_sf = 0x12,
	CFA_def_cfa_offset_sf = 0x13,
	CFA_val_offset = 0x14,
	CFA_val_offset_sf = 0x15,
	CFA_val_expression = 0x16,
	CFA_GNU_args_size = 0x2e,
	CFA_GNU_negative_offset_extended = 0x2f,
	CFA_advance_loc = 0x40, /* high two bits */
	CFA_offset = 0x80,
	CFA_restore = 0xc0,
};

/* Pointer encodings of .eh_frame (LSB "DWARF Extensions"). */
enum {
	PE_absptr = 0x00,
	PE_uleb128 = 0x01,
	PE_udata2 = 0x02,
	PE_udata4 = 0x03,
	PE_udata8 = 0x04,
	PE_sleb128 = 0x09,
	PE_sdata2 = 0x0a,
	PE_sdata4 = 0x0b,
	PE_sdata8 = 0x0c,
	PE_pcrel = 0x10,
	PE_indirect = 0x80,
	PE_omit = 0xff,
};

/* ---------------------------------------------------------------- bounded reader */

struct cursor {
	const uint8_t *p, *end;
	bool bad; /* a read went past end: everything read since is 0 */
};

static bool cur_take(struct cursor *c, void *dst, size_t n)
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

static uint8_t cur_u8(struct cursor *c)
{
	uint8_t v;
	cur_take(c, &v, 1);
	return v;
}

static uint16_t cur_u16(struct cursor *c)
{
	uint16_t v;
	cur_take(c, &v, 2);
	return v;
}

static uint32_t cur_u32(struct cursor *c)
{
	uint32_t v;
	cur_take(c, &v, 4);
	return v;
}

static uint64_t cur_u64(struct cursor *c)
{
	uint64_t v;
	cur_take(c, &v, 8);
	return v;
}

static uint64_t cur_uleb(struct cursor *c)
{
	uint64_t v = 0;
	for (unsigned shift = 0;; shift += 7) {
		uint8_t b = cur_u8(c);
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

static int64_t cur_sleb(struct cursor *c)
{
	int64_t v = 0;
	unsigned shift = 0;
	uint8_t b;
	do {
		b = cur_u8(c);
		if (c->bad)
			return 0;
		if (shift < 64)
			v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
		shift += 7;
		if (shift > 77) {
			c->bad = true;
			return 0;
		}
	} while (b & 0x80);
	if (shift < 64 && (b & 0x40))
		v |= -((int64_t)1 << shift);
	return v;
}

static void cur_skip(struct cursor *c, uint64_t n)
{
	if (c->bad || (uint64_t)(c->end - c->p) < n) {
		c->bad = true;
		return;
	}
	c->p += n;
}

/*
 * Reads a pointer in encoding enc. sec_data/sec_vaddr map a byte position to its
 * link-time address for pc-relative encodings. Returns false for encodings we do not
 * support (indirect, datarel, textrel, funcrel): the FDE is skipped.
 */
static bool cur_ptr(struct cursor *c, uint8_t enc, const uint8_t *sec_data, uint64_t sec_vaddr,
		    uint64_t *out)
{
	uint64_t here = sec_vaddr + (uint64_t)(c->p - sec_data);
	uint64_t v;
	if (enc == PE_omit)
		return false;
	switch (enc & 0x0f) {
	case PE_absptr:
	case PE_udata8:
	case PE_sdata8:
		v = cur_u64(c);
		break;
	case PE_uleb128:
		v = cur_uleb(c);
		break;
	case PE_udata2:
		v = cur_u16(c);
		break;
	case PE_udata4:
		v = cur_u32(c);
		break;
	case PE_sleb128:
		v = (uint64_t)cur_sleb(c);
		break;
	case PE_sdata2:
		v = (uint64_t)(int64_t)(int16_t)cur_u16(c);
		break;
	case PE_sdata4:
		v = (uint64_t)(int64_t)(int32_t)cur_u32(c);
		break;
	default:
		return false;
	}
	if (enc & PE_indirect)
		return false;
	switch (enc & 0x70) {
	case 0:
		break;
	case PE_pcrel:
		v += here;
		break;
	default:
		return false;
	}
	*out = v;
	return !c->bad;
}

/* ---------------------------------------------------------------- CIE parsing */

struct cie {
	uint64_t caf; /* code alignment factor */
	int64_t daf;  /* data alignment factor */
	uint64_t ra_reg;
	uint8_t fde_enc; /* pointer encoding of FDE addresses */
	bool has_z;	 /* FDEs carry augmentation data */
	bool signal;	 /* 'S': frames of this CIE are signal trampolines */
	const uint8_t *insns, *insns_end;
};

/* Parses the CIE whose entry starts at off. Returns false when unusable. */
static bool parse_cie(const struct cfi_section *s, uint64_t off, struct cie *out)
{
	if (off >= s->len)
		return false;
	struct cursor c = {s->data + off, s->data + s->len, false};
	uint64_t len = cur_u32(&c);
	bool dwarf64 = false;
	if (len == 0xffffffffu) {
		len = cur_u64(&c);
		dwarf64 = true;
	}
	if (c.bad || len == 0 || len > (uint64_t)(c.end - c.p))
		return false;
	const uint8_t *end = c.p + len;
	c.end = end;
	uint64_t id = dwarf64 ? cur_u64(&c) : cur_u32(&c);
	uint64_t want = s->is_debug_frame ? (dwarf64 ? ~(uint64_t)0 : 0xffffffffu) : 0;
	if (id != want)
		return false;
	uint8_t version = cur_u8(&c);
	if (version != 1 && version != 3 && version != 4)
		return false;
	const char *aug = (const char *)c.p;
	size_t aug_len = strnlen(aug, (size_t)(c.end - c.p));
	cur_skip(&c, aug_len + 1);
	if (version == 4) {
		uint8_t addr_size = cur_u8(&c);
		uint8_t seg_size = cur_u8(&c);
		if (addr_size != 8 || seg_size != 0)
			return false;
	}
	memset(out, 0, sizeof(*out));
	out->caf = cur_uleb(&c);
	out->daf = cur_sleb(&c);
	out->ra_reg = version == 1 ? cur_u8(&c) : cur_uleb(&c);
	out->fde_enc = PE_absptr;
	if (c.bad)
		return false;
	if (aug_len > 0) {
		if (aug[0] != 'z')
			return false; /* "eh" and other pre-z forms: cannot find the insns */
		out->has_z = true;
		uint64_t aug_data_len = cur_uleb(&c);
		if (c.bad || aug_data_len > (uint64_t)(c.end - c.p))
			return false;
		struct cursor a = {c.p, c.p + aug_data_len, false};
		for (size_t i = 1; i < aug_len; i++) {
			switch (aug[i]) {
			case 'R':
				out->fde_enc = cur_u8(&a);
				break;
			case 'P': {
				/* Personality routine: only its size matters here. */
				uint8_t enc = cur_u8(&a);
				uint64_t ignored;
				if (!cur_ptr(&a, enc & 0x0f, s->data, s->vaddr, &ignored))
					return false;
				break;
			}
			case 'L':
				cur_u8(&a);
				break;
			case 'S':
				out->signal = true;
				break;
			case 'B':
			case 'G':
				break;
			default:
				return false; /* unknown augmentation: layout unknown */
			}
			if (a.bad)
				return false;
		}
		cur_skip(&c, aug_data_len);
	}
	if (c.bad || out->caf == 0)
		return false;
	out->insns = c.p;
	out->insns_end = end;
	return true;
}

/* ---------------------------------------------------------------- CFA programs */

enum reg_rule { RULE_SAME = 0, RULE_OFFSET, RULE_UNDEF, RULE_OTHER };

struct frame_state {
	uint8_t cfa_kind; /* CFI_SP, CFI_FP, CFI_PLT or CFI_NONE */
	int64_t cfa_off;
	uint8_t fp_rule, ra_rule; /* enum reg_rule */
	int64_t fp_off, ra_off;
};

#define STATE_STACK_MAX 16

/* The rows of one FDE: already in pc order, so sorting FDEs (10k in python3) and
 * concatenating is much cheaper than sorting every row (64k). */
static void emit(struct row_buf *b, uint64_t pc, const struct frame_state *st, bool signal,
		 bool end_marker)
{
	if (b->err)
		return;
	if (pc < b->base || pc - b->base > UINT32_MAX)
		return;
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;
		struct cfi_row *r = realloc(b->rows, cap * sizeof(*r));
		if (!r) {
			b->err = -ENOMEM;
			return;
		}
		b->rows = r;
		b->cap = cap;
		b->populated = b->n; /* the rest is fresh memory (or moved) */
	}
	if (b->n >= b->populated) {
		/* Rows are written one by one: map the next ones in one go (common/
		 * mem_populate.h: libc's table alone is ~100 pages, most of the start-up's
		 * faults), a bounded step ahead, never memory that will not be written. */
		size_t step = POPULATE_STEP / sizeof(*b->rows);
		size_t end = b->n + step < b->cap ? b->n + step : b->cap;
		mem_populate(b->rows + b->n, (end - b->n) * sizeof(*b->rows));
		b->populated = end;
	}
	struct cfi_row row = {.pc = (uint32_t)(pc - b->base), .kind = CFI_NONE};
	if (end_marker) {
		row.fp_rule = CFI_END_MARKER; /* sorts before a real row at the same pc */
	} else if (signal) {
		row.kind = CFI_SIGNAL;
	} else if (st->ra_rule == RULE_UNDEF) {
		row.kind = CFI_ROOT;
	} else if (st->cfa_kind != CFI_NONE && st->ra_rule == RULE_OFFSET &&
		   st->ra_off == RA_OFFSET && st->cfa_off >= INT32_MIN &&
		   st->cfa_off <= INT32_MAX) {
		row.kind = st->cfa_kind;
		row.cfa_off = (int32_t)st->cfa_off;
		if (st->fp_rule == RULE_SAME) {
			row.fp_rule = CFI_FP_SAME;
		} else if (st->fp_rule == RULE_OFFSET && st->fp_off >= INT16_MIN &&
			   st->fp_off <= INT16_MAX) {
			row.fp_rule = CFI_FP_SAVED;
			row.fp_off = (int16_t)st->fp_off;
		} else {
			row.fp_rule = CFI_FP_UNKNOWN;
		}
	} else {
		b->unsupported++;
	}
	b->rows[b->n++] = row;
}

/* The GNU ld PLT expression: DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and;
 * DW_OP_lit10 or lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus. Returns the
 * threshold (10 or 11) or 0 for any other expression. */
static int plt_expression(const uint8_t *e, uint64_t len)
{
	static const uint8_t head[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a};
	static const uint8_t tail[] = {0x2a, 0x33, 0x24, 0x22};
	if (len != sizeof(head) + 1 + sizeof(tail) || memcmp(e, head, sizeof(head)) != 0 ||
	    memcmp(e + sizeof(head) + 1, tail, sizeof(tail)) != 0)
		return 0;
	uint8_t lit = e[sizeof(head)];
	if (lit < 0x30 || lit > 0x4f)
		return 0;
	return lit - 0x30;
}

static void set_rule(struct frame_state *st, uint64_t reg, uint8_t rule, int64_t off)
{
	if (reg == REG_FP) {
		st->fp_rule = rule;
		st->fp_off = off;
	} else if (reg == REG_RA) {
		st->ra_rule = rule;
		st->ra_off = off;
	}
}

static void restore_rule(struct frame_state *st, const struct frame_state *init, uint64_t reg)
{
	if (reg == REG_FP) {
		st->fp_rule = init->fp_rule;
		st->fp_off = init->fp_off;
	} else if (reg == REG_RA) {
		st->ra_rule = init->ra_rule;
		st->ra_off = init->ra_off;
	}
}

struct program {
	const struct cie *cie;
	const struct cfi_section *sec;
	uint64_t loc, end; /* current pc and the FDE's end; emit=false for the CIE */
	bool emit;
	const struct frame_state *init; /* after the CIE's program, for DW_CFA_restore */
};

/* Runs one CFA program. Returns false on malformed input. */
static bool run_program(struct row_buf *b, struct program *pg, const uint8_t *insns,
			const uint8_t *end, struct frame_state *st)
{
	struct frame_state stack[STATE_STACK_MAX];
	int depth = 0;
	struct cursor c = {insns, end, false};
	const struct cie *cie = pg->cie;
	while (c.p < c.end && !c.bad) {
		uint8_t op = cur_u8(&c);
		uint64_t delta = 0, reg, uoff;
		int64_t soff;
		bool advance = false;
		switch (op & 0xc0) {
		case CFA_advance_loc:
			delta = (op & 0x3f) * cie->caf;
			advance = true;
			break;
		case CFA_offset:
			uoff = cur_uleb(&c);
			set_rule(st, op & 0x3f, RULE_OFFSET, (int64_t)uoff * cie->daf);
			break;
		case CFA_restore:
			if (pg->init)
				restore_rule(st, pg->init, op & 0x3f);
			break;
		default:
			switch (op) {
			case CFA_nop:
				break;
			case CFA_set_loc: {
				uint64_t to;
				if (!cur_ptr(&c, cie->fde_enc, pg->sec->data, pg->sec->vaddr,
					     &to) ||
				    to < pg->loc)
					return false;
				delta = to - pg->loc;
				advance = true;
				break;
			}
			case CFA_advance_loc1:
				delta = cur_u8(&c) * cie->caf;
				advance = true;
				break;
			case CFA_advance_loc2:
				delta = cur_u16(&c) * cie->caf;
				advance = true;
				break;
			case CFA_advance_loc4:
				delta = cur_u32(&c) * cie->caf;
				advance = true;
				break;
			case CFA_offset_extended:
				reg = cur_uleb(&c);
				uoff = cur_uleb(&c);
				set_rule(st, reg, RULE_OFFSET, (int64_t)uoff * cie->daf);
				break;
			case CFA_offset_extended_sf:
				reg = cur_uleb(&c);
				soff = cur_sleb(&c);
				set_rule(st, reg, RULE_OFFSET, soff * cie->daf);
				break;
			case CFA_GNU_negative_offset_extended:
				reg = cur_uleb(&c);
				uoff = cur_uleb(&c);
				set_rule(st, reg, RULE_OFFSET, -(int64_t)uoff * cie->daf);
				break;
			case CFA_restore_extended:
				reg = cur_uleb(&c);
				if (pg->init)
					restore_rule(st, pg->init, reg);
				break;
			case CFA_undefined:
				set_rule(st, cur_uleb(&c), RULE_UNDEF, 0);
				break;
			case CFA_same_value:
				set_rule(st, cur_uleb(&c), RULE_SAME, 0);
				break;
			case CFA_register:
				reg = cur_uleb(&c);
				cur_uleb(&c);
				set_rule(st, reg, RULE_OTHER, 0);
				break;
			case CFA_remember_state:
				if (depth == STATE_STACK_MAX)
					return false;
				stack[depth++] = *st;
				break;
			case CFA_restore_state: {
				if (depth == 0)
					return false;
				/* The CFA rule is restored too (DWARF 5 clarified this; GCC
				 * emits remember/restore around epilogues expecting it). */
				*st = stack[--depth];
				break;
			}
			case CFA_def_cfa:
				reg = cur_uleb(&c);
				uoff = cur_uleb(&c);
				st->cfa_kind = reg == REG_SP   ? CFI_SP
					       : reg == REG_FP ? CFI_FP
							       : CFI_NONE;
				st->cfa_off = (int64_t)uoff;
				break;
			case CFA_def_cfa_sf:
				reg = cur_uleb(&c);
				soff = cur_sleb(&c);
				st->cfa_kind = reg == REG_SP   ? CFI_SP
					       : reg == REG_FP ? CFI_FP
							       : CFI_NONE;
				st->cfa_off = soff * cie->daf;
				break;
			case CFA_def_cfa_register:
				reg = cur_uleb(&c);
				if (st->cfa_kind == CFI_PLT)
					st->cfa_kind = CFI_NONE; /* offset meaningless now */
				else
					st->cfa_kind = reg == REG_SP   ? CFI_SP
						       : reg == REG_FP ? CFI_FP
								       : CFI_NONE;
				break;
			case CFA_def_cfa_offset:
				if (st->cfa_kind == CFI_PLT)
					st->cfa_kind = CFI_NONE;
				st->cfa_off = (int64_t)cur_uleb(&c);
				break;
			case CFA_def_cfa_offset_sf:
				if (st->cfa_kind == CFI_PLT)
					st->cfa_kind = CFI_NONE;
				st->cfa_off = cur_sleb(&c) * cie->daf;
				break;
			case CFA_def_cfa_expression: {
				uint64_t len = cur_uleb(&c);
				const uint8_t *e = c.p;
				cur_skip(&c, len);
				int thr = c.bad ? 0 : plt_expression(e, len);
				st->cfa_kind = thr ? CFI_PLT : CFI_NONE;
				st->cfa_off = thr;
				break;
			}
			case CFA_expression:
			case CFA_val_expression:
				reg = cur_uleb(&c);
				cur_skip(&c, cur_uleb(&c));
				set_rule(st, reg, RULE_OTHER, 0);
				break;
			case CFA_val_offset:
				reg = cur_uleb(&c);
				cur_uleb(&c);
				set_rule(st, reg, RULE_OTHER, 0);
				break;
			case CFA_val_offset_sf:
				reg = cur_uleb(&c);
				cur_sleb(&c);
				set_rule(st, reg, RULE_OTHER, 0);
				break;
			case CFA_GNU_args_size:
				cur_uleb(&c);
				break;
			default:
				return false; /* unknown opcode: operand sizes unknown */
			}
		}
		if (advance && pg->emit) {
			if (delta > 0 && pg->loc < pg->end)
				emit(b, pg->loc, st, cie->signal, false);
			pg->loc += delta;
		}
	}
	return !c.bad;
}

/* ---------------------------------------------------------------- FDE walk */

static void initial_state(const struct cie *cie, struct frame_state *st)
{
	memset(st, 0, sizeof(*st));
	st->cfa_kind = CFI_NONE;
	st->ra_rule = RULE_SAME;
	(void)cie;
}

void cfi_rows_add_chunk(struct row_buf *b, size_t first)
{
	if (b->err || b->n == first)
		return;
	if (b->nchunks == b->capchunks) {
		size_t cap = b->capchunks ? b->capchunks * 2 : 256;
		struct chunk *c = realloc(b->chunks, cap * sizeof(*c));
		if (!c) {
			b->err = -ENOMEM;
			return;
		}
		b->chunks = c;
		b->capchunks = cap;
	}
	b->chunks[b->nchunks++] =
	    (struct chunk){b->rows[first].pc, (uint32_t)first, (uint32_t)(b->n - first)};
}

/* Parses every FDE of one section, emitting rows into b. Returns FDEs used. */
uint32_t cfi_parse_section(struct row_buf *b, const struct cfi_section *s, uint32_t *skipped,
			   const struct cfi_row *cover, size_t ncover)
{
	uint32_t used = 0;
	uint64_t off = 0;
	uint64_t cached_cie_off = ~(uint64_t)0;
	bool cached_ok = false;
	struct cie cie;
	struct frame_state cie_state;
	while (off + 4 <= s->len && !b->err) {
		struct cursor c = {s->data + off, s->data + s->len, false};
		uint64_t len = cur_u32(&c);
		bool dwarf64 = false;
		if (len == 0) {
			if (!s->is_debug_frame)
				break; /* .eh_frame terminator */
			off += 4;
			continue;
		}
		if (len == 0xffffffffu) {
			len = cur_u64(&c);
			dwarf64 = true;
		}
		if (c.bad || len > (uint64_t)(c.end - c.p))
			break;
		const uint8_t *entry_end = c.p + len;
		uint64_t next = (uint64_t)(entry_end - s->data);
		c.end = entry_end;
		const uint8_t *id_pos = c.p;
		uint64_t id = dwarf64 ? cur_u64(&c) : cur_u32(&c);
		bool is_cie =
		    s->is_debug_frame ? id == (dwarf64 ? ~(uint64_t)0 : 0xffffffffu) : id == 0;
		if (is_cie) {
			off = next;
			continue;
		}
		uint64_t cie_off = s->is_debug_frame ? id : (uint64_t)(id_pos - s->data) - id;
		if (!s->is_debug_frame && id > (uint64_t)(id_pos - s->data)) {
			(*skipped)++;
			off = next;
			continue;
		}
		if (cie_off != cached_cie_off) {
			cached_cie_off = cie_off;
			cached_ok = parse_cie(s, cie_off, &cie);
			if (cached_ok) {
				initial_state(&cie, &cie_state);
				struct program pg = {&cie, s, 0, 0, false, NULL};
				cached_ok =
				    cie.ra_reg == REG_RA &&
				    run_program(b, &pg, cie.insns, cie.insns_end, &cie_state);
			}
		}
		uint64_t start, range;
		uint8_t enc = s->is_debug_frame ? PE_absptr : cie.fde_enc;
		if (!cached_ok || !cur_ptr(&c, enc, s->data, s->vaddr, &start) ||
		    !cur_ptr(&c, enc & 0x0f, s->data, s->vaddr, &range)) {
			(*skipped)++;
			off = next;
			continue;
		}
		if (cie.has_z)
			cur_skip(&c, cur_uleb(&c));
		if (c.bad || range == 0 || start + range < start || start < b->base ||
		    start + range - b->base > UINT32_MAX) {
			/* range 0: discarded by the linker (garbage-collected section). */
			if (range != 0)
				(*skipped)++;
			off = next;
			continue;
		}
		if (cover && cfi_table_find(&(struct cfi_table){.base = b->base,
								.rows = (struct cfi_row *)cover,
								.nrows = ncover},
					    start) != NULL) {
			off = next; /* .eh_frame already describes this code */
			continue;
		}
		struct frame_state st = cie_state;
		struct program pg = {&cie, s, start, start + range, true, &cie_state};
		size_t mark = b->n;
		if (!run_program(b, &pg, c.p, entry_end, &st)) {
			b->n = mark; /* drop this FDE's partial rows */
			(*skipped)++;
			off = next;
			continue;
		}
		if (pg.loc < pg.end)
			emit(b, pg.loc, &st, cie.signal, false);
		emit(b, start + range, &st, false, true);
		cfi_rows_add_chunk(b, mark);
		used++;
		off = next;
	}
	return used;
}
