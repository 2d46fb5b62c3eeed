/*
 * test_cfi_table.c - the CFI table builder against binutils' own interpretation.
 *
 * For real libraries, every row `readelf --debug-dump=frames-interp` prints (pc, CFA
 * rule, rbp rule, return address rule) must match what cfi_table_find answers at that
 * pc and at the last byte before the next row. Synthetic CFI covers what real files
 * rarely have (remember/restore state, every advance form, PLT expressions, signal
 * frames), and corrupted input must never crash the parser.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/unwind/cfi_decode.h"
#include "agent/unwind/cfi_table.h"
#include "check_run.h"

/* ---------------------------------------------------------------- readelf oracle */

struct expect_row {
	uint64_t pc, end;
	char cfa[32], rbp[16], ra[16];
	bool signal;
};

struct compare_stats {
	size_t rows, sp, fp, reg, plt, root, signal, none, fdes;
};

static void check_row(const struct cfi_table *t, const struct expect_row *e, uint64_t at,
		      struct compare_stats *st, const char *lib)
{
	const struct cfi_row *r = cfi_table_find(t, at);
	char where[256];
	snprintf(where, sizeof(where), "%s pc %#lx (row %#lx..%#lx cfa %s rbp %s ra %s)", lib,
		 (unsigned long)at, (unsigned long)e->pc, (unsigned long)e->end, e->cfa, e->rbp,
		 e->ra);
	if (e->signal) {
		ck_assert_msg(r && r->kind == CFI_SIGNAL, "%s: expected a signal frame", where);
		st->signal++;
		return;
	}
	if (!strcmp(e->ra, "u")) {
		ck_assert_msg(r && r->kind == CFI_ROOT, "%s: expected root, got %d", where,
			      r ? r->kind : -1);
		st->root++;
		return;
	}
	int off;
	char reg[8];
	bool ra_ok = !strcmp(e->ra, "c-8");
	if (ra_ok && sscanf(e->cfa, "%3[a-z]+%d", reg, &off) == 2 &&
	    (!strcmp(reg, "rsp") || !strcmp(reg, "rbp"))) {
		bool sp = !strcmp(reg, "rsp");
		ck_assert_msg(r != NULL, "%s: no row", where);
		ck_assert_msg(r->kind == (sp ? CFI_SP : CFI_FP) && r->cfa_off == off,
			      "%s: got kind %d off %d", where, r->kind, r->cfa_off);
		int fpo;
		if (sscanf(e->rbp, "c%d", &fpo) == 1)
			ck_assert_msg(r->fp_rule == CFI_FP_SAVED && r->fp_off == fpo,
				      "%s: rbp rule %d off %d", where, r->fp_rule, r->fp_off);
		else if (!strcmp(e->rbp, "u") || !strcmp(e->rbp, "s"))
			ck_assert_msg(r->fp_rule == CFI_FP_SAME || r->fp_rule == CFI_FP_UNKNOWN,
				      "%s: rbp rule %d", where, r->fp_rule);
		else
			ck_assert_msg(r->fp_rule == CFI_FP_UNKNOWN, "%s: rbp rule %d", where,
				      r->fp_rule);
		if (sp)
			st->sp++;
		else
			st->fp++;
		return;
	}
	/* Another register + offset: a CFI_REG row, its DWARF register and offset. */
	static const char *const dwarf_regs[16] = {"rax", "rdx", "rcx", "rbx", "rsi", "rdi",
						   "rbp", "rsp", "r8",	"r9",  "r10", "r11",
						   "r12", "r13", "r14", "r15"};
	if (ra_ok && sscanf(e->cfa, "%3[a-z0-9]+%d", reg, &off) == 2) {
		int dr = -1;
		for (int i = 0; i < 16; i++)
			if (!strcmp(reg, dwarf_regs[i]))
				dr = i;
		ck_assert_msg(dr >= 0, "%s: register %s", where, reg);
		ck_assert_msg(r && r->kind == CFI_REG && (int)cfi_reg_number(r->cfa_off) == dr &&
				  cfi_reg_offset(r->cfa_off) == off,
			      "%s: got kind %d", where, r ? r->kind : -1);
		st->reg++;
		return;
	}
	if (ra_ok && !strcmp(e->cfa, "exp")) {
		/* PLT stubs and the caller's SP loaded from a slot are the expressions we
		 * evaluate (synthetic_rules checks their operands); others have no rule. */
		ck_assert_msg(!r || r->kind == CFI_PLT || r->kind == CFI_DEREF_SP ||
				  r->kind == CFI_DEREF_FP,
			      "%s: kind %d for an expression", where, r->kind);
		if (r)
			st->plt++;
		else
			st->none++;
		return;
	}
	ck_assert_msg(!r, "%s: expected no rule, got kind %d", where, r ? r->kind : -1);
	st->none++;
}

struct range {
	unsigned long lo, hi;
};
#define MAX_EH 100000

/* .debug_frame FDEs are only used where no .eh_frame FDE covers the code. */
static bool eh_covers(const struct range *r, size_t n, unsigned long pc)
{
	for (size_t i = 0; i < n; i++)
		if (pc >= r[i].lo && pc < r[i].hi)
			return true;
	return false;
}

/* Columns of the current LOC header: index of CFA, rbp and ra. */
struct columns {
	int rbp, ra, n;
};

static void parse_header(const char *line, struct columns *c)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", line);
	c->rbp = c->ra = -1;
	c->n = 0;
	for (char *tok = strtok(buf, " \t\n"); tok; tok = strtok(NULL, " \t\n"), c->n++) {
		if (!strcmp(tok, "rbp"))
			c->rbp = c->n;
		else if (!strcmp(tok, "ra"))
			c->ra = c->n;
	}
}

/* Parses readelf's output and checks every row; returns stats. */
static struct compare_stats compare_with_readelf(const char *lib, const struct cfi_table *t)
{
	struct compare_stats st = {0};
	static struct range eh[MAX_EH];
	size_t neh = 0;
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "readelf --debug-dump=frames-interp '%s' 2>/dev/null", lib);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	char line[4096];
	/* CIE rows (for FDEs without their own table) and signal flags by CIE offset. */
	enum { MAX_CIES = 64 };
	struct {
		unsigned long off;
		bool signal;
		struct expect_row init;
	} cies[MAX_CIES];
	int ncies = 0, cur_cie = -1;
	bool in_fde = false, have_rows = false, in_debug_frame = false;
	unsigned long fde_lo = 0, fde_hi = 0;
	struct columns cols = {-1, -1, 0};
	struct expect_row pending;
	bool have_pending = false;
#define FLUSH_PENDING(next_pc)                                                                     \
	do {                                                                                       \
		if (have_pending) {                                                                \
			pending.end = (next_pc);                                                   \
			if (!in_debug_frame || !eh_covers(eh, neh, pending.pc)) {                  \
				check_row(t, &pending, pending.pc, &st, lib);                      \
				check_row(t, &pending, pending.end - 1, &st, lib);                 \
				st.rows++;                                                         \
			}                                                                          \
			have_pending = false;                                                      \
		}                                                                                  \
	} while (0)
	/* An FDE with no instructions of its own has no LOC table: its CIE's rules. */
#define CHECK_TABLELESS_FDE()                                                                      \
	do {                                                                                       \
		if (in_fde && !have_rows && fde_hi > fde_lo && cur_cie >= 0 &&                     \
		    (!in_debug_frame || !eh_covers(eh, neh, fde_lo))) {                            \
			struct expect_row e = cies[cur_cie].init;                                  \
			e.pc = fde_lo;                                                             \
			e.end = fde_hi;                                                            \
			check_row(t, &e, fde_lo, &st, lib);                                        \
			check_row(t, &e, fde_hi - 1, &st, lib);                                    \
			st.rows++;                                                                 \
		}                                                                                  \
		in_fde = false;                                                                    \
	} while (0)
	while (fgets(line, sizeof(line), f)) {
		unsigned long off, len, id, lo, hi, cieoff;
		char aug[32];
		if (strstr(line, "Contents of the .debug_frame")) {
			in_debug_frame = true;
			continue;
		}
		if (strstr(line, " CIE ") &&
		    sscanf(line, "%lx %lx %lx CIE", &off, &len, &id) == 3) {
			FLUSH_PENDING(fde_hi);
			CHECK_TABLELESS_FDE();
			aug[0] = 0;
			const char *q = strchr(line, '"');
			if (q)
				sscanf(q, "\"%31[^\"]\"", aug);
			in_fde = false;
			if (ncies < MAX_CIES) {
				cur_cie = ncies++;
				cies[cur_cie].off = off;
				cies[cur_cie].signal = strchr(aug, 'S') != NULL;
				memset(&cies[cur_cie].init, 0, sizeof(cies[cur_cie].init));
			}
			have_rows = false;
			continue;
		}
		if (sscanf(line, "%lx %lx %lx FDE cie=%lx pc=%lx..%lx", &off, &len, &id, &cieoff,
			   &lo, &hi) == 6) {
			FLUSH_PENDING(fde_hi);
			CHECK_TABLELESS_FDE();
			cur_cie = -1;
			for (int i = 0; i < ncies; i++)
				if (cies[i].off == cieoff)
					cur_cie = i;
			in_fde = true;
			have_rows = false;
			fde_lo = lo;
			fde_hi = hi;
			if (!in_debug_frame && hi > lo && neh < MAX_EH)
				eh[neh++] = (struct range){lo, hi};
			if (hi > lo && (!in_debug_frame || !eh_covers(eh, neh, lo)))
				st.fdes++;
			continue;
		}
		if (strstr(line, "   LOC")) {
			parse_header(line, &cols);
			continue;
		}
		/* "r10 (r10)": drop the parenthesized register names (one column). */
		for (char *q = strstr(line, " ("); q; q = strstr(q, " (")) {
			char *close = strchr(q, ')');
			if (!close)
				break;
			memmove(q, close + 1, strlen(close + 1) + 1);
		}
		char tok[32][32];
		int n =
		    sscanf(line,
			   "%31s %31s %31s %31s %31s %31s %31s %31s %31s %31s %31s %31s %31s %31s "
			   "%31s %31s %31s %31s %31s %31s",
			   tok[0], tok[1], tok[2], tok[3], tok[4], tok[5], tok[6], tok[7], tok[8],
			   tok[9], tok[10], tok[11], tok[12], tok[13], tok[14], tok[15], tok[16],
			   tok[17], tok[18], tok[19]);
		if (n < 3 || strlen(tok[0]) != 16)
			continue;
		struct expect_row e = {0};
		e.pc = strtoul(tok[0], NULL, 16);
		snprintf(e.cfa, sizeof(e.cfa), "%s", tok[1]);
		snprintf(e.rbp, sizeof(e.rbp), "%s",
			 cols.rbp >= 0 && cols.rbp < n ? tok[cols.rbp] : "u");
		snprintf(e.ra, sizeof(e.ra), "%s",
			 cols.ra >= 0 && cols.ra < n ? tok[cols.ra] : "u");
		e.signal = cur_cie >= 0 && cies[cur_cie].signal;
		if (!in_fde) {
			if (cur_cie >= 0)
				cies[cur_cie].init = e;
			continue;
		}
		FLUSH_PENDING(e.pc);
		have_rows = true;
		if (e.pc >= fde_hi)
			continue;
		pending = e;
		have_pending = true;
	}
	FLUSH_PENDING(fde_hi);
	CHECK_TABLELESS_FDE();
	pclose(f);
	return st;
}

static void compare_lib_min(const char *lib, size_t min_rows)
{
	struct stat sb;
	/* scripts/install-deps installs it: missing, the test fails rather than pass
	 * unchecked. */
	ck_assert_msg(stat(lib, &sb) == 0, "%s missing (scripts/install-deps installs it)", lib);
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build_elf(lib, NULL, 0, &t), 0);
	struct compare_stats st = compare_with_readelf(lib, &t);
	fprintf(stderr,
		"test_cfi_table: %s: %zu fdes, %zu readelf rows checked (sp %zu, fp %zu, reg %zu, "
		"plt %zu, root %zu, signal %zu, none %zu), %zu table rows, %zu KiB\n",
		lib, st.fdes, st.rows, st.sp / 2, st.fp / 2, st.reg / 2, st.plt / 2, st.root / 2,
		st.signal / 2, st.none / 2, t.nrows, cfi_table_bytes(&t) >> 10);
	ck_assert_msg(st.rows >= min_rows, "%s: readelf gave only %zu rows", lib, st.rows);
	ck_assert_uint_ge(t.fdes, st.fdes * 99 / 100);
	cfi_table_free(&t);
}

static void compare_lib(const char *lib)
{
	compare_lib_min(lib, 100);
}

START_TEST(matches_readelf_libc)
{
	compare_lib("/lib/x86_64-linux-gnu/libc.so.6");
}
END_TEST

START_TEST(matches_readelf_ld_so)
{
	compare_lib("/lib64/ld-linux-x86-64.so.2");
}
END_TEST

START_TEST(matches_readelf_libz_libelf)
{
	compare_lib("/lib/x86_64-linux-gnu/libz.so.1");
	compare_lib("/lib/x86_64-linux-gnu/libelf.so.1");
}
END_TEST

START_TEST(matches_readelf_python)
{
	compare_lib("/usr/bin/python3.11");
}
END_TEST

/* OpenSSL's assembly: CFAs in other registers (rax, rsi, r11...) and loaded from a
 * stack slot (expressions: their operands are checked by synthetic_rules). Debian's
 * python3 depends on libssl3. */
START_TEST(matches_readelf_libcrypto)
{
	compare_lib("/lib/x86_64-linux-gnu/libcrypto.so.3");
}
END_TEST

START_TEST(matches_readelf_self)
{
	/* Resolved here: readelf's own /proc/self/exe is readelf. */
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	ck_assert_int_gt(n, 0);
	self[n] = 0;
	compare_lib(self);
}
END_TEST

/* lld types .eh_frame SHT_X86_64_UNWIND (GNU ld: SHT_PROGBITS): libLLVM is linked by
 * lld on Debian, and clang (for the TSan build) brings it. */
/* A cgo Go program (make builds it: scripts/install-deps installs golang-go): its table
 * marks runtime.goexit (where every goroutine's stack begins), runtime.mstart and
 * runtime.rt0_go as roots (cfi_roots.h), which no CFI of Go's says; a C library's
 * table gets no such rows. */
static uint64_t symbol_address(const char *path, const char *name)
{
	char cmd[4300];
	snprintf(cmd, sizeof(cmd), "nm '%s' 2>/dev/null", path);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	char line[512];
	uint64_t addr = 0;
	while (fgets(line, sizeof(line), p)) {
		unsigned long long a;
		char type, sym[400];
		if (sscanf(line, "%llx %c %399s", &a, &type, sym) == 3 && !strcmp(sym, name))
			addr = a;
	}
	pclose(p);
	return addr;
}

START_TEST(go_runtime_entry_frames_are_roots)
{
	const char *dir = getenv("DDPROF_BUILD_DIR");
	char path[4096];
	snprintf(path, sizeof(path), "%s/workloads/go-spin", dir ? dir : "build");
	struct stat sb;
	ck_assert_msg(stat(path, &sb) == 0, "%s missing (make builds it with golang-go)", path);
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build_elf(path, NULL, 0, &t), 0);
	static const char *const roots[] = {"runtime.goexit.abi0", "runtime.mstart.abi0",
					    "runtime.rt0_go.abi0"};
	for (size_t i = 0; i < 3; i++) {
		uint64_t a = symbol_address(path, roots[i]);
		ck_assert_msg(a != 0, "%s: no %s", path, roots[i]);
		/* A goroutine's function returns to goexit + 1: looked up at goexit. */
		const struct cfi_row *r = cfi_table_find(&t, a);
		ck_assert_msg(r && r->kind == CFI_ROOT, "%s at %#llx: kind %d", roots[i],
			      (unsigned long long)a, r ? r->kind : -1);
	}
	/* What lies past goexit (its code is a NOP and a CALL) is no root. */
	uint64_t spin = symbol_address(path, "main.spin");
	ck_assert(spin != 0);
	const struct cfi_row *r = cfi_table_find(&t, spin);
	ck_assert(!r || r->kind != CFI_ROOT);
	cfi_table_free(&t);
	ck_assert_int_eq(cfi_table_build_elf("/lib/x86_64-linux-gnu/libz.so.1", NULL, 0, &t), 0);
	for (size_t i = 0; i < t.nrows; i++)
		ck_assert(t.rows[i].kind != CFI_ROOT);
	cfi_table_free(&t);
}
END_TEST

START_TEST(eh_frame_of_type_x86_64_unwind)
{
	const char *lib = "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1";
	/* Debian's libllvm15, which scripts/install-deps installs. */
	ck_assert_msg(access(lib, R_OK) == 0,
		      "%s missing (scripts/install-deps installs libllvm15)", lib);
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build_elf(lib, NULL, 0, &t), 0);
	ck_assert_uint_gt(t.fdes, 10000);
	ck_assert_uint_gt(t.nrows, 100000);
	cfi_table_free(&t);
}
END_TEST

/* A shared object compiled without unwind tables has only .debug_frame for its code. */
START_TEST(debug_frame_only_module)
{
	char dir[] = "/tmp/cfi-test-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char src[128], so[128], cmd[512];
	snprintf(src, sizeof(src), "%s/df.c", dir);
	snprintf(so, sizeof(so), "%s/libdf.so", dir);
	FILE *f = fopen(src, "w");
	ck_assert_ptr_nonnull(f);
	fputs("int df_leaf(int x) { volatile int a[64]; a[x & 63] = x; return a[3]; }\n"
	      "int df_mid(int x) { return df_leaf(x) + df_leaf(x + 1) + 1; }\n",
	      f);
	fclose(f);
	snprintf(cmd, sizeof(cmd),
		 "cc -O1 -g -fPIC -shared -fno-asynchronous-unwind-tables -fno-unwind-tables "
		 "-fno-omit-frame-pointer -o %s %s",
		 so, src);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "readelf -S %s | grep -q debug_frame", so);
	ck_assert_int_eq(system(cmd), 0);
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build_elf(so, NULL, 0, &t), 0);
	/* Resolve df_mid's address with nm and check a row covers it with an FP or SP
	 * rule (the function has a frame). */
	snprintf(cmd, sizeof(cmd), "nm %s | awk '$3==\"df_mid\"{print $1}'", so);
	FILE *p = popen(cmd, "r");
	unsigned long addr = 0;
	ck_assert_int_eq(fscanf(p, "%lx", &addr), 1);
	pclose(p);
	const struct cfi_row *r = cfi_table_find(&t, addr);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(r->kind, CFI_SP);
	ck_assert_int_eq(r->cfa_off, 8);
	r = cfi_table_find(&t, addr + 8);
	ck_assert_ptr_nonnull(r);
	ck_assert(r->kind == CFI_FP || r->kind == CFI_SP);
	compare_lib_min(so, 4);
	cfi_table_free(&t);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---------------------------------------------------------------- synthetic CFI */

struct bytes {
	uint8_t b[512];
	size_t n;
};

static void put(struct bytes *s, const void *p, size_t n)
{
	ck_assert_uint_le(s->n + n, sizeof(s->b));
	if (n) /* an FDE without instructions passes NULL: memcpy's pointers must be valid */
		memcpy(s->b + s->n, p, n);
	s->n += n;
}

static void put8(struct bytes *s, uint8_t v)
{
	put(s, &v, 1);
}

static void put32(struct bytes *s, uint32_t v)
{
	put(s, &v, 4);
}

/* An .eh_frame CIE ("zR", pcrel|sdata4 pointers, caf 1, daf -8, ra 16,
 * def_cfa rsp+8, offset ra at cfa-8), with aug as its augmentation. Returns its offset. */
static size_t add_cie(struct bytes *s, const char *aug)
{
	size_t start = s->n;
	struct bytes body = {.n = 0};
	put32(&body, 0); /* CIE id */
	put8(&body, 1);	 /* version */
	put(&body, aug, strlen(aug) + 1);
	put8(&body, 1);				      /* caf */
	put8(&body, 0x78);			      /* daf -8 */
	put8(&body, 16);			      /* ra */
	put8(&body, 1);				      /* aug data length */
	put8(&body, 0x1b);			      /* pcrel | sdata4 */
	const uint8_t init[] = {0x0c, 7, 8, 0x90, 1}; /* def_cfa rsp+8; offset r16 c-8 */
	put(&body, init, sizeof(init));
	while ((body.n + 4) % 8)
		put8(&body, 0);
	put32(s, (uint32_t)body.n);
	put(s, body.b, body.n);
	return start;
}

static void add_fde(struct bytes *s, size_t cie, uint64_t sec_vaddr, uint64_t pc, uint32_t range,
		    const uint8_t *insns, size_t ninsns)
{
	size_t len_pos = s->n;
	put32(s, 0);
	size_t id_pos = s->n;
	put32(s, (uint32_t)(id_pos - cie));
	int32_t rel = (int32_t)(pc - (sec_vaddr + s->n));
	put(s, &rel, 4);
	put32(s, range);
	put8(s, 0); /* aug data length */
	put(s, insns, ninsns);
	while ((s->n - len_pos) % 8)
		put8(s, 0);
	uint32_t len = (uint32_t)(s->n - len_pos - 4);
	memcpy(s->b + len_pos, &len, 4);
}

#define SEC_VADDR 0x2000
#define BASE 0x0

START_TEST(synthetic_rules)
{
	struct bytes s = {.n = 0};
	size_t cie = add_cie(&s, "zR");
	/* A function at 0x1000: push rbp (cfa rsp+16, rbp at c-16), mov rsp,rbp (cfa rbp+16),
	 * remember, epilogue (cfa rsp+8), restore (back to rbp+16). */
	const uint8_t f1[] = {
	    0x41, 0x0e, 16,   0x86, 2,		    /* adv 1; def_cfa_offset 16; offset rbp c-16 */
	    0x43, 0x0d, 6,			    /* adv 3; def_cfa_register rbp */
	    0x02, 0x10, 0x0a,			    /* advance_loc1 16; remember_state */
	    0x0c, 7,	8,			    /* def_cfa rsp+8 */
	    0x03, 0x04, 0x00, 0x0b,		    /* advance_loc2 4; restore_state */
	    0x04, 0x08, 0x00, 0x00, 0x00, 0x07, 16, /* advance_loc4 8; undefined ra */
	};
	add_fde(&s, cie, SEC_VADDR, 0x1000, 0x40, f1, sizeof(f1));
	/* A PLT at 0x1100 with the GNU ld expression (threshold 11). */
	const uint8_t plt[] = {0x0e, 16,   0x4a, /* def_cfa_offset 16; adv 10 */
			       0x0f, 11,   0x77, 8,    0x80, 0,	  0x3f,
			       0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22};
	add_fde(&s, cie, SEC_VADDR, 0x1100, 0x30, plt, sizeof(plt));
	size_t scie = add_cie(&s, "zRS");
	add_fde(&s, scie, SEC_VADDR, 0x1200, 0x10, NULL, 0);
	/* OpenSSL's realigned frames at 0x1300: the caller's SP saved at rsp+40 (CFA =
	 * *(rsp + 40) + 8), then at rbp-8 with no addend, then an offset that cancels the
	 * expression (no rule), then breg7 with an operation after the deref (no rule). */
	const uint8_t deref[] = {
	    0x41, 0x0f, 5,  0x77, 40,	0x06, 0x23, 8, /* adv 1; def_cfa_expression */
	    0x41, 0x0f, 3,  0x76, 0x78, 0x06,	       /* adv 1; breg6 -8; deref */
	    0x41, 0x0e, 32,			       /* adv 1; def_cfa_offset 32 */
	    0x41, 0x0c, 7,  16,			       /* adv 1; def_cfa rsp+16 */
	    0x41, 0x0f, 4,  0x77, 0,	0x06, 0x1f,    /* adv 1; breg7 0; deref; neg */
	};
	add_fde(&s, cie, SEC_VADDR, 0x1300, 0x10, deref, sizeof(deref));
	put32(&s, 0); /* terminator */

	struct cfi_section sec = {s.b, s.n, SEC_VADDR, false};
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build(&sec, 1, BASE, &t), 0);
	ck_assert_uint_eq(t.fdes, 4);
	const struct cfi_row *r;
	ck_assert_ptr_null(cfi_table_find(&t, 0xfff));
	r = cfi_table_find(&t, 0x1000);
	ck_assert(r && r->kind == CFI_SP && r->cfa_off == 8 && r->fp_rule == CFI_FP_SAME);
	r = cfi_table_find(&t, 0x1001);
	ck_assert(r && r->kind == CFI_SP && r->cfa_off == 16 && r->fp_rule == CFI_FP_SAVED &&
		  r->fp_off == -16);
	r = cfi_table_find(&t, 0x1004);
	ck_assert(r && r->kind == CFI_FP && r->cfa_off == 16);
	r = cfi_table_find(&t, 0x1014);
	ck_assert(r && r->kind == CFI_SP && r->cfa_off == 8 && r->fp_rule == CFI_FP_SAVED);
	r = cfi_table_find(&t, 0x1018);
	ck_assert(r && r->kind == CFI_FP && r->cfa_off == 16); /* restored */
	r = cfi_table_find(&t, 0x1020);
	ck_assert(r && r->kind == CFI_ROOT);
	r = cfi_table_find(&t, 0x103f);
	ck_assert(r && r->kind == CFI_ROOT);
	ck_assert_ptr_null(cfi_table_find(&t, 0x1040)); /* gap after the FDE */
	r = cfi_table_find(&t, 0x1100);
	ck_assert(r && r->kind == CFI_SP && r->cfa_off == 16);
	r = cfi_table_find(&t, 0x110a);
	ck_assert(r && r->kind == CFI_PLT && r->cfa_off == 11);
	r = cfi_table_find(&t, 0x1205);
	ck_assert(r && r->kind == CFI_SIGNAL);
	ck_assert_ptr_null(cfi_table_find(&t, 0x1210));
	r = cfi_table_find(&t, 0x1301);
	ck_assert(r && r->kind == CFI_DEREF_SP && cfi_deref_offset(r->cfa_off) == 40 &&
		  cfi_deref_addend(r->cfa_off) == 8);
	r = cfi_table_find(&t, 0x1302);
	ck_assert(r && r->kind == CFI_DEREF_FP && cfi_deref_offset(r->cfa_off) == -8 &&
		  cfi_deref_addend(r->cfa_off) == 0);
	ck_assert_ptr_null(cfi_table_find(&t, 0x1303));
	r = cfi_table_find(&t, 0x1304);
	ck_assert(r && r->kind == CFI_SP && r->cfa_off == 16);
	ck_assert_ptr_null(cfi_table_find(&t, 0x1305));
	ck_assert_uint_eq(t.rows_unsupported, 2);
	cfi_table_free(&t);
}
END_TEST

/* The handler's lookup against a linear scan, at every pc of hand-made tables whose
 * middle page holds 1 to 300 rows (every span its binary search meets in a page, odd
 * and even), with the page index as cfi_table.c builds it and without one; rows with
 * no rule among them, and pcs before the first row and past the last page. */
START_TEST(lookup_matches_linear_scan)
{
	enum { PAGE_ROWS_MAX = 300, ROWS_MAX = 3 + PAGE_ROWS_MAX + 2, NPAGES = 3 };
	static struct cfi_row rows[ROWS_MAX];
	uint32_t page[NPAGES];
	const uint64_t base = 0x400000;
	for (uint32_t count = 1; count <= PAGE_ROWS_MAX; count++) {
		size_t n = 0;
		for (uint32_t i = 0; i < 3; i++)
			rows[n++] = (struct cfi_row){.pc = 0x100 * (i + 1)};
		for (uint32_t i = 0; i < count; i++) /* 13 * 300 < CFI_PAGE */
			rows[n++] = (struct cfi_row){.pc = CFI_PAGE + 13 * i};
		rows[n++] = (struct cfi_row){.pc = 2 * CFI_PAGE + 0x10};
		rows[n++] = (struct cfi_row){.pc = 2 * CFI_PAGE + 0x800};
		for (size_t i = 0; i < n; i++) {
			rows[i].kind = i % 4 == 3 ? CFI_NONE : CFI_SP;
			rows[i].cfa_off = (int32_t)i;
		}
		for (uint32_t p = 0, r = 0; p < NPAGES; p++) { /* last row at or before p's start */
			while (r + 1 < n && rows[r + 1].pc <= p * CFI_PAGE)
				r++;
			page[p] = r;
		}
		for (int indexed = 0; indexed < 2; indexed++) {
			struct cfi_table t = {.base = base, .rows = rows, .nrows = n};
			if (indexed) {
				t.page = page;
				t.npages = NPAGES;
			}
			size_t last = 0; /* rows[0, last) have pc <= the pc looked up */
			for (uint32_t pc = 0; pc < (NPAGES + 1) * CFI_PAGE; pc++) {
				while (last < n && rows[last].pc <= pc)
					last++;
				const struct cfi_row *want = last && rows[last - 1].kind != CFI_NONE
								 ? &rows[last - 1]
								 : NULL;
				const struct cfi_row *got = cfi_table_find(&t, base + pc);
				ck_assert_msg(
				    got == want,
				    "%u rows in the page, index %d, pc %#x: row %td, not %td",
				    count, indexed, pc, got ? got - rows : -1,
				    want ? want - rows : -1);
			}
		}
	}
}
END_TEST

/* SLEB128 operands at the edges of 64 bits (the cursor the builder and the signal
 * handler's lookup share): a 9-byte negative value's sign extension reaches bit 63,
 * which in int64_t arithmetic was undefined behaviour (UBSan in the ASan build). */
START_TEST(sleb128_edges_decode)
{
	static const struct {
		uint8_t b[10];
		size_t n;
		int64_t want;
	} cases[] = {
	    {{0x7f}, 1, -1},
	    {{0x3f}, 1, 63},
	    {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40}, 9, -((int64_t)1 << 62)},
	    {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f}, 10, INT64_MIN},
	    {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}, 10, INT64_MAX},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cfi_cursor c = {cases[i].b, cases[i].b + cases[i].n, false};
		int64_t got = cfi_cur_sleb(&c);
		ck_assert_msg(!c.bad && got == cases[i].want && c.p == c.end,
			      "case %zu: expected %lld, got %lld (bad %d)", i,
			      (long long)cases[i].want, (long long)got, c.bad);
	}
}
END_TEST

/* Offsets whose factored value does not fit 64 bits (found by test/fuzz/fuzz_elf_cfi.c,
 * where the product was undefined behaviour): the FDE is malformed and skipped, as one
 * whose program runs past its end, instead of a rule from a wrapped-around product. */
START_TEST(overflowing_offsets_drop_the_fde)
{
	struct bytes s = {.n = 0};
	size_t cie = add_cie(&s, "zR"); /* daf -8 */
	const uint8_t ok[] = {0x41, 0x0e, 16, 0x86, 2};
	/* offset rbp, 2^61 * -8 */
	const uint8_t off[] = {0x41, 0x86, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20};
	/* def_cfa_offset 2^63: more than an int64_t */
	const uint8_t cfa[] = {0x41, 0x0e, 0x80, 0x80, 0x80, 0x80,
			       0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
	/* def_cfa_sf rsp, 2^62 * -8 */
	const uint8_t sf[] = {0x41, 0x12, 7,	0x80, 0x80, 0x80, 0x80,
			      0x80, 0x80, 0x80, 0x80, 0xc0, 0x00};
	add_fde(&s, cie, SEC_VADDR, 0x1000, 0x40, ok, sizeof(ok));
	add_fde(&s, cie, SEC_VADDR, 0x1100, 0x40, off, sizeof(off));
	add_fde(&s, cie, SEC_VADDR, 0x1200, 0x40, cfa, sizeof(cfa));
	add_fde(&s, cie, SEC_VADDR, 0x1300, 0x40, sf, sizeof(sf));
	put32(&s, 0);
	struct cfi_section sec = {s.b, s.n, SEC_VADDR, false};
	struct cfi_table t;
	ck_assert_int_eq(cfi_table_build(&sec, 1, BASE, &t), 0);
	ck_assert_msg(t.fdes == 1 && t.fdes_skipped == 3,
		      "expected 1 FDE used and 3 skipped, got %u used and %u skipped", t.fdes,
		      t.fdes_skipped);
	ck_assert_ptr_nonnull(cfi_table_find(&t, 0x1001));
	for (uint64_t pc = 0x1101; pc < 0x1340; pc += 0x100)
		ck_assert_msg(cfi_table_find(&t, pc) == NULL, "a rule at 0x%llx",
			      (unsigned long long)pc);
	cfi_table_free(&t);
}
END_TEST

/* Every truncation and many byte mutations of a real .eh_frame: no crash, no rows
 * outside the section's FDE ranges. Run under the default build (and ASan by hand). */
START_TEST(corrupt_input_never_crashes)
{
	struct bytes s = {.n = 0};
	size_t cie = add_cie(&s, "zR");
	const uint8_t f1[] = {0x41, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6, 0x0a, 0x4f, 0x0b};
	for (int i = 0; i < 6; i++)
		add_fde(&s, cie, SEC_VADDR, 0x1000 + 0x100 * (unsigned)i, 0x40, f1, sizeof(f1));
	put32(&s, 0);
	uint8_t copy[sizeof(s.b)];
	unsigned seed = 12345;
	for (size_t cut = 0; cut <= s.n; cut++) {
		struct cfi_section sec = {s.b, cut, SEC_VADDR, false};
		struct cfi_table t;
		if (cfi_table_build(&sec, 1, BASE, &t) == 0)
			cfi_table_free(&t);
	}
	for (int iter = 0; iter < 20000; iter++) {
		memcpy(copy, s.b, s.n);
		int flips = 1 + (int)(rand_r(&seed) % 4);
		for (int k = 0; k < flips; k++)
			copy[rand_r(&seed) % s.n] = (uint8_t)rand_r(&seed);
		struct cfi_section sec = {copy, s.n, SEC_VADDR, (iter & 7) == 0};
		struct cfi_table t;
		if (cfi_table_build(&sec, 1, BASE, &t) == 0) {
			for (size_t i = 1; i < t.nrows; i++)
				ck_assert_uint_gt(t.rows[i].pc, t.rows[i - 1].pc);
			cfi_table_free(&t);
		}
	}
}
END_TEST

static Suite *cfi_suite(void)
{
	Suite *s = suite_create("cfi_table");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, synthetic_rules);
	tcase_add_test(tc, lookup_matches_linear_scan);
	tcase_add_test(tc, corrupt_input_never_crashes);
	tcase_add_test(tc, overflowing_offsets_drop_the_fde);
	tcase_add_test(tc, sleb128_edges_decode);
	tcase_add_test(tc, matches_readelf_libc);
	tcase_add_test(tc, matches_readelf_ld_so);
	tcase_add_test(tc, matches_readelf_libz_libelf);
	tcase_add_test(tc, matches_readelf_python);
	tcase_add_test(tc, matches_readelf_libcrypto);
	tcase_add_test(tc, go_runtime_entry_frames_are_roots);
	tcase_add_test(tc, matches_readelf_self);
	tcase_add_test(tc, debug_frame_only_module);
	tcase_add_test(tc, eh_frame_of_type_x86_64_unwind);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(cfi_suite());
}
