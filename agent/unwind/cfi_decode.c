/*
 * cfi_decode.c - DWARF call frame information decoding (see cfi_decode.h).
 *
 * This file is async-signal-safe: every function in it (cfi_decode_cie_read, cfi_decode_entry_read,
 * cfi_decode_fde_read, cfi_decode_prog_start, cfi_decode_prog_run, cfi_decode_row_from_state and
 * their static helpers) allocates nothing, takes no lock, calls no libc function (the cursor's
 * constant-size memcpy/memset are inlined; `nm -u` of the object lists nothing) and
 * leaves errno alone. The table builder (cfi_parse.c) calls it in normal context, the
 * single-pc lookup (cfi_lookup.c) from a signal handler.
 *
 * Why our own CFI interpreter instead of libdw's dwarf_cfi_addrframe: libdw answers one
 * address at a time and re-runs the FDE's program from its start for each, which is
 * quadratic per FDE and too slow to tabulate a large binary before its first samples
 * (python3 has ~10k FDEs). One linear pass over each FDE's instructions gives every
 * row at once; the lookup runs the same pass and stops at its pc.
 *
 * Every read goes through struct cfi_cursor, which checks bounds: a malformed entry
 * is refused (the builder skips that FDE), never read past.
 */
#include "agent/unwind/cfi_decode.h"

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

/*
 * async-signal-safe. Reads a pointer in encoding enc. sec_data/sec_vaddr map a byte
 * position to its link-time address for pc-relative encodings. Returns false for
 * encodings we do not support (indirect, datarel, textrel, funcrel): the FDE is skipped.
 */
static bool read_ptr(struct cfi_cursor *c, uint8_t enc, const uint8_t *sec_data, uint64_t sec_vaddr,
		     uint64_t *out)
{
	uint64_t here = sec_vaddr + (uint64_t)(c->p - sec_data);
	uint64_t v;
	if (enc == CFI_PE_omit)
		return false;
	switch (enc & 0x0f) {
	case CFI_PE_absptr:
	case CFI_PE_udata8:
	case CFI_PE_sdata8:
		v = cfi_cur_u64(c);
		break;
	case CFI_PE_uleb128:
		v = cfi_cur_uleb(c);
		break;
	case CFI_PE_udata2:
		v = cfi_cur_u16(c);
		break;
	case CFI_PE_udata4:
		v = cfi_cur_u32(c);
		break;
	case CFI_PE_sleb128:
		v = (uint64_t)cfi_cur_sleb(c);
		break;
	case CFI_PE_sdata2:
		v = (uint64_t)(int64_t)(int16_t)cfi_cur_u16(c);
		break;
	case CFI_PE_sdata4:
		v = (uint64_t)(int64_t)(int32_t)cfi_cur_u32(c);
		break;
	default:
		return false;
	}
	if (enc & CFI_PE_indirect)
		return false;
	switch (enc & 0x70) {
	case 0:
		break;
	case CFI_PE_pcrel:
		v += here;
		break;
	default:
		return false;
	}
	*out = v;
	return !c->bad;
}

/* ---------------------------------------------------------------- CIE parsing */

/* async-signal-safe. strnlen without the libc call. */
static size_t bounded_strlen(const uint8_t *p, size_t max)
{
	size_t n = 0;
	while (n < max && p[n] != 0)
		n++;
	return n;
}

/* async-signal-safe. Parses the CIE whose entry starts at off. False when unusable. */
static bool parse_cie(const struct cfi_section *s, uint64_t off, struct cfi_cie *out)
{
	if (off >= s->len)
		return false;
	struct cfi_cursor c = {s->data + off, s->data + s->len, false};
	uint64_t len = cfi_cur_u32(&c);
	bool dwarf64 = false;
	if (len == 0xffffffffu) {
		len = cfi_cur_u64(&c);
		dwarf64 = true;
	}
	if (c.bad || len == 0 || len > (uint64_t)(c.end - c.p))
		return false;
	const uint8_t *end = c.p + len;
	c.end = end;
	uint64_t id = dwarf64 ? cfi_cur_u64(&c) : cfi_cur_u32(&c);
	uint64_t want = s->is_debug_frame ? (dwarf64 ? ~(uint64_t)0 : 0xffffffffu) : 0;
	if (id != want)
		return false;
	uint8_t version = cfi_cur_u8(&c);
	if (version != 1 && version != 3 && version != 4)
		return false;
	const uint8_t *aug = c.p;
	size_t aug_len = bounded_strlen(aug, (size_t)(c.end - c.p));
	cfi_cur_skip(&c, aug_len + 1);
	if (version == 4) {
		uint8_t addr_size = cfi_cur_u8(&c);
		uint8_t seg_size = cfi_cur_u8(&c);
		if (addr_size != 8 || seg_size != 0)
			return false;
	}
	*out = (struct cfi_cie){0};
	out->caf = cfi_cur_uleb(&c);
	out->daf = cfi_cur_sleb(&c);
	out->ra_reg = version == 1 ? cfi_cur_u8(&c) : cfi_cur_uleb(&c);
	out->fde_enc = CFI_PE_absptr;
	if (c.bad)
		return false;
	if (aug_len > 0) {
		if (aug[0] != 'z')
			return false; /* "eh" and other pre-z forms: cannot find the insns */
		out->has_z = true;
		uint64_t aug_data_len = cfi_cur_uleb(&c);
		if (c.bad || aug_data_len > (uint64_t)(c.end - c.p))
			return false;
		struct cfi_cursor a = {c.p, c.p + aug_data_len, false};
		for (size_t i = 1; i < aug_len; i++) {
			switch (aug[i]) {
			case 'R':
				out->fde_enc = cfi_cur_u8(&a);
				break;
			case 'P': {
				/* Personality routine: only its size matters here. */
				uint8_t enc = cfi_cur_u8(&a);
				uint64_t ignored;
				if (!read_ptr(&a, enc & 0x0f, s->data, s->vaddr, &ignored))
					return false;
				break;
			}
			case 'L':
				cfi_cur_u8(&a);
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
		cfi_cur_skip(&c, aug_data_len);
	}
	if (c.bad || out->caf == 0)
		return false;
	out->insns = c.p;
	out->insns_end = end;
	return true;
}

/* async-signal-safe */
bool cfi_decode_cie_read(const struct cfi_section *s, uint64_t off, struct cfi_cie *cie,
			 struct cfi_state *init)
{
	if (!parse_cie(s, off, cie) || cie->ra_reg != REG_RA)
		return false;
	*init = (struct cfi_state){.cfa_kind = CFI_NONE, .ra_rule = CFI_RULE_SAME};
	struct cfi_prog pg;
	cfi_decode_prog_start(&pg, cie, s, NULL, cie->insns, cie->insns_end, 0, 0);
	return cfi_decode_prog_run(&pg, init) == CFI_PROG_END;
}

/* ---------------------------------------------------------------- entries */

/* async-signal-safe */
int cfi_decode_entry_read(const struct cfi_section *s, uint64_t off, struct cfi_entry *e)
{
	if (off > s->len)
		return CFI_ENTRY_TRUNCATED;
	struct cfi_cursor c = {s->data + off, s->data + s->len, false};
	uint64_t len = cfi_cur_u32(&c);
	bool dwarf64 = false;
	if (c.bad)
		return CFI_ENTRY_TRUNCATED;
	if (len == 0) {
		e->next = off + 4;
		return CFI_ENTRY_ZERO;
	}
	if (len == 0xffffffffu) {
		len = cfi_cur_u64(&c);
		dwarf64 = true;
	}
	if (c.bad || len > (uint64_t)(c.end - c.p))
		return CFI_ENTRY_TRUNCATED;
	e->end = c.p + len;
	e->next = (uint64_t)(e->end - s->data);
	c.end = e->end;
	const uint8_t *id_pos = c.p;
	uint64_t id = dwarf64 ? cfi_cur_u64(&c) : cfi_cur_u32(&c);
	e->body = c.p; /* past end when the entry is too short: its readers find it bad */
	if (c.bad)
		e->body = e->end;
	bool is_cie = s->is_debug_frame ? id == (dwarf64 ? ~(uint64_t)0 : 0xffffffffu) : id == 0;
	if (is_cie)
		return CFI_ENTRY_CIE;
	/* .eh_frame: the CIE pointer counts back from its own position. */
	uint64_t pos = (uint64_t)(id_pos - s->data);
	if (!s->is_debug_frame && id > pos)
		return CFI_ENTRY_FDE_BAD_CIE;
	e->cie_off = s->is_debug_frame ? id : pos - id;
	return CFI_ENTRY_FDE;
}

/* async-signal-safe */
bool cfi_decode_fde_read(const struct cfi_section *s, const struct cfi_entry *e,
			 const struct cfi_cie *cie, struct cfi_fde *out)
{
	struct cfi_cursor c = {e->body, e->end, false};
	uint8_t enc = s->is_debug_frame ? CFI_PE_absptr : cie->fde_enc;
	if (!read_ptr(&c, enc, s->data, s->vaddr, &out->start) ||
	    !read_ptr(&c, enc & 0x0f, s->data, s->vaddr, &out->range))
		return false;
	if (cie->has_z)
		cfi_cur_skip(&c, cfi_cur_uleb(&c));
	out->aug_ok = !c.bad;
	out->insns = c.p;
	out->insns_end = e->end;
	return true;
}

/* ---------------------------------------------------------------- CFA programs */

/* async-signal-safe. cfi_decode_row_from_state, inlined into the interpreter's emit. */
static inline bool row_from_state(const struct cfi_state *st, bool signal, uint32_t pc,
				  struct cfi_row *out)
{
	struct cfi_row row = {.pc = pc, .kind = CFI_NONE};
	bool ok = true;
	if (signal) {
		row.kind = CFI_SIGNAL;
	} else if (st->ra_rule == CFI_RULE_UNDEF) {
		row.kind = CFI_ROOT;
	} else if (st->cfa_kind != CFI_NONE && st->ra_rule == CFI_RULE_OFFSET &&
		   st->ra_off == RA_OFFSET && st->cfa_off >= INT32_MIN &&
		   st->cfa_off <= INT32_MAX &&
		   (st->cfa_kind != CFI_REG ||
		    cfi_reg_pack(st->cfa_reg, st->cfa_off, &row.cfa_off))) {
		row.kind = st->cfa_kind;
		if (st->cfa_kind != CFI_REG)
			row.cfa_off = (int32_t)st->cfa_off;
		if (st->fp_rule == CFI_RULE_SAME) {
			row.fp_rule = CFI_FP_SAME;
		} else if (st->fp_rule == CFI_RULE_OFFSET && st->fp_off >= INT16_MIN &&
			   st->fp_off <= INT16_MAX) {
			row.fp_rule = CFI_FP_SAVED;
			row.fp_off = (int16_t)st->fp_off;
		} else {
			row.fp_rule = CFI_FP_UNKNOWN;
		}
	} else {
		ok = false;
	}
	*out = row;
	return ok;
}

/* async-signal-safe */
bool cfi_decode_row_from_state(const struct cfi_state *st, bool signal, uint32_t pc,
			       struct cfi_row *out)
{
	return row_from_state(st, signal, pc, out);
}

/* async-signal-safe. Table mode: the row for st at pc (the caller left room for it). */
static inline void emit(struct cfi_prog *pg, uint64_t pc, const struct cfi_state *st)
{
	if (pc < pg->base || pc - pg->base > UINT32_MAX)
		return;
	if (!row_from_state(st, pg->cie->signal, (uint32_t)(pc - pg->base), &pg->out[pg->n]))
		pg->unsupported++;
	pg->n++;
}

/* async-signal-safe. The GNU ld PLT expression: DW_OP_breg7 8; DW_OP_breg16 0;
 * DW_OP_lit15; DW_OP_and; DW_OP_lit10 or lit11; DW_OP_ge; DW_OP_lit3; DW_OP_shl;
 * DW_OP_plus. Returns the threshold (10 or 11) or 0 for any other expression. */
static int plt_expression(const uint8_t *e, uint64_t len)
{
	static const uint8_t head[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a};
	static const uint8_t tail[] = {0x2a, 0x33, 0x24, 0x22};
	if (len != sizeof(head) + 1 + sizeof(tail))
		return 0;
	for (size_t i = 0; i < sizeof(head); i++)
		if (e[i] != head[i])
			return 0;
	for (size_t i = 0; i < sizeof(tail); i++)
		if (e[sizeof(head) + 1 + i] != tail[i])
			return 0;
	uint8_t lit = e[sizeof(head)];
	if (lit < 0x30 || lit > 0x4f)
		return 0;
	return lit - 0x30;
}

/* async-signal-safe. The caller's SP loaded from a slot: DW_OP_breg7 (rsp) or
 * DW_OP_breg6 (rbp) n; DW_OP_deref; then DW_OP_plus_uconst a, or nothing (a = 0).
 * Sets the state's CFA rule and returns true, or false for any other expression. */
static bool deref_expression(const uint8_t *e, uint64_t len, struct cfi_state *st)
{
	struct cfi_cursor c = {e, e + len, false};
	uint8_t op = cfi_cur_u8(&c);
	if (op != 0x77 && op != 0x76) /* DW_OP_breg7, DW_OP_breg6 */
		return false;
	int64_t n = cfi_cur_sleb(&c);
	if (cfi_cur_u8(&c) != 0x06) /* DW_OP_deref */
		return false;
	uint64_t a = 0;
	if (c.p < c.end) {
		if (cfi_cur_u8(&c) != 0x23) /* DW_OP_plus_uconst */
			return false;
		a = cfi_cur_uleb(&c);
	}
	int32_t packed;
	if (c.bad || c.p != c.end || !cfi_deref_pack(n, a, &packed))
		return false;
	st->cfa_kind = op == 0x77 ? CFI_DEREF_SP : CFI_DEREF_FP;
	st->cfa_off = packed;
	return true;
}

/* async-signal-safe. Whether the CFA rule is an expression, whose offset means nothing
 * to DW_CFA_def_cfa_offset or _register. */
static inline bool cfa_is_expression(const struct cfi_state *st)
{
	return st->cfa_kind == CFI_PLT || st->cfa_kind == CFI_DEREF_SP ||
	       st->cfa_kind == CFI_DEREF_FP;
}

/* async-signal-safe. The CFA rule "register + offset": rsp, rbp or another. */
static inline void set_cfa_reg(struct cfi_state *st, uint64_t reg)
{
	st->cfa_kind = reg == REG_SP   ? CFI_SP
		       : reg == REG_FP ? CFI_FP
		       : reg < 16      ? CFI_REG
				       : CFI_NONE;
	st->cfa_reg = (uint8_t)(reg < 16 ? reg : 0);
}

/* async-signal-safe */
static void set_rule(struct cfi_state *st, uint64_t reg, uint8_t rule, int64_t off)
{
	if (reg == REG_FP) {
		st->fp_rule = rule;
		st->fp_off = off;
	} else if (reg == REG_RA) {
		st->ra_rule = rule;
		st->ra_off = off;
	}
}

/* async-signal-safe */
static void restore_rule(struct cfi_state *st, const struct cfi_state *init, uint64_t reg)
{
	if (reg == REG_FP) {
		st->fp_rule = init->fp_rule;
		st->fp_off = init->fp_off;
	} else if (reg == REG_RA) {
		st->ra_rule = init->ra_rule;
		st->ra_off = init->ra_off;
	}
}

/* async-signal-safe. a * b, for a factored offset. When the product does not fit an
 * int64_t (undefined behaviour in C, and no frame is that large) *bad is set: the
 * program is malformed, as when a read runs past its end. Inline code, no libc call. */
static inline int64_t factored(int64_t a, int64_t b, bool *bad)
{
	int64_t r;
	if (__builtin_mul_overflow(a, b, &r)) {
		*bad = true;
		return 0;
	}
	return r;
}

/* async-signal-safe. A ULEB128 operand as a signed offset; above INT64_MAX it is none
 * (*bad set, as in factored). */
static inline int64_t unsigned_offset(uint64_t v, bool *bad)
{
	if (v > (uint64_t)INT64_MAX) {
		*bad = true;
		return 0;
	}
	return (int64_t)v;
}

/* async-signal-safe */
void cfi_decode_prog_start(struct cfi_prog *pg, const struct cfi_cie *cie,
			   const struct cfi_section *sec, const struct cfi_state *init,
			   const uint8_t *insns, const uint8_t *insns_end, uint64_t start,
			   uint64_t end)
{
	/* Field by field: a compound literal would clear the 512-byte stack too. */
	pg->cie = cie;
	pg->sec = sec;
	pg->init = init;
	pg->c = (struct cfi_cursor){insns, insns_end, false};
	pg->loc = start;
	pg->end = end;
	pg->out = NULL;
	pg->n = pg->room = 0;
	pg->base = 0;
	pg->unsupported = 0;
	pg->target = 0;
	pg->depth = 0;
}

/* async-signal-safe */
int cfi_decode_prog_run(struct cfi_prog *pg, struct cfi_state *st)
{
	/* The cursor and depth in locals: st's uint8_t stores may alias anything, and would
	 * force every read through pg back to memory. */
	struct cfi_cursor c = pg->c;
	int depth = pg->depth;
	const struct cfi_cie *cie = pg->cie;
	int rc = CFI_PROG_END;
	while (c.p < c.end && !c.bad) {
		/* Each instruction adds at most one row. */
		if (pg->out && pg->n == pg->room) {
			rc = CFI_PROG_FULL;
			goto out;
		}
		uint8_t op = cfi_cur_u8(&c);
		uint64_t delta = 0, reg, uoff;
		int64_t soff;
		bool advance = false;
		switch (op & 0xc0) {
		case CFA_advance_loc:
			delta = (op & 0x3f) * cie->caf;
			advance = true;
			break;
		case CFA_offset:
			uoff = cfi_cur_uleb(&c);
			set_rule(st, op & 0x3f, CFI_RULE_OFFSET,
				 factored(unsigned_offset(uoff, &c.bad), cie->daf, &c.bad));
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
				if (!read_ptr(&c, cie->fde_enc, pg->sec->data, pg->sec->vaddr,
					      &to) ||
				    to < pg->loc) {
					rc = CFI_PROG_BAD;
					goto out;
				}
				delta = to - pg->loc;
				advance = true;
				break;
			}
			case CFA_advance_loc1:
				delta = cfi_cur_u8(&c) * cie->caf;
				advance = true;
				break;
			case CFA_advance_loc2:
				delta = cfi_cur_u16(&c) * cie->caf;
				advance = true;
				break;
			case CFA_advance_loc4:
				delta = cfi_cur_u32(&c) * cie->caf;
				advance = true;
				break;
			case CFA_offset_extended:
				reg = cfi_cur_uleb(&c);
				uoff = cfi_cur_uleb(&c);
				set_rule(st, reg, CFI_RULE_OFFSET,
					 factored(unsigned_offset(uoff, &c.bad), cie->daf, &c.bad));
				break;
			case CFA_offset_extended_sf:
				reg = cfi_cur_uleb(&c);
				soff = cfi_cur_sleb(&c);
				set_rule(st, reg, CFI_RULE_OFFSET,
					 factored(soff, cie->daf, &c.bad));
				break;
			case CFA_GNU_negative_offset_extended:
				reg = cfi_cur_uleb(&c);
				uoff = cfi_cur_uleb(&c);
				set_rule(
				    st, reg, CFI_RULE_OFFSET,
				    factored(-unsigned_offset(uoff, &c.bad), cie->daf, &c.bad));
				break;
			case CFA_restore_extended:
				reg = cfi_cur_uleb(&c);
				if (pg->init)
					restore_rule(st, pg->init, reg);
				break;
			case CFA_undefined:
				set_rule(st, cfi_cur_uleb(&c), CFI_RULE_UNDEF, 0);
				break;
			case CFA_same_value:
				set_rule(st, cfi_cur_uleb(&c), CFI_RULE_SAME, 0);
				break;
			case CFA_register:
				reg = cfi_cur_uleb(&c);
				cfi_cur_uleb(&c);
				set_rule(st, reg, CFI_RULE_OTHER, 0);
				break;
			case CFA_remember_state:
				if (depth == CFI_STATE_STACK_MAX) {
					rc = CFI_PROG_BAD;
					goto out;
				}
				pg->stack[depth++] = *st;
				break;
			case CFA_restore_state: {
				if (depth == 0) {
					rc = CFI_PROG_BAD;
					goto out;
				}
				/* The CFA rule is restored too (DWARF 5 clarified this; GCC
				 * emits remember/restore around epilogues expecting it). */
				*st = pg->stack[--depth];
				break;
			}
			case CFA_def_cfa:
				reg = cfi_cur_uleb(&c);
				uoff = cfi_cur_uleb(&c);
				set_cfa_reg(st, reg);
				st->cfa_off = unsigned_offset(uoff, &c.bad);
				break;
			case CFA_def_cfa_sf:
				reg = cfi_cur_uleb(&c);
				soff = cfi_cur_sleb(&c);
				set_cfa_reg(st, reg);
				st->cfa_off = factored(soff, cie->daf, &c.bad);
				break;
			case CFA_def_cfa_register:
				reg = cfi_cur_uleb(&c);
				if (cfa_is_expression(st))
					st->cfa_kind = CFI_NONE; /* offset meaningless now */
				else
					set_cfa_reg(st, reg);
				break;
			case CFA_def_cfa_offset:
				if (cfa_is_expression(st))
					st->cfa_kind = CFI_NONE;
				st->cfa_off = unsigned_offset(cfi_cur_uleb(&c), &c.bad);
				break;
			case CFA_def_cfa_offset_sf:
				if (cfa_is_expression(st))
					st->cfa_kind = CFI_NONE;
				st->cfa_off = factored(cfi_cur_sleb(&c), cie->daf, &c.bad);
				break;
			case CFA_def_cfa_expression: {
				uint64_t len = cfi_cur_uleb(&c);
				const uint8_t *e = c.p;
				cfi_cur_skip(&c, len);
				int thr = c.bad ? 0 : plt_expression(e, len);
				if (thr) {
					st->cfa_kind = CFI_PLT;
					st->cfa_off = thr;
				} else if (c.bad || !deref_expression(e, len, st)) {
					st->cfa_kind = CFI_NONE;
					st->cfa_off = 0;
				}
				break;
			}
			case CFA_expression:
			case CFA_val_expression:
				reg = cfi_cur_uleb(&c);
				cfi_cur_skip(&c, cfi_cur_uleb(&c));
				set_rule(st, reg, CFI_RULE_OTHER, 0);
				break;
			case CFA_val_offset:
				reg = cfi_cur_uleb(&c);
				cfi_cur_uleb(&c);
				set_rule(st, reg, CFI_RULE_OTHER, 0);
				break;
			case CFA_val_offset_sf:
				reg = cfi_cur_uleb(&c);
				cfi_cur_sleb(&c);
				set_rule(st, reg, CFI_RULE_OTHER, 0);
				break;
			case CFA_GNU_args_size:
				cfi_cur_uleb(&c);
				break;
			default:
				rc = CFI_PROG_BAD; /* unknown opcode: operand sizes unknown */
				goto out;
			}
		}
		if (advance && pg->init) {
			if (delta > 0 && pg->loc < pg->end) {
				if (pg->out) {
					emit(pg, pg->loc, st);
				} else if (pg->target - pg->loc < delta) {
					/* *st holds from loc up to loc + delta: past target. */
					rc = CFI_PROG_AT_TARGET;
					goto out;
				}
			}
			pg->loc += delta;
		}
	}
	if (c.bad)
		rc = CFI_PROG_BAD;
out:
	pg->c = c;
	pg->depth = depth;
	return rc;
}
