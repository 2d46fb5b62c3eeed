/*
 * fuzz_elf_cfi.c - libFuzzer target: ELF files and the call frame information in them,
 * the bytes of every module a profiled process loads (agent/unwind/elf_image.c, the CFI
 * decoder agent/unwind/cfi_decode.c shared by the table builder agent/unwind/cfi_parse.c +
 * cfi_table.c and the in-memory lookup agent/unwind/cfi_lookup.c, the symbolizer's ELF reader
 * agent/symbolize/sym_elf.c).
 *
 * Each input is one whole file, run through:
 *  1. the module registry's two ways to a table: cfi_table_build_elf on a file (a memfd
 *     of ours, through elf_image_open's mapping) and on an image in memory (the vdso's
 *     way, where ASan sees every byte past the input's end);
 *  2. the symbolizer's reads of the same file: build id, PT_LOADs, function symbols;
 *  3. the signal handler's lookup before tables exist (agent/unwind/boot_cfi.c): the file
 *     "loaded" as ld.so would (each PT_LOAD's bytes at its vaddr, the rest zero), the
 *     module found from its program headers (cfi_lookup_module_from_phdrs), then
 *     cfi_lookup_pc at every row's pc of the table of step 1 and at pcs taken from the
 *     input. Everything but the header and the segment cfi_lookup may read is poisoned,
 *     so a read outside its promise is a report, not a lucky zero;
 *  4. the bytes themselves as CFI with no ELF around them, so that mutations reach the
 *     decoder directly: as one .eh_frame; as an .eh_frame plus a .debug_frame (its
 *     second half), the builder's gap-filling path; and as an .eh_frame_hdr followed by
 *     its .eh_frame for cfi_lookup_pc.
 * Checked, beyond ASan and UBSan: a built table's rows are strictly increasing and
 * start with a rule, its page index stays within the rows and points at the row in
 * effect at each page, and cfi_table_find (the handler's lookup) returns for each row's
 * pc that row, or NULL exactly where the row says "no rule".
 * Context: the fuzzer's one thread.
 *
 * Build, from the repository's root (make fuzz does: it links every library source but
 * preload/ as one archive):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     test/fuzz/fuzz_elf_cfi.c agent/unwind/elf_image.c agent/unwind/cfi_table.c
 * agent/unwind/cfi_roots.c \
 *     agent/unwind/cfi_parse.c agent/unwind/cfi_decode.c agent/unwind/cfi_lookup.c \
 *     agent/symbolize/sym_elf.c agent/symbolize/sym_table.c common/mem_populate.c \
 *     common/big_alloc.c -o fuzz_elf_cfi
 * Run: ./fuzz_elf_cfi -max_total_time=60 test/fuzz/corpus/elf_cfi/
 */
#include <elf.h>
#include <link.h>
#include <sanitizer/asan_interface.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent/unwind/cfi_lookup.h"
#include "agent/unwind/cfi_table.h"
#include "agent/unwind/elf_image.h"
#include "agent/symbolize/sym_elf.h"
#include "agent/symbolize/sym_table.h"

/* Largest span of PT_LOADs "loaded" for step 3: real small modules span tens of KiB;
 * a hostile header asking for more is skipped rather than slowing every run. */
#define LOAD_SPAN_MAX (4u << 20)
/* Rows of a table looked up in step 3 (the rows of a seed's table, a few hundred). */
#define ROW_LOOKUPS_MAX 256
/* pcs taken from the input for the lookups (4 bytes each, from its end). */
#define INPUT_PCS 16
/* Link-time address of the raw bytes of step 4, and their table base. */
#define RAW_VADDR 0x10000u

static int memfd = -1;
static char memfd_path[64];

static void fail(const char *what, unsigned long long a, unsigned long long b)
{
	fprintf(stderr, "fuzz_elf_cfi: invariant broken: %s (%llu, %llu)\n", what, a, b);
	abort();
}

/* A table cfi_table_build* returned 0 for: its invariants, and the handler's lookup. */
static void check_table(const struct cfi_table *t)
{
	if (t->nrows == 0 || !t->rows)
		fail("a table without rows", t->nrows, 0);
	if (t->rows[0].kind == CFI_NONE)
		fail("a leading no-rule row", t->rows[0].pc, 0);
	for (size_t i = 1; i < t->nrows; i++)
		if (t->rows[i - 1].pc >= t->rows[i].pc)
			fail("rows not strictly increasing", i, t->rows[i].pc);
	if (t->page) {
		if (t->npages != (t->rows[t->nrows - 1].pc >> CFI_PAGE_SHIFT) + 1)
			fail("page count", t->npages, t->rows[t->nrows - 1].pc);
		for (uint32_t p = 0; p < t->npages; p++) {
			uint32_t r = t->page[p];
			uint32_t start = p << CFI_PAGE_SHIFT;
			if (r >= t->nrows)
				fail("page index past the rows", p, r);
			/* The last row at or before the page's start (row 0 when none is). */
			if ((t->rows[r].pc > start && r != 0) ||
			    (r + 1 < t->nrows && t->rows[r + 1].pc <= start))
				fail("page index not the row in effect", p, r);
		}
	}
	for (size_t i = 0; i < t->nrows; i++) {
		const struct cfi_row *got = cfi_table_find(t, t->base + t->rows[i].pc);
		const struct cfi_row *want = t->rows[i].kind == CFI_NONE ? NULL : &t->rows[i];
		if (got != want)
			fail("cfi_table_find at a row's own pc", i, t->rows[i].pc);
	}
}

/* Step 1, on a file: the input in our memfd, built as the registry builds a library. */
static void build_from_file(const uint8_t *data, size_t size)
{
	if (memfd < 0) {
		memfd = memfd_create("fuzz_elf_cfi", MFD_CLOEXEC);
		if (memfd < 0)
			fail("memfd_create", 0, 0);
		snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
	}
	if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, size, 0) != (ssize_t)size)
		fail("writing the memfd", size, 0);
	struct cfi_table t;
	if (cfi_table_build_elf(memfd_path, NULL, 0, &t) == 0) {
		check_table(&t);
		cfi_table_free(&t);
	}
}

/* Step 2: what the symbolizer reads of a module. */
static void read_symbols(const uint8_t *data, size_t size)
{
	struct sym_elf_info info;
	sym_elf_read_info_mem(data, size, &info);
	if (info.build_id[sizeof(info.build_id) - 1] != '\0')
		fail("build id not terminated", 0, 0);
	struct sym_table st;
	sym_table_init(&st);
	if (sym_elf_read_symbols_mem(data, size, &st) == 0) {
		sym_table_finish(&st);
		for (size_t i = 0; i < st.nsyms && i < ROW_LOOKUPS_MAX; i++)
			sym_table_find(&st, st.syms[i].addr);
	}
	sym_table_free(&st);
}

/* A pc from the input's last bytes (k-th from the end), within [lo, lo + span). */
static uint64_t input_pc(const uint8_t *data, size_t size, size_t k, uint64_t lo, uint64_t span)
{
	uint32_t v = 0;
	if (size >= 4 * (k + 1))
		memcpy(&v, data + size - 4 * (k + 1), 4);
	return span ? lo + v % span : lo;
}

/* Step 3: the file loaded as ld.so would, and looked up as boot_cfi_find does. */
static void lookup_loaded(const uint8_t *data, size_t size, const struct cfi_table *t)
{
	struct elf_image im;
	elf_image_memory(&im, data, size);
	if (elf_image_check(&im, EM_X86_64) < 0)
		return;
	size_t nph;
	const Elf64_Phdr *ph = elf_image_phdrs(&im, &nph);
	uint64_t lo = UINT64_MAX, hi = 0;
	for (size_t i = 0; i < nph; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		/* What the loader could not map, or a file too short for its segments (their
		 * pages would raise SIGBUS): no process runs it. */
		if (ph[i].p_filesz > ph[i].p_memsz || ph[i].p_offset > size ||
		    ph[i].p_filesz > size - ph[i].p_offset ||
		    ph[i].p_vaddr + ph[i].p_memsz < ph[i].p_vaddr)
			return;
		uint64_t s = ph[i].p_vaddr & ~(uint64_t)0xfff;
		lo = s < lo ? s : lo;
		hi = ph[i].p_vaddr + ph[i].p_memsz > hi ? ph[i].p_vaddr + ph[i].p_memsz : hi;
	}
	if (hi <= lo || hi - lo > LOAD_SPAN_MAX)
		return;
	size_t span = (size_t)(hi - lo);
	uint8_t *mem = calloc(1, span);
	if (!mem)
		return;
	for (size_t i = 0; i < nph; i++)
		if (ph[i].p_type == PT_LOAD)
			memcpy(mem + (ph[i].p_vaddr - lo), data + ph[i].p_offset, ph[i].p_filesz);
	uintptr_t bias = (uintptr_t)mem - (uintptr_t)lo;
	struct cfi_lookup_module m;
	if (cfi_lookup_module_from_phdrs(bias, (const ElfW(Phdr) *)ph, nph, &m) == 0) {
		/* Readable for cfi_lookup: the header and the segment holding it, no more. */
		__asan_poison_memory_region(mem, span);
		__asan_unpoison_memory_region(m.eh_lo, (size_t)(m.eh_hi - m.eh_lo));
		__asan_unpoison_memory_region(m.eh_frame_hdr, m.hdr_len);
		struct cfi_row row;
		for (size_t i = 0; t && i < t->nrows && i < ROW_LOOKUPS_MAX; i++)
			cfi_lookup_pc(&m, (uintptr_t)(t->base + t->rows[i].pc) + bias, &row);
		for (size_t k = 0; k < INPUT_PCS; k++)
			cfi_lookup_pc(&m, (uintptr_t)input_pc(data, size, k, lo, span) + bias,
				      &row);
		__asan_unpoison_memory_region(mem, span);
	}
	free(mem);
}

/* Step 4: the raw bytes as CFI sections, and as an .eh_frame_hdr with its .eh_frame. */
static void raw_cfi(const uint8_t *data, size_t size)
{
	struct cfi_table t;
	struct cfi_section eh = {data, size, RAW_VADDR, false};
	if (cfi_table_build(&eh, 1, RAW_VADDR & ~0xfffu, &t) == 0) {
		check_table(&t);
		cfi_table_free(&t);
	}
	/* .debug_frame holds absolute addresses: base 0 keeps the first 4 GiB in range. */
	size_t half = size / 2;
	struct cfi_section two[2] = {{data, half, RAW_VADDR, false},
				     {data + half, size - half, 0, true}};
	if (cfi_table_build(two, 2, 0, &t) == 0) {
		check_table(&t);
		cfi_table_free(&t);
	}
	/* The header at the input's start, .eh_frame anywhere in it: runtime address =
	 * link-time address + bias, as for a loaded module. */
	struct cfi_lookup_module m = {
	    .eh_frame_hdr = data,
	    .hdr_len = size,
	    .eh_lo = data,
	    .eh_hi = data + size,
	    .bias = (uintptr_t)data - RAW_VADDR,
	    .base = RAW_VADDR & ~0xfffu,
	};
	struct cfi_row row;
	for (size_t k = 0; k < INPUT_PCS; k++) {
		/* Near the header: where its table's datarel entries point. */
		int32_t rel = 0;
		size_t at = 12 + 8 * k; /* the k-th entry's initial location, if a header */
		if (at + 4 <= size)
			memcpy(&rel, data + at, 4);
		uintptr_t pc = (uintptr_t)data + (uintptr_t)(intptr_t)rel + (k & 3);
		cfi_lookup_pc(&m, pc, &row);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	build_from_file(data, size);
	struct cfi_table t;
	bool built = cfi_table_build_elf(NULL, data, size, &t) == 0;
	if (built)
		check_table(&t);
	read_symbols(data, size);
	lookup_loaded(data, size, built ? &t : NULL);
	if (built)
		cfi_table_free(&t);
	raw_cfi(data, size);
	return 0;
}
