/*
 * test_cfi_lookup.c - the single-pc CFI lookup against the table path, on corrupt
 * input, and inside a signal handler.
 *
 * 1. For libc, ld.so, this executable and the vdso as loaded here, every pc of the span
 *    their FDEs cover (gaps included; 1-byte steps, 5 for libc) must get from
 *    cfi_lookup_pc the row cfi_table_find gives on the table of the same module. The
 *    only exceptions allowed are pcs where the table's row comes from .debug_frame
 *    (where it differs from a table of .eh_frame alone): counted, and few.
 * 2. pcs outside every FDE give -ENOENT; copies of the vdso's CFI (libz's under
 *    valgrind, which hides the vdso) in heap blocks sized exactly to the bytes the
 *    lookup may read, truncated, with bad headers, bad pointers, huge lengths, too deep
 *    remember_state nesting or random bytes, give -EINVAL or -ENOENT (or, where the
 *    damage is elsewhere, the right row), never a crash. Run by hand under valgrind or
 *    ASan to catch any read past those blocks.
 * 3. From a SIGPROF handler, while the main thread mallocs and frees, lookups of libc
 *    pcs (a fixed set, and the interrupted pc itself) give the precomputed rows and
 *    leave errno alone.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "agent/unwind/cfi_lookup.h"
#include "agent/unwind/cfi_table.h"
#include "agent/unwind/elf_image.h"
#include "check_run.h"

struct mod {
	char path[PATH_MAX]; /* "" for the vdso */
	uintptr_t bias;
	const ElfW(Phdr) * phdr;
	size_t phnum;
	bool is_vdso;
};

struct find {
	const char *want; /* a name's last component; NULL: the executable; "vdso" */
	struct mod *out;
	bool found;
};

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct find *f = arg;
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	bool match;
	if (!f->want) {
		match = name[0] == 0 && info->dlpi_phnum > 0 &&
			getauxval(AT_SYSINFO_EHDR) != info->dlpi_addr; /* the first: the program */
	} else if (!strcmp(f->want, "vdso")) {
		match = strstr(name, "linux-vdso") != NULL ||
			(info->dlpi_addr == getauxval(AT_SYSINFO_EHDR) && info->dlpi_addr != 0);
	} else {
		const char *slash = strrchr(name, '/');
		match = !strcmp(slash ? slash + 1 : name, f->want);
	}
	if (!match || f->found)
		return 0;
	f->found = true;
	f->out->bias = info->dlpi_addr;
	f->out->phdr = info->dlpi_phdr;
	f->out->phnum = info->dlpi_phnum;
	f->out->is_vdso = f->want && !strcmp(f->want, "vdso");
	f->out->path[0] = 0;
	if (!f->want) {
		ssize_t n = readlink("/proc/self/exe", f->out->path, sizeof(f->out->path) - 1);
		ck_assert_int_gt(n, 0);
		f->out->path[n] = 0;
	} else if (!f->out->is_vdso) {
		snprintf(f->out->path, sizeof(f->out->path), "%s", name);
	}
	return 1;
}

static void find_module(const char *want, struct mod *out)
{
	struct find f = {want, out, false};
	dl_iterate_phdr(find_cb, &f);
	ck_assert_msg(f.found, "module %s not loaded", want ? want : "(executable)");
}

/* The vdso as an ELF image of our own (modules.c does the same): up to its highest
 * segment's end, plus the section headers past it, inside its last page. */
static void *vdso_image(const struct mod *m, size_t *len_out)
{
	uintptr_t vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
	size_t len = 0;
	for (size_t i = 0; i < m->phnum; i++)
		if (m->phdr[i].p_type == PT_LOAD &&
		    m->bias + m->phdr[i].p_vaddr + m->phdr[i].p_memsz - vdso > len)
			len = m->bias + m->phdr[i].p_vaddr + m->phdr[i].p_memsz - vdso;
	const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)vdso;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t mapped = (len + page - 1) & ~(page - 1);
	size_t sh_end = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	if (sh_end > len && sh_end <= mapped)
		len = sh_end;
	void *copy = malloc(len);
	ck_assert_ptr_nonnull(copy);
	memcpy(copy, (const void *)vdso, len);
	*len_out = len;
	return copy;
}

/* The module's table as the agent builds it (.eh_frame and .debug_frame), and one of
 * its .eh_frame alone: where the two differ, the row came from .debug_frame. */
static void build_tables(const struct mod *m, struct cfi_table *full, struct cfi_table *eh)
{
	size_t len = 0;
	void *image = m->is_vdso ? vdso_image(m, &len) : NULL;
	const char *path = m->is_vdso ? NULL : m->path;
	ck_assert_int_eq(cfi_table_build_elf(path, image, len, full), 0);
	struct elf_image im;
	ck_assert_int_eq(elf_image_load(&im, path, image, len, EM_X86_64), 0);
	struct elf_section sec;
	ck_assert(elf_image_section(&im, ".eh_frame", 0, &sec));
	struct cfi_section cs = {sec.data, sec.len, sec.vaddr, false};
	ck_assert_int_eq(cfi_table_build(&cs, 1, elf_image_load_base(&im), eh), 0);
	elf_image_close(&im);
	free(image);
}

static bool same_rule(const struct cfi_row *a, const struct cfi_row *b)
{
	if (!a || !b)
		return a == b;
	return a->kind == b->kind && a->cfa_off == b->cfa_off && a->fp_rule == b->fp_rule &&
	       a->fp_off == b->fp_off;
}

struct cmp_stats {
	size_t pcs;	    /* pcs compared */
	size_t rows;	    /* ... where the table has a row */
	size_t enoent;	    /* lookup said no FDE covers pc */
	size_t none;	    /* lookup found an FDE, rule unusable (table: no row) */
	size_t debug_frame; /* the table's row came from .debug_frame: not compared */
	size_t mismatches;
};

/* Compares every step-th pc of the span the module's tables cover (with a margin each
 * side, for -ENOENT before the first FDE and after the last). */
static void compare_module(const char *label, const struct mod *mod, unsigned step,
			   struct cmp_stats *st)
{
	struct cfi_table full, eh;
	build_tables(mod, &full, &eh);
	struct cfi_lookup_module m;
	ck_assert_int_eq(cfi_lookup_module_from_phdrs(mod->bias, mod->phdr, mod->phnum, &m), 0);
	ck_assert_msg(m.base == full.base, "%s: lookup base %#lx, table base %#lx", label,
		      (unsigned long)m.base, (unsigned long)full.base);
	uint64_t lo = full.base + full.rows[0].pc, hi = full.base + full.rows[full.nrows - 1].pc;
	if (eh.base + eh.rows[0].pc < lo)
		lo = eh.base + eh.rows[0].pc;
	if (eh.base + eh.rows[eh.nrows - 1].pc > hi)
		hi = eh.base + eh.rows[eh.nrows - 1].pc;
	lo = lo > 64 ? lo - 64 : 0;
	hi += 64;
	memset(st, 0, sizeof(*st));
	for (uint64_t vaddr = lo; vaddr < hi; vaddr += step) {
		const struct cfi_row *t = cfi_table_find(&full, vaddr);
		const struct cfi_row *e = cfi_table_find(&eh, vaddr);
		struct cfi_row got;
		memset(&got, 0xa5, sizeof(got));
		int rc = cfi_lookup_pc(&m, (uintptr_t)(vaddr + mod->bias), &got);
		st->pcs++;
		if (!same_rule(t, e)) {
			st->debug_frame++;
			t = e; /* the lookup reads .eh_frame only: still the same as its table */
		}
		st->rows += t != NULL;
		st->enoent += rc == -ENOENT;
		st->none += rc == 0 && got.kind == CFI_NONE;
		bool ok;
		if (!t)
			ok = rc == -ENOENT || (rc == 0 && got.kind == CFI_NONE);
		else
			/* The table merges equal neighbours: its row may start earlier. */
			ok = rc == 0 && same_rule(t, &got) && got.pc >= t->pc &&
			     got.pc <= vaddr - full.base;
		if (!ok && st->mismatches++ < 10)
			fprintf(
			    stderr,
			    "%s: vaddr %#lx: table %s kind %d cfa %d fp %d/%d pc %#x; lookup rc "
			    "%d kind %d cfa %d fp %d/%d pc %#x\n",
			    label, (unsigned long)vaddr, t ? "row" : "none", t ? t->kind : -1,
			    t ? t->cfa_off : 0, t ? t->fp_rule : 0, t ? t->fp_off : 0,
			    t ? t->pc : 0, rc, got.kind, got.cfa_off, got.fp_rule, got.fp_off,
			    got.pc);
	}
	fprintf(stderr,
		"test_cfi_lookup: %-14s %7zu pcs compared (step %u): %zu with a row, %zu -ENOENT, "
		"%zu unusable rule, %zu .debug_frame rows skipped, %zu mismatches\n",
		label, st->pcs, step, st->rows, st->enoent, st->none, st->debug_frame,
		st->mismatches);
	ck_assert_msg(st->mismatches == 0, "%s: %zu pcs where lookup and table differ", label,
		      st->mismatches);
	/* .debug_frame only fills what .eh_frame leaves uncovered: rare in these modules. */
	ck_assert_msg(st->debug_frame * 100 <= st->pcs, "%s: %zu of %zu pcs from .debug_frame",
		      label, st->debug_frame, st->pcs);
	ck_assert_uint_gt(st->rows, st->pcs / 2);
	cfi_table_free(&full);
	cfi_table_free(&eh);
}

/* Finds the module by name (NULL: this executable), compares, and wants min_pcs. */
static void compare_named(const char *name, const char *label, unsigned step, size_t min_pcs)
{
	struct mod m;
	struct cmp_stats st;
	find_module(name, &m);
	compare_module(label, &m, step, &st);
	ck_assert_uint_gt(st.pcs, min_pcs);
}

START_TEST(matches_table_libc)
{
	compare_named("libc.so.6", "libc.so.6", 5, 100000);
}
END_TEST

START_TEST(matches_table_ld_so)
{
	compare_named("ld-linux-x86-64.so.2", "ld.so", 1, 10000);
}
END_TEST

START_TEST(matches_table_self)
{
	compare_named(NULL, "test_cfi_lookup", 1, 10000);
}
END_TEST

START_TEST(matches_table_vdso)
{
	if (getauxval(AT_SYSINFO_EHDR))
		compare_named("vdso", "vdso", 1, 100);
	else
		fprintf(stderr, "test_cfi_lookup: no vdso (valgrind?): not compared\n");
}
END_TEST

/* ---------------------------------------------------------------- 2. bad input */

START_TEST(pcs_outside_fdes_are_enoent)
{
	struct mod mod;
	find_module("libc.so.6", &mod);
	struct cfi_lookup_module m;
	ck_assert_int_eq(cfi_lookup_module_from_phdrs(mod.bias, mod.phdr, mod.phnum, &m), 0);
	struct cfi_row r;
	ck_assert_int_eq(cfi_lookup_pc(&m, 0, &r), -ENOENT);
	ck_assert_int_eq(cfi_lookup_pc(&m, mod.bias + m.base, &r), -ENOENT); /* ELF header */
	ck_assert_int_eq(cfi_lookup_pc(&m, (uintptr_t)m.eh_frame_hdr, &r), -ENOENT);
	ck_assert_int_eq(cfi_lookup_pc(&m, UINTPTR_MAX, &r), -ENOENT);
	/* The first FDE the header lists: covered (not &malloc: ASan's, under ASan). */
	int32_t first;
	memcpy(&first, m.eh_frame_hdr + 12, 4);
	ck_assert_int_eq(cfi_lookup_pc(&m, (uintptr_t)m.eh_frame_hdr + first, &r), 0);
	ck_assert_int_eq(cfi_lookup_pc(&m, (uintptr_t)m.eh_frame_hdr + first - 1, &r), -ENOENT);
	/* A module without PT_GNU_EH_FRAME. */
	ElfW(Phdr) load = {.p_type = PT_LOAD, .p_flags = PF_R, .p_filesz = 4096, .p_memsz = 4096};
	ck_assert_int_eq(cfi_lookup_module_from_phdrs(0, &load, 1, &m), -ENOENT);
	/* A header outside every readable PT_LOAD. */
	ElfW(Phdr) two[2] = {load, {.p_type = PT_GNU_EH_FRAME, .p_vaddr = 8192, .p_memsz = 64}};
	ck_assert_int_eq(cfi_lookup_module_from_phdrs(0, two, 2, &m), -EINVAL);
	two[0].p_filesz = two[0].p_memsz = 16384;
	two[0].p_flags = PF_W;
	ck_assert_int_eq(cfi_lookup_module_from_phdrs(0, two, 2, &m), -EINVAL);
	ck_assert_int_eq(cfi_lookup_pc(NULL, 0, &r), -EINVAL);
}
END_TEST

/* A small module's CFI (the vdso's; libz's where there is no vdso, under valgrind),
 * taken apart once: header fields and table, in runtime addresses. */
struct cfi_src {
	struct cfi_lookup_module m;
	const uint8_t *eh_frame; /* where the header's pointer says .eh_frame starts */
	uint32_t count;
	const uint8_t *table; /* count pairs of sdata4 offsets from the header */
	uintptr_t pcs[64];    /* pcs inside its FDEs, and their rows */
	struct cfi_row rows[64];
	size_t npcs;
};

static int32_t s32_at(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

static void put_s32(uint8_t *p, int64_t v)
{
	ck_assert(v >= INT32_MIN && v <= INT32_MAX);
	int32_t x = (int32_t)v;
	memcpy(p, &x, 4);
}

static void small_src(struct cfi_src *src)
{
	struct mod mod;
	find_module(getauxval(AT_SYSINFO_EHDR) ? "vdso" : "libz.so.1", &mod);
	memset(src, 0, sizeof(*src));
	ck_assert_int_eq(cfi_lookup_module_from_phdrs(mod.bias, mod.phdr, mod.phnum, &src->m), 0);
	const uint8_t *h = src->m.eh_frame_hdr;
	ck_assert_msg(h[0] == 1 && h[1] == 0x1b && h[2] == 0x03 && h[3] == 0x3b,
		      "header %02x %02x %02x %02x: not the form this test rewrites", h[0], h[1],
		      h[2], h[3]);
	src->eh_frame = h + 4 + s32_at(h + 4);
	memcpy(&src->count, h + 8, 4);
	src->table = h + 12;
	ck_assert_uint_gt(src->count, 0);
	/* Pcs: each FDE's start and a few bytes in, with their rows. */
	for (uint32_t i = 0; i < src->count && src->npcs + 2 <= 64; i++) {
		uintptr_t start = (uintptr_t)h + s32_at(src->table + 8 * i);
		for (int k = 0; k < 2; k++) {
			uintptr_t pc = start + (uintptr_t)k * 5;
			if (cfi_lookup_pc(&src->m, pc, &src->rows[src->npcs]) == 0)
				src->pcs[src->npcs++] = pc;
		}
	}
	ck_assert_uint_gt(src->npcs, 4);
}

/* A copy of src's CFI in one malloc'd block of exactly hdr_keep + eh_keep bytes: the
 * segment holding .eh_frame (its first eh_keep bytes) and a header rewritten for the
 * new place (its first hdr_keep bytes), header first or last. Whichever comes last
 * ends at the block's end: a read past it is a read past the block (valgrind, ASan).
 * Pcs of the copy are src's plus *delta. */
struct copy {
	uint8_t *buf, *hdr, *eh;
	size_t hdr_len, eh_len;
	struct cfi_lookup_module m;
	intptr_t delta;
};

static size_t full_hdr_len(const struct cfi_src *src)
{
	return 12 + 8 * (size_t)src->count;
}

static void make_copy(const struct cfi_src *src, bool hdr_last, size_t hdr_keep, size_t eh_keep,
		      struct copy *c)
{
	size_t seg = (size_t)(src->m.eh_hi - src->m.eh_lo), hlen = full_hdr_len(src);
	ck_assert(hdr_keep <= hlen && eh_keep <= seg);
	c->buf = malloc(hdr_keep + eh_keep + 1); /* + 1: malloc(0) may give NULL */
	ck_assert_ptr_nonnull(c->buf);
	c->hdr = hdr_last ? c->buf + eh_keep : c->buf;
	c->eh = hdr_last ? c->buf : c->buf + hdr_keep;
	c->hdr_len = hdr_keep;
	c->eh_len = eh_keep;
	memcpy(c->eh, src->m.eh_lo, eh_keep);
	c->delta = (intptr_t)(c->eh - src->m.eh_lo);
	uint8_t *h = malloc(hlen);
	ck_assert_ptr_nonnull(h);
	const uint8_t *oh = src->m.eh_frame_hdr;
	memcpy(h, oh, 4);
	put_s32(h + 4, (intptr_t)(src->eh_frame + c->delta) - (intptr_t)(c->hdr + 4));
	memcpy(h + 8, &src->count, 4);
	for (uint32_t i = 0; i < src->count; i++) {
		const uint8_t *e = src->table + 8 * i;
		intptr_t init = (intptr_t)(oh + s32_at(e)) + c->delta;
		intptr_t fde = (intptr_t)(oh + s32_at(e + 4)) + c->delta;
		put_s32(h + 12 + 8 * i, init - (intptr_t)c->hdr);
		put_s32(h + 16 + 8 * i, fde - (intptr_t)c->hdr);
	}
	memcpy(c->hdr, h, hdr_keep);
	free(h);
	c->m = (struct cfi_lookup_module){.eh_frame_hdr = c->hdr,
					  .hdr_len = hdr_keep,
					  .eh_lo = c->eh,
					  .eh_hi = c->eh + eh_keep,
					  .bias = src->m.bias + (uint64_t)c->delta,
					  .base = src->m.base};
}

/* Every pc of src on copy c: the right row, or -EINVAL / -ENOENT. Returns how many
 * gave the right row. */
static size_t lookup_all(const struct cfi_src *src, const struct copy *c)
{
	size_t right = 0;
	for (size_t i = 0; i < src->npcs; i++) {
		struct cfi_row r;
		int rc = cfi_lookup_pc(&c->m, src->pcs[i] + (uintptr_t)c->delta, &r);
		ck_assert_msg(rc == 0 || rc == -EINVAL || rc == -ENOENT, "rc %d", rc);
		if (rc == 0) {
			ck_assert_uint_le(r.kind, CFI_ROOT);
			right += same_rule(&r, &src->rows[i]) && r.pc == src->rows[i].pc;
		}
	}
	return right;
}

/* The runtime address of entry i's FDE in copy c. */
static uint8_t *copy_fde(const struct copy *c, uint32_t i)
{
	return c->hdr + s32_at(c->hdr + 16 + 8 * i);
}

/* The header entry of src's longest FDE (room to rewrite its program). */
static uint32_t longest_fde(const struct cfi_src *src)
{
	uint32_t best = 0, best_len = 0;
	for (uint32_t i = 0; i < src->count; i++) {
		const uint8_t *fde = src->m.eh_frame_hdr + s32_at(src->table + 8 * i + 4);
		uint32_t len;
		memcpy(&len, fde, 4);
		if (len > best_len) {
			best = i;
			best_len = len;
		}
	}
	return best;
}

START_TEST(copies_give_the_same_rows)
{
	struct cfi_src src;
	small_src(&src);
	size_t seg = (size_t)(src.m.eh_hi - src.m.eh_lo), hlen = full_hdr_len(&src);
	for (int last = 0; last < 2; last++) {
		struct copy c;
		make_copy(&src, last, hlen, seg, &c);
		ck_assert_uint_eq(lookup_all(&src, &c), src.npcs);
		free(c.buf);
	}
}
END_TEST

START_TEST(truncated_bounds_never_read_past)
{
	struct cfi_src src;
	small_src(&src);
	size_t seg = (size_t)(src.m.eh_hi - src.m.eh_lo), hlen = full_hdr_len(&src);
	size_t runs = 0;
	/* The header cut short (it ends the block). */
	for (size_t keep = 0; keep < hlen; keep++, runs++) {
		struct copy c;
		make_copy(&src, true, keep, seg, &c);
		/* Its table then holds fewer entries than its count says. */
		ck_assert_uint_eq(lookup_all(&src, &c), 0);
		free(c.buf);
	}
	/* The segment cut short (it ends the block): every length around its .eh_frame's
	 * start (the bytes before it are rodata), then in steps of 3. */
	size_t ef_off = (size_t)(src.eh_frame - src.m.eh_lo);
	for (size_t keep = 0; keep < seg; runs++) {
		struct copy c;
		make_copy(&src, false, hlen, keep, &c);
		size_t right = lookup_all(&src, &c);
		if (keep <= ef_off) /* the .eh_frame pointer is past the bounds */
			ck_assert_uint_eq(right, 0);
		free(c.buf);
		keep += keep + 64 < ef_off ? 61 : keep < ef_off + 64 ? 1 : 3;
	}
	ck_assert_uint_gt(runs, 100);
}
END_TEST

/* Each damage on a full copy (header last: its reads end at the block's end), and what
 * every lookup must then say (0: no lookup may give a row). */
START_TEST(bad_headers_are_einval)
{
	struct cfi_src src;
	small_src(&src);
	size_t seg = (size_t)(src.m.eh_hi - src.m.eh_lo), hlen = full_hdr_len(&src);
	struct {
		size_t at;
		uint8_t v;
		const char *what;
	} bytes[] = {
	    {0, 2, "version 2"},
	    {0, 0, "version 0"},
	    {1, 0x03, "eh_frame_ptr udata4"},
	    {1, 0xff, "eh_frame_ptr omitted"},
	    {1, 0x9b, "eh_frame_ptr indirect"},
	    {2, 0x0b, "fde_count sdata4"},
	    {2, 0xff, "fde_count omitted"},
	    {3, 0x1b, "table pcrel"},
	    {3, 0xff, "no table"},
	    {3, 0x3c, "table datarel sdata8"},
	};
	for (size_t k = 0; k < sizeof(bytes) / sizeof(bytes[0]); k++) {
		struct copy c;
		make_copy(&src, true, hlen, seg, &c);
		c.hdr[bytes[k].at] = bytes[k].v;
		for (size_t i = 0; i < src.npcs; i++) {
			struct cfi_row r;
			ck_assert_msg(cfi_lookup_pc(&c.m, src.pcs[i] + (uintptr_t)c.delta, &r) ==
					  -EINVAL,
				      "%s: expected -EINVAL", bytes[k].what);
		}
		free(c.buf);
	}
	struct {
		size_t at;
		uint32_t v;
		int rc;
		const char *what;
	} words[] = {
	    {8, 0xffffffffu, -EINVAL, "fde_count 2^32-1"},
	    {8, (uint32_t)src.count + 1, -EINVAL, "fde_count past the header"},
	    {8, 0, -ENOENT, "fde_count 0"},
	    {4, 0x80000000u, -EINVAL, "eh_frame_ptr far before"},
	    {4, 0x7fffffffu, -EINVAL, "eh_frame_ptr far after"},
	};
	for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
		struct copy c;
		make_copy(&src, true, hlen, seg, &c);
		memcpy(c.hdr + words[k].at, &words[k].v, 4);
		for (size_t i = 0; i < src.npcs; i++) {
			struct cfi_row r;
			int rc = cfi_lookup_pc(&c.m, src.pcs[i] + (uintptr_t)c.delta, &r);
			ck_assert_msg(rc == words[k].rc, "%s: expected %d, got %d", words[k].what,
				      words[k].rc, rc);
		}
		free(c.buf);
	}
	/* The eh_frame_ptr at the segment's first byte before .eh_frame: the FDEs are
	 * then before it (refused) or their CIEs are (refused). */
	struct copy c;
	make_copy(&src, true, hlen, seg, &c);
	put_s32(c.hdr + 4, (intptr_t)(c.eh + c.eh_len - 1) - (intptr_t)(c.hdr + 4));
	for (size_t i = 0; i < src.npcs; i++) {
		struct cfi_row r;
		ck_assert_int_eq(cfi_lookup_pc(&c.m, src.pcs[i] + (uintptr_t)c.delta, &r), -EINVAL);
	}
	free(c.buf);
}
END_TEST

/* Damage to one FDE (the first listed) or its CIE: lookups of that FDE's pcs fail,
 * those of other FDEs with other CIEs are unaffected. */
START_TEST(bad_entries_are_einval)
{
	struct cfi_src src;
	small_src(&src);
	size_t seg = (size_t)(src.m.eh_hi - src.m.eh_lo), hlen = full_hdr_len(&src);
	uint32_t idx = longest_fde(&src);
	uintptr_t pc0 = (uintptr_t)src.m.eh_frame_hdr + s32_at(src.table + 8 * idx); /* its start */
	enum {
		FDE_OUT,
		FDE_TAIL,
		CIE_PTR_HUGE,
		CIE_PTR_SELF,
		CIE_PTR_MID,
		FDE_LEN_HUGE,
		FDE_LEN_64,
		CIE_LEN_HUGE,
		AUG_LEN_HUGE,
		DEEP_REMEMBER,
		INITIAL_MISMATCH,
		NCASES
	};
	for (int k = 0; k < NCASES; k++) {
		struct copy c;
		/* Header first: reads of the segment end at the block's end. */
		make_copy(&src, false, hlen, seg, &c);
		uint8_t *fde = copy_fde(&c, idx);
		uint8_t *entry = c.hdr + 12 + 8 * idx;
		uint8_t *id = fde + 4;
		int32_t cie_ptr = s32_at(id);
		uint8_t *cie = id - cie_ptr;
		int want = -EINVAL;
		switch (k) {
		case FDE_OUT: /* the table's FDE address past the block */
			put_s32(entry + 4, (intptr_t)(c.eh + c.eh_len + 8) - (intptr_t)c.hdr);
			break;
		case FDE_TAIL: /* an FDE in the segment's last 2 bytes */
			put_s32(entry + 4, (intptr_t)(c.eh + c.eh_len - 2) - (intptr_t)c.hdr);
			break;
		case CIE_PTR_HUGE:
			put_s32(id, INT32_MAX);
			break;
		case CIE_PTR_SELF: /* "CIE" = the FDE itself: its id is not 0 */
			put_s32(id, 4);
			break;
		case CIE_PTR_MID: /* 2 bytes into the CIE: its "length" reads 0 */
			put_s32(id, cie_ptr - 2);
			break;
		case FDE_LEN_HUGE:
			put_s32(fde, 0x7ffffff0);
			break;
		case FDE_LEN_64: { /* 64-bit length: 0xffffffff then 8 huge bytes */
			uint32_t esc = 0xffffffffu;
			memcpy(fde, &esc, 4);
			memset(fde + 4, 0x7f, 8);
			break;
		}
		case CIE_LEN_HUGE:
			put_s32(cie, 0x7ffffff0);
			break;
		case AUG_LEN_HUGE: /* "zR": pc_begin, range (sdata4/udata4), then its length */
			ck_assert_msg(!memcmp(cie + 9, "zR", 3), "CIE augmentation %s",
				      (const char *)cie + 9);
			memset(id + 12, 0xff, 4); /* an over-long uleb128, then what follows */
			break;
		case DEEP_REMEMBER: { /* 17 nested DW_CFA_remember_state before any advance */
			uint32_t len;
			memcpy(&len, fde, 4);
			ck_assert_uint_ge(len, 13 + 17);
			memset(id + 13, 0x0a, (size_t)len - 13);
			break;
		}
		case INITIAL_MISMATCH: /* the table's initial location 1 byte before the FDE's */
			put_s32(entry, s32_at(entry) - 1);
			break;
		}
		struct cfi_row r;
		int rc = cfi_lookup_pc(&c.m, pc0 + (uintptr_t)c.delta, &r);
		ck_assert_msg(rc == want, "case %d: expected %d, got %d", k, want, rc);
		lookup_all(&src, &c); /* the rest: no crash, valid answers */
		free(c.buf);
	}
}
END_TEST

/* Random bytes anywhere in the copy (header or segment), in blocks of exactly its size. */
START_TEST(random_damage_never_crashes)
{
	struct cfi_src src;
	small_src(&src);
	size_t seg = (size_t)(src.m.eh_hi - src.m.eh_lo), hlen = full_hdr_len(&src);
	size_t ef_off = (size_t)(src.eh_frame - src.m.eh_lo);
	unsigned seed = 4242;
	size_t right = 0, lookups = 0;
	int iters = getenv("CFI_LOOKUP_FUZZ") ? atoi(getenv("CFI_LOOKUP_FUZZ")) : 3000;
	for (int iter = 0; iter < iters; iter++) {
		struct copy c;
		make_copy(&src, iter & 1, hlen, seg, &c);
		int flips = 1 + (int)(rand_r(&seed) % 4);
		for (int k = 0; k < flips; k++) {
			/* Mostly .eh_frame (CIEs, FDEs, programs), some header. */
			bool in_hdr = rand_r(&seed) % 4 == 0;
			uint8_t *at = in_hdr
					  ? c.hdr + (size_t)rand_r(&seed) % hlen
					  : c.eh + ef_off + (size_t)rand_r(&seed) % (seg - ef_off);
			*at = (uint8_t)rand_r(&seed);
		}
		right += lookup_all(&src, &c);
		lookups += src.npcs;
		free(c.buf);
	}
	fprintf(stderr, "test_cfi_lookup: %zu lookups on damaged copies, %zu still right\n",
		lookups, right);
	ck_assert_uint_gt(right, 0);
}
END_TEST

/* ---------------------------------------------------------------- 3. signal handler */

#define SIG_PCS 512
#define SIG_LOOKUPS_PER_SIGNAL 64

static struct cfi_lookup_module sig_libc;
static struct cfi_table sig_table; /* libc's, to check the interrupted pc */
static uint64_t sig_bias;
static uintptr_t sig_pcs[SIG_PCS];
static int sig_rc[SIG_PCS];
static struct cfi_row sig_rows[SIG_PCS];
static _Atomic uint64_t sig_signals, sig_lookups, sig_mismatch, sig_errno_changed,
    sig_interrupted_in_libc, sig_interrupted_mismatch;
static unsigned sig_next;

static void sigprof_handler(int sig, siginfo_t *si, void *ucv)
{
	int saved = errno;
	errno = 12345; /* lookups must leave it alone */
	for (int k = 0; k < SIG_LOOKUPS_PER_SIGNAL; k++) {
		unsigned i = sig_next++ % SIG_PCS;
		struct cfi_row r;
		int rc = cfi_lookup_pc(&sig_libc, sig_pcs[i], &r);
		if (rc != sig_rc[i] || (rc == 0 && memcmp(&r, &sig_rows[i], sizeof(r)) != 0))
			atomic_fetch_add_explicit(&sig_mismatch, 1, memory_order_relaxed);
	}
	/* The interrupted pc itself (often inside malloc or free): against the table. */
	const ucontext_t *uc = ucv;
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	struct cfi_row r;
	int rc = cfi_lookup_pc(&sig_libc, pc, &r);
	if (pc >= (uintptr_t)sig_bias + sig_table.base && rc != -EINVAL) {
		const struct cfi_row *t = cfi_table_find(&sig_table, pc - sig_bias);
		bool ok = t ? rc == 0 && same_rule(t, &r)
			    : rc == -ENOENT || (rc == 0 && r.kind == CFI_NONE);
		if (rc == 0)
			atomic_fetch_add_explicit(&sig_interrupted_in_libc, 1,
						  memory_order_relaxed);
		if (!ok)
			atomic_fetch_add_explicit(&sig_interrupted_mismatch, 1,
						  memory_order_relaxed);
	}
	if (errno != 12345)
		atomic_fetch_add_explicit(&sig_errno_changed, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&sig_lookups, SIG_LOOKUPS_PER_SIGNAL + 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&sig_signals, 1, memory_order_relaxed);
	errno = saved;
}

START_TEST(lookup_in_sigprof_handler)
{
	struct mod mod;
	find_module("libc.so.6", &mod);
	ck_assert_int_eq(cfi_lookup_module_from_phdrs(mod.bias, mod.phdr, mod.phnum, &sig_libc), 0);
	ck_assert_int_eq(cfi_table_build_elf(mod.path, NULL, 0, &sig_table), 0);
	sig_bias = mod.bias;
	/* Pcs spread over libc's FDEs (some in gaps), and the rows the lookup gives now. */
	uint64_t lo = sig_table.base + sig_table.rows[0].pc;
	uint64_t span = sig_table.rows[sig_table.nrows - 1].pc - sig_table.rows[0].pc;
	size_t with_row = 0;
	for (size_t i = 0; i < SIG_PCS; i++) {
		sig_pcs[i] = (uintptr_t)(mod.bias + lo + span * i / SIG_PCS + i % 13);
		memset(&sig_rows[i], 0, sizeof(sig_rows[i]));
		sig_rc[i] = cfi_lookup_pc(&sig_libc, sig_pcs[i], &sig_rows[i]);
		ck_assert(sig_rc[i] == 0 || sig_rc[i] == -ENOENT);
		with_row += sig_rc[i] == 0;
	}
	ck_assert_uint_gt(with_row, SIG_PCS / 2);
	struct sigaction sa = {.sa_sigaction = sigprof_handler,
			       .sa_flags = SA_SIGINFO | SA_RESTART};
	sigemptyset(&sa.sa_mask);
	struct sigaction old;
	ck_assert_int_eq(sigaction(SIGPROF, &sa, &old), 0);
	struct itimerval it = {{0, 1000}, {0, 1000}}; /* 1 ms of CPU time */
	ck_assert_int_eq(setitimer(ITIMER_PROF, &it, NULL), 0);
	/* malloc and free until enough signals (ITIMER_PROF fires at the tick at best). */
	void *keep[64] = {0};
	unsigned seed = 7;
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int k = 0; k < 1000; k++) {
			unsigned i = (unsigned)rand_r(&seed) % 64;
			free(keep[i]);
			keep[i] = malloc(1 + (size_t)rand_r(&seed) % 4096);
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (atomic_load_explicit(&sig_signals, memory_order_relaxed) < 200 &&
		 now.tv_sec - t0.tv_sec < 10);
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_PROF, &off, NULL);
	sigaction(SIGPROF, &old, NULL);
	for (int i = 0; i < 64; i++)
		free(keep[i]);
	uint64_t signals = atomic_load(&sig_signals), lookups = atomic_load(&sig_lookups);
	fprintf(stderr,
		"test_cfi_lookup: %lu SIGPROFs, %lu lookups in the handler, %lu mismatches; "
		"interrupted pc in a libc FDE %lu times, %lu mismatches\n",
		(unsigned long)signals, (unsigned long)lookups,
		(unsigned long)atomic_load(&sig_mismatch),
		(unsigned long)atomic_load(&sig_interrupted_in_libc),
		(unsigned long)atomic_load(&sig_interrupted_mismatch));
	ck_assert_uint_ge(signals, 50);
	ck_assert_uint_ge(lookups, 3000);
	ck_assert_uint_eq(atomic_load(&sig_mismatch), 0);
	ck_assert_uint_eq(atomic_load(&sig_interrupted_mismatch), 0);
	ck_assert_uint_eq(atomic_load(&sig_errno_changed), 0);
	cfi_table_free(&sig_table);
}
END_TEST

static Suite *cfi_lookup_suite(void)
{
	Suite *s = suite_create("cfi_lookup");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, matches_table_libc);
	tcase_add_test(tc, matches_table_ld_so);
	tcase_add_test(tc, matches_table_self);
	tcase_add_test(tc, matches_table_vdso);
	tcase_add_test(tc, pcs_outside_fdes_are_enoent);
	tcase_add_test(tc, copies_give_the_same_rows);
	tcase_add_test(tc, truncated_bounds_never_read_past);
	tcase_add_test(tc, bad_headers_are_einval);
	tcase_add_test(tc, bad_entries_are_einval);
	tcase_add_test(tc, random_damage_never_crashes);
	tcase_add_test(tc, lookup_in_sigprof_handler);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(cfi_lookup_suite());
}
