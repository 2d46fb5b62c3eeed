/*
 * test_got_image.c - unit tests of agent/alloc/got_image.c: a module's GOT slots read
 * from its dynamic section, on synthetic images.
 *
 * An image is one malloc'd buffer of exact size, so that ASan sees a read past it; its
 * string table ends the buffer, without a NUL after its last name. A valid image,
 * with its d_ptr values relative or absolute, yields exactly the slots its relocations
 * name; every kind of out-of-range or unusual value in the program headers or the
 * dynamic section is refused (-EINVAL); relocations naming a symbol, a name or a slot
 * out of bounds are counted as bad and never followed; the GNU hash lookup finds only
 * defined functions in their default version, and stays inside a bad table. On libc in
 * memory, the lookup agrees with dlsym. Real modules: test_got_patch.c.
 */
#include "agent/alloc/got_image.h"

#include <check.h>

#include "test/unit/check_run.h"
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

struct lm_find {
	const char *name;
	struct dl_phdr_info info;
	bool found;
};

/* The module whose name ends with f->name. */
static int find_by_name(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct lm_find *f = arg;
	(void)size;
	size_t n = strlen(info->dlpi_name), m = strlen(f->name);
	if (n >= m && strcmp(info->dlpi_name + n - m, f->name) == 0) {
		f->info = *info;
		f->found = true;
		return 1;
	}
	return 0;
}

/*
 * A module in one malloc'd buffer of IMG_SIZE bytes (base = its address):
 *   [0, RW_END)        PF_R|PF_W: the dynamic section at 0, the GOT at GOT_OFF;
 *                      PT_GNU_RELRO covers it
 *   [RW_END, IMG_SIZE) PF_R: symbols at SYM_OFF, RELA at RELA_OFF, JMPREL at
 *                      JMPREL_OFF, and the strings last, ending with the buffer
 * Symbols: 1 malloc, 2 free, 3 other (a function defined here), 4 calloc (undefined
 * with a value: a canonical PLT entry at PLT_OFF). GLOB_DAT: free, other, calloc;
 * JUMP_SLOT: malloc. A GNU hash table and versions for the symbols. The strings end
 * with "tail", without its NUL, at the end of the buffer.
 */
#define IMG_SIZE 2048
#define RW_END 1024
#define GOT_OFF 512
#define SYM_OFF 1024
#define RELA_OFF 1280
#define JMPREL_OFF 1408
#define HASH_OFF 1536	/* DT_GNU_HASH: 1 bucket, symbols 1 to 4 in one chain */
#define VERSYM_OFF 1600 /* DT_VERSYM: 5 entries */
#define PLT_OFF 0x10
static const char strings[] = "\0malloc\0free\0other\0calloc\0tail"; /* "tail": no NUL */
#define STR_SIZE (sizeof(strings) - 1)
#define STR_OFF (IMG_SIZE - STR_SIZE)
enum { NDYN = 14 };

struct image {
	unsigned char *mem;
	Elf64_Phdr ph[4];
	size_t phnum;
	Elf64_Dyn *dyn;
};

/* The GNU hash of a name (h * 33 + c, from 5381). */
static uint32_t gnu_hash_of(const char *name)
{
	uint32_t h = 5381;
	for (; *name; name++)
		h = h * 33 + (unsigned char)*name;
	return h;
}

#define BLOOM_SHIFT 6
static void hash_build(unsigned char *mem)
{
	static const char *const names[] = {"malloc", "free", "other", "calloc"};
	uint32_t *h = (uint32_t *)(mem + HASH_OFF);
	h[0] = 1;	    /* buckets */
	h[1] = 1;	    /* first hashed symbol */
	h[2] = 1;	    /* bloom words */
	h[3] = BLOOM_SHIFT; /* bloom shift */
	uint64_t *bloom = (uint64_t *)(h + 4);
	uint32_t *buckets = (uint32_t *)(bloom + 1), *chain = buckets + 1;
	buckets[0] = 1;
	for (int i = 0; i < 4; i++) {
		uint32_t hv = gnu_hash_of(names[i]);
		*bloom |= (1ULL << (hv % 64)) | (1ULL << ((hv >> BLOOM_SHIFT) % 64));
		chain[i] = (hv & ~1u) | (i == 3);
	}
	uint16_t *versym = (uint16_t *)(mem + VERSYM_OFF);
	for (int i = 1; i < 5; i++)
		versym[i] = 2;
}

static Elf64_Rela rela_of(uint64_t off, uint32_t sym, uint32_t type)
{
	return (Elf64_Rela){.r_offset = off, .r_info = ELF64_R_INFO(sym, type)};
}

/* absolute: d_ptr values with base added (glibc's in-memory view), else relative. */
static void image_build(struct image *im, bool absolute)
{
	im->mem = aligned_alloc(64, IMG_SIZE);
	ck_assert_ptr_nonnull(im->mem);
	memset(im->mem, 0, IMG_SIZE);
	uintptr_t base = (uintptr_t)im->mem, add = absolute ? base : 0;
	memcpy(im->mem + STR_OFF, strings, STR_SIZE);
	Elf64_Sym *sym = (Elf64_Sym *)(im->mem + SYM_OFF);
	sym[1] = (Elf64_Sym){.st_name = 1}; /* malloc */
	sym[2] = (Elf64_Sym){.st_name = 8}; /* free */
	sym[3] = (Elf64_Sym){.st_name = 13, /* other */
			     .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
			     .st_shndx = 1,
			     .st_value = 64};
	sym[4] = (Elf64_Sym){.st_name = 19, .st_value = PLT_OFF}; /* calloc */
	Elf64_Rela *rela = (Elf64_Rela *)(im->mem + RELA_OFF);
	rela[0] = rela_of(GOT_OFF, 2, R_X86_64_GLOB_DAT);
	rela[1] = rela_of(GOT_OFF + 8, 3, R_X86_64_GLOB_DAT);
	rela[2] = rela_of(GOT_OFF + 16, 4, R_X86_64_GLOB_DAT);
	rela[3] = rela_of(GOT_OFF + 24, 0, R_X86_64_RELATIVE);
	Elf64_Rela *jmp = (Elf64_Rela *)(im->mem + JMPREL_OFF);
	jmp[0] = rela_of(GOT_OFF + 32, 1, R_X86_64_JUMP_SLOT);
	im->dyn = (Elf64_Dyn *)im->mem;
	Elf64_Dyn d[NDYN] = {
	    {DT_STRTAB, {add + STR_OFF}},
	    {DT_STRSZ, {STR_SIZE}},
	    {DT_SYMTAB, {add + SYM_OFF}},
	    {DT_SYMENT, {sizeof(Elf64_Sym)}},
	    {DT_RELA, {add + RELA_OFF}},
	    {DT_RELASZ, {4 * sizeof(Elf64_Rela)}},
	    {DT_RELAENT, {sizeof(Elf64_Rela)}},
	    {DT_JMPREL, {add + JMPREL_OFF}},
	    {DT_PLTRELSZ, {sizeof(Elf64_Rela)}},
	    {DT_PLTREL, {DT_RELA}},
	    {DT_GNU_HASH, {add + HASH_OFF}},
	    {DT_VERSYM, {add + VERSYM_OFF}},
	    {DT_NULL, {0}},
	    {DT_NULL, {0}},
	};
	memcpy(im->dyn, d, sizeof(d));
	hash_build(im->mem);
	im->ph[0] = (Elf64_Phdr){
	    .p_type = PT_LOAD, .p_flags = PF_R | PF_W, .p_vaddr = 0, .p_memsz = RW_END};
	im->ph[1] = (Elf64_Phdr){
	    .p_type = PT_LOAD, .p_flags = PF_R, .p_vaddr = RW_END, .p_memsz = IMG_SIZE - RW_END};
	im->ph[2] = (Elf64_Phdr){
	    .p_type = PT_DYNAMIC, .p_flags = PF_R | PF_W, .p_vaddr = 0, .p_memsz = sizeof(d)};
	im->ph[3] =
	    (Elf64_Phdr){.p_type = PT_GNU_RELRO, .p_flags = PF_R, .p_vaddr = 0, .p_memsz = RW_END};
	im->phnum = 4;
}

static int image_parse(struct image *im, struct got_image *d)
{
	return got_image_parse((uintptr_t)im->mem, im->ph, im->phnum, d);
}

static Elf64_Dyn *dyn_entry(struct image *im, int64_t tag)
{
	for (int i = 0; i < NDYN; i++)
		if (im->dyn[i].d_tag == tag)
			return &im->dyn[i];
	ck_abort_msg("no tag %lld", (long long)tag);
	return NULL;
}

static const char *const synth_names[] = {"malloc", "free", "calloc", "tail"};

START_TEST(synthetic_image_slots_are_found)
{
	for (int absolute = 0; absolute <= 1; absolute++) {
		struct image im;
		image_build(&im, absolute);
		uintptr_t base = (uintptr_t)im.mem;
		struct got_image d;
		ck_assert_int_eq(image_parse(&im, &d), 0);
		ck_assert_ptr_eq(d.strtab, (const char *)im.mem + STR_OFF);
		ck_assert_uint_eq(d.nrela, 4);
		ck_assert_uint_eq(d.njmprel, 1);
		ck_assert_uint_eq(d.nsyms, (IMG_SIZE - SYM_OFF) / sizeof(Elf64_Sym));
		struct got_image_slot s[8];
		size_t bad;
		ck_assert_uint_eq(got_image_find_slots(&d, synth_names, 3, s, 8, &bad), 3);
		ck_assert_uint_eq(bad, 0);
		ck_assert_uint_eq(s[0].addr, base + GOT_OFF); /* free */
		ck_assert_uint_eq(s[0].entry, 1);
		ck_assert(!s[0].jump_slot);
		ck_assert_uint_eq(s[1].addr, base + GOT_OFF + 16); /* calloc */
		ck_assert_uint_eq(s[1].entry, 2);
		ck_assert_uint_eq(s[1].plt, base + PLT_OFF);
		ck_assert_uint_eq(s[2].addr, base + GOT_OFF + 32); /* malloc */
		ck_assert_uint_eq(s[2].entry, 0);
		ck_assert(s[2].jump_slot);
		ck_assert_uint_eq(s[2].plt, 0);
		/* Only the first max are written; all are counted. */
		ck_assert_uint_eq(got_image_find_slots(&d, synth_names, 3, s, 1, &bad), 3);
		free(im.mem);
	}
}
END_TEST

/* One change to a valid image (relative or absolute) that got_patch_parse must refuse. */
struct mutation {
	const char *what;
	void (*apply)(struct image *im);
	int want;
};

#define MUT(name, body)                                                                            \
	static void name(struct image *im)                                                         \
	{                                                                                          \
		body;                                                                              \
	}
MUT(strtab_outside, dyn_entry(im, DT_STRTAB)->d_un.d_ptr += IMG_SIZE)
MUT(strsz_huge, dyn_entry(im, DT_STRSZ)->d_un.d_val = 1ULL << 40)
MUT(strsz_past_end, dyn_entry(im, DT_STRSZ)->d_un.d_val = STR_SIZE + 1)
MUT(strsz_zero, dyn_entry(im, DT_STRSZ)->d_un.d_val = 0)
MUT(symtab_outside, dyn_entry(im, DT_SYMTAB)->d_un.d_ptr += 1ULL << 44)
MUT(symtab_misaligned, dyn_entry(im, DT_SYMTAB)->d_un.d_ptr += 4)
MUT(symtab_last_bytes, dyn_entry(im, DT_SYMTAB)->d_un.d_ptr += IMG_SIZE - SYM_OFF - 16)
MUT(rela_outside, dyn_entry(im, DT_RELA)->d_un.d_ptr -= 1ULL << 40)
MUT(rela_misaligned, dyn_entry(im, DT_RELA)->d_un.d_ptr += 1)
MUT(relasz_huge, dyn_entry(im, DT_RELASZ)->d_un.d_val = UINT64_MAX / 24 * 24)
MUT(relasz_past_end, dyn_entry(im, DT_RELASZ)->d_un.d_val = IMG_SIZE)
MUT(relasz_partial, dyn_entry(im, DT_RELASZ)->d_un.d_val = 25)
MUT(relaent_wrong, dyn_entry(im, DT_RELAENT)->d_un.d_val = 16)
MUT(syment_wrong, dyn_entry(im, DT_SYMENT)->d_un.d_val = 16)
MUT(pltrel_rel, dyn_entry(im, DT_PLTREL)->d_un.d_val = DT_REL)
MUT(pltrelsz_missing, dyn_entry(im, DT_PLTRELSZ)->d_tag = DT_DEBUG)
MUT(jmprel_past_end, dyn_entry(im, DT_JMPREL)->d_un.d_ptr += IMG_SIZE - JMPREL_OFF - 8)
MUT(strtab_repeated, dyn_entry(im, DT_RELAENT)->d_tag = DT_STRTAB)
MUT(symtab_missing, dyn_entry(im, DT_SYMTAB)->d_tag = DT_DEBUG)
MUT(gnu_hash_outside, dyn_entry(im, DT_GNU_HASH)->d_un.d_ptr += IMG_SIZE)
MUT(gnu_hash_buckets_huge, ((uint32_t *)(im->mem + HASH_OFF))[0] = 1u << 30)
MUT(gnu_hash_bloom_huge, ((uint32_t *)(im->mem + HASH_OFF))[2] = 1u << 30)
MUT(gnu_hash_no_buckets, ((uint32_t *)(im->mem + HASH_OFF))[0] = 0)
MUT(gnu_hash_shift_32, ((uint32_t *)(im->mem + HASH_OFF))[3] = 32)
MUT(versym_outside, dyn_entry(im, DT_VERSYM)->d_un.d_ptr -= 1ULL << 40)
MUT(dynamic_outside, im->ph[2].p_vaddr = IMG_SIZE)
MUT(dynamic_straddles, im->ph[2].p_vaddr = RW_END - 8)
MUT(dynamic_too_small, im->ph[2].p_memsz = 8)
MUT(dynamic_huge, im->ph[2].p_memsz = UINT64_MAX)
MUT(load_wraps, im->ph[1].p_vaddr = UINT64_MAX - 16)
MUT(no_dynamic, im->ph[2].p_type = PT_NOTE)

static const struct mutation mutations[] = {
    {"DT_STRTAB outside", strtab_outside, -EINVAL},
    {"DT_STRSZ huge", strsz_huge, -EINVAL},
    {"DT_STRSZ one past the end", strsz_past_end, -EINVAL},
    {"DT_STRSZ zero", strsz_zero, -EINVAL},
    {"DT_SYMTAB outside", symtab_outside, -EINVAL},
    {"DT_SYMTAB misaligned", symtab_misaligned, -EINVAL},
    {"DT_SYMTAB in the last 16 bytes", symtab_last_bytes, -EINVAL},
    {"DT_RELA outside", rela_outside, -EINVAL},
    {"DT_RELA misaligned", rela_misaligned, -EINVAL},
    {"DT_RELASZ huge", relasz_huge, -EINVAL},
    {"DT_RELASZ past the end", relasz_past_end, -EINVAL},
    {"DT_RELASZ not whole entries", relasz_partial, -EINVAL},
    {"DT_RELAENT wrong", relaent_wrong, -EINVAL},
    {"DT_SYMENT wrong", syment_wrong, -EINVAL},
    {"DT_PLTREL is DT_REL", pltrel_rel, -EINVAL},
    {"DT_JMPREL without DT_PLTRELSZ", pltrelsz_missing, -EINVAL},
    {"DT_JMPREL past the end", jmprel_past_end, -EINVAL},
    {"DT_STRTAB twice", strtab_repeated, -EINVAL},
    {"relocations without DT_SYMTAB", symtab_missing, -EINVAL},
    {"DT_GNU_HASH outside", gnu_hash_outside, -EINVAL},
    {"DT_GNU_HASH buckets past the end", gnu_hash_buckets_huge, -EINVAL},
    {"DT_GNU_HASH bloom past the end", gnu_hash_bloom_huge, -EINVAL},
    {"DT_GNU_HASH without buckets", gnu_hash_no_buckets, -EINVAL},
    {"DT_GNU_HASH bloom shift 32", gnu_hash_shift_32, -EINVAL},
    {"DT_VERSYM outside", versym_outside, -EINVAL},
    {"PT_DYNAMIC outside the segments", dynamic_outside, -EINVAL},
    {"PT_DYNAMIC across two segments", dynamic_straddles, -EINVAL},
    {"PT_DYNAMIC smaller than an entry", dynamic_too_small, -EINVAL},
    {"PT_DYNAMIC huge", dynamic_huge, -EINVAL},
    {"PT_LOAD wrapping around", load_wraps, -EINVAL},
    {"no PT_DYNAMIC", no_dynamic, -ENOENT},
};

START_TEST(out_of_range_dynamic_sections_are_refused)
{
	for (int absolute = 0; absolute <= 1; absolute++) {
		for (size_t i = 0; i < sizeof(mutations) / sizeof(mutations[0]); i++) {
			struct image im;
			image_build(&im, absolute);
			mutations[i].apply(&im);
			struct got_image d;
			int rc = image_parse(&im, &d);
			ck_assert_msg(rc == mutations[i].want, "%s (%s): got %d, expected %d",
				      mutations[i].what, absolute ? "absolute" : "relative", rc,
				      mutations[i].want);
			free(im.mem);
		}
	}
}
END_TEST

START_TEST(too_many_segments_are_refused)
{
	struct image im;
	image_build(&im, true);
	Elf64_Phdr many[GOT_IMAGE_MAX_LOADS + 2];
	for (size_t i = 0; i <= GOT_IMAGE_MAX_LOADS; i++)
		many[i] = im.ph[0];
	many[GOT_IMAGE_MAX_LOADS + 1] = im.ph[2];
	struct got_image d;
	ck_assert_int_eq(got_image_parse((uintptr_t)im.mem, many, GOT_IMAGE_MAX_LOADS + 2, &d),
			 -EINVAL);
	ck_assert_int_eq(got_image_parse((uintptr_t)im.mem, NULL, 3, &d), -EINVAL);
	free(im.mem);
}
END_TEST

/* Without DT_NULL, the walk stops at PT_DYNAMIC's end (ASan: nothing read past it). */
START_TEST(dynamic_section_without_terminator_is_read_to_its_end)
{
	struct image im;
	image_build(&im, false);
	im.ph[2].p_memsz = 10 * sizeof(Elf64_Dyn); /* up to DT_PLTREL, no DT_NULL */
	struct got_image d;
	ck_assert_int_eq(image_parse(&im, &d), 0);
	ck_assert_uint_eq(d.ndyn, 10);
	ck_assert_uint_eq(d.njmprel, 1);
	free(im.mem);
}
END_TEST

/* Relocations that name what is not there are counted, not followed. */
START_TEST(bad_relocations_are_counted_not_followed)
{
	struct image im;
	image_build(&im, true);
	size_t nsyms = (IMG_SIZE - SYM_OFF) / sizeof(Elf64_Sym);
	Elf64_Sym *sym = (Elf64_Sym *)(im.mem + SYM_OFF);
	sym[5] = (Elf64_Sym){.st_name = STR_SIZE};     /* name past the strings */
	sym[6] = (Elf64_Sym){.st_name = STR_SIZE - 3}; /* "ail", up to the end */
	sym[7] = (Elf64_Sym){.st_name = STR_SIZE - 4}; /* "tail", whose NUL is missing */
	Elf64_Rela *rela = (Elf64_Rela *)(im.mem + RELA_OFF);
	rela[0] = rela_of(GOT_OFF, (uint32_t)nsyms, R_X86_64_GLOB_DAT); /* symbol past */
	rela[1] = rela_of(GOT_OFF + 8, 5, R_X86_64_GLOB_DAT);		/* name past */
	rela[2] = rela_of(GOT_OFF + 16, 6, R_X86_64_GLOB_DAT);		/* no match */
	rela[3] = rela_of(GOT_OFF + 24, 7, R_X86_64_GLOB_DAT); /* no match, nothing read past */
	Elf64_Rela *jmp = (Elf64_Rela *)(im.mem + JMPREL_OFF);
	jmp[0] = rela_of(SYM_OFF, 1, R_X86_64_JUMP_SLOT); /* slot in a read-only segment */
	struct got_image d;
	ck_assert_int_eq(image_parse(&im, &d), 0);
	struct got_image_slot s[8];
	size_t bad;
	ck_assert_uint_eq(got_image_find_slots(&d, synth_names, 4, s, 8, &bad), 0);
	ck_assert_uint_eq(bad, 3);
	/* A misaligned slot, one past the image, one whose address wraps. */
	static const uint64_t offsets[] = {GOT_OFF + 4, IMG_SIZE, UINT64_MAX - 7};
	for (size_t i = 0; i < 3; i++) {
		jmp[0] = rela_of(offsets[i], 1, R_X86_64_JUMP_SLOT);
		ck_assert_uint_eq(got_image_find_slots(&d, synth_names, 4, s, 8, &bad), 0);
		ck_assert_uint_eq(bad, 3);
	}
	free(im.mem);
}
END_TEST

START_TEST(lookup_finds_defined_functions_only)
{
	for (int absolute = 0; absolute <= 1; absolute++) {
		struct image im;
		image_build(&im, absolute);
		struct got_image d;
		ck_assert_int_eq(image_parse(&im, &d), 0);
		const Elf64_Sym *sym = (const Elf64_Sym *)(im.mem + SYM_OFF);
		ck_assert_ptr_eq(got_image_lookup(&d, "other"), &sym[3]);
		ck_assert_ptr_null(got_image_lookup(&d, "malloc")); /* undefined here */
		ck_assert_ptr_null(got_image_lookup(&d, "calloc")); /* a canonical PLT entry */
		ck_assert_ptr_null(got_image_lookup(&d, "othe"));
		ck_assert_ptr_null(got_image_lookup(&d, "nowhere"));
		/* A hidden (non-default) version is not what a lookup binds to. */
		((uint16_t *)(im.mem + VERSYM_OFF))[3] = 0x8002;
		ck_assert_ptr_null(got_image_lookup(&d, "other"));
		free(im.mem);
	}
}
END_TEST

/* Chains that point past the symbols or never end stop at the bounds (ASan: nothing is
 * read past the buffer). */
START_TEST(lookup_stays_inside_a_bad_hash_table)
{
	struct image im;
	image_build(&im, true);
	struct got_image d;
	ck_assert_int_eq(image_parse(&im, &d), 0);
	uint32_t *h = (uint32_t *)(im.mem + HASH_OFF);
	uint32_t *buckets = h + 4 + 2, *chain = buckets + 1;
	buckets[0] = 1000; /* past the symbols */
	ck_assert_ptr_null(got_image_lookup(&d, "other"));
	buckets[0] = 1;
	for (int i = 0; i < 4; i++)
		chain[i] = 0; /* no end mark: the walk goes on through whatever follows */
	ck_assert_ptr_null(got_image_lookup(&d, "other"));
	free(im.mem);
	/* A table whose buckets end the buffer: its chain would start past the end. */
	image_build(&im, true);
	uint32_t *last = (uint32_t *)(im.mem + IMG_SIZE - 32);
	last[0] = 2;		   /* buckets */
	last[1] = 1;		   /* first hashed symbol */
	last[2] = 1;		   /* bloom words */
	last[3] = BLOOM_SHIFT;	   /* bloom shift */
	memset(last + 4, 0xff, 8); /* a bloom filter that lets every name through */
	last[6] = last[7] = 1;	   /* buckets: symbol 1 */
	dyn_entry(&im, DT_GNU_HASH)->d_un.d_ptr = (uintptr_t)last;
	ck_assert_int_eq(image_parse(&im, &d), 0);
	ck_assert_uint_eq(d.gnu_chain, (uintptr_t)im.mem + IMG_SIZE);
	ck_assert_ptr_null(got_image_lookup(&d, "other"));
	free(im.mem);
}
END_TEST

/* On libc in memory: the lookup agrees with the loader's, the default version of a
 * versioned name included (realpath has an older one), and finds nothing for a name
 * libc does not define. */
START_TEST(lookup_in_libc_agrees_with_dlsym)
{
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(libc);
	struct lm_find f = {.name = "libc.so.6"};
	dl_iterate_phdr(find_by_name, &f);
	ck_assert(f.found);
	struct got_image d;
	ck_assert_int_eq(got_image_parse(f.info.dlpi_addr, f.info.dlpi_phdr, f.info.dlpi_phnum, &d),
			 0);
	static const char *const names[] = {"malloc", "free", "posix_memalign", "realpath"};
	for (size_t i = 0; i < 4; i++) {
		const Elf64_Sym *s = got_image_lookup(&d, names[i]);
		ck_assert_msg(s, "%s not found", names[i]);
		ck_assert_msg((void *)(d.base + s->st_value) == dlsym(libc, names[i]),
			      "%s: %p, dlsym %p", names[i], (void *)(d.base + s->st_value),
			      dlsym(libc, names[i]));
	}
	ck_assert_ptr_null(got_image_lookup(&d, "ddprof_test_no_such_function"));
	dlclose(libc);
}
END_TEST

static Suite *got_image_suite(void)
{
	Suite *s = suite_create("got_image");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, synthetic_image_slots_are_found);
	tcase_add_test(tc, out_of_range_dynamic_sections_are_refused);
	tcase_add_test(tc, too_many_segments_are_refused);
	tcase_add_test(tc, dynamic_section_without_terminator_is_read_to_its_end);
	tcase_add_test(tc, bad_relocations_are_counted_not_followed);
	tcase_add_test(tc, lookup_finds_defined_functions_only);
	tcase_add_test(tc, lookup_stays_inside_a_bad_hash_table);
	tcase_add_test(tc, lookup_in_libc_agrees_with_dlsym);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(got_image_suite());
}
