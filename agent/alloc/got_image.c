/*
 * got_image.c - a loaded module's GOT slots, found from its dynamic section in memory
 * (see got_image.h).
 *
 * Bounds: a module's PT_LOAD segments are the only memory read; each table is placed
 * inside one readable segment (its whole size, aligned), each relocation's symbol index
 * inside the segment holding the symbol table, each name inside the string table (its
 * NUL included), each slot inside a writable segment. The symbol table's size is not in
 * the dynamic section (only the hash tables would give it): the end of its segment is
 * the bound, enough for every read to stay in mapped memory.
 * Context: normal context; nothing here allocates.
 */
#include "agent/alloc/got_image.h"
#include "common/page_size.h"

#include <errno.h>
#include <string.h>

static uintptr_t page_down(uintptr_t a)
{
	return a & ~(uintptr_t)(page_size() - 1);
}

/* Whether [addr, addr + len) lies inside one PT_LOAD segment with every flag of need;
 * *end (optional) gets that segment's end. */
static bool in_load(const struct got_image *im, uintptr_t addr, uint64_t len, uint32_t need,
		    uintptr_t *end)
{
	if (len > UINTPTR_MAX - addr)
		return false;
	for (size_t i = 0; i < im->nloads; i++) {
		const struct got_image_load *l = &im->loads[i];
		if ((l->flags & need) == need && addr >= l->start && addr + len <= l->end) {
			if (end)
				*end = l->end;
			return true;
		}
	}
	return false;
}

bool got_image_contains(const struct got_image *im, uintptr_t addr, uint64_t len, uint32_t flags)
{
	return in_load(im, addr, len, flags, NULL);
}

bool got_image_in_relro(const struct got_image *im, uintptr_t addr)
{
	return addr >= im->relro_start && addr < im->relro_end;
}

/* base + v, false on overflow. */
static bool add_base(uintptr_t base, uint64_t v, uintptr_t *out)
{
	if (v > UINTPTR_MAX - base)
		return false;
	*out = base + (uintptr_t)v;
	return true;
}

int got_image_read_phdrs(uintptr_t base, const Elf64_Phdr *ph, size_t phnum, struct got_image *im)
{
	memset(im, 0, sizeof(*im));
	im->base = base;
	if (!ph)
		return -EINVAL;
	const Elf64_Phdr *dyn = NULL, *relro = NULL;
	for (size_t i = 0; i < phnum; i++) {
		if (ph[i].p_type == PT_DYNAMIC && !dyn) {
			dyn = &ph[i];
		} else if (ph[i].p_type == PT_GNU_RELRO) {
			relro = &ph[i];
		} else if (ph[i].p_type == PT_LOAD && ph[i].p_memsz != 0) {
			struct got_image_load *l = &im->loads[im->nloads];
			if (im->nloads == GOT_IMAGE_MAX_LOADS ||
			    !add_base(base, ph[i].p_vaddr, &l->start) ||
			    !add_base(l->start, ph[i].p_memsz, &l->end))
				return -EINVAL;
			l->flags = ph[i].p_flags;
			im->nloads++;
		}
	}
	if (!dyn)
		return -ENOENT;
	uintptr_t start;
	if (!add_base(base, dyn->p_vaddr, &start) || start % _Alignof(Elf64_Dyn) != 0 ||
	    dyn->p_memsz < sizeof(Elf64_Dyn) || !in_load(im, start, dyn->p_memsz, PF_R, NULL))
		return -EINVAL;
	im->dynamic = start;
	im->ndyn = dyn->p_memsz / sizeof(Elf64_Dyn);
	im->dyn_writable = in_load(im, start, dyn->p_memsz, PF_R | PF_W, NULL);
	if (relro) {
		uintptr_t rs, re;
		if (!add_base(base, relro->p_vaddr, &rs) || !add_base(rs, relro->p_memsz, &re))
			return -EINVAL;
		/* As glibc's _dl_protect_relro: a partial last page stays writable. */
		im->relro_start = page_down(rs);
		im->relro_end = page_down(re) > im->relro_start ? page_down(re) : im->relro_start;
	}
	return 0;
}

/*
 * Where a d_ptr value points: [at, at + len) inside a readable segment, aligned. glibc
 * adds base to the d_ptr values of a writable dynamic section when it loads the module
 * (get-dynamic-info.h) and leaves a read-only one alone (the vdso); other loaders add
 * nothing. The reading glibc's rule predicts is tried first, then the other. Both can
 * land inside the segments only when base is smaller than the module's extent: at
 * base 0 (a non-PIE executable) they are the same value, and a module mapped at a
 * nonzero base lies far above its own size.
 */
static bool place(const struct got_image *im, uint64_t v, uint64_t len, size_t align, uintptr_t *at,
		  uintptr_t *seg_end)
{
	uintptr_t cand[2];
	int n = 0;
	uintptr_t rel;
	bool rel_ok = add_base(im->base, v, &rel);
	if (im->dyn_writable) {
		cand[n++] = (uintptr_t)v;
		if (rel_ok)
			cand[n++] = rel;
	} else {
		if (rel_ok)
			cand[n++] = rel;
		cand[n++] = (uintptr_t)v;
	}
	for (int i = 0; i < n; i++) {
		if (cand[i] % align == 0 && in_load(im, cand[i], len, PF_R, seg_end)) {
			*at = cand[i];
			return true;
		}
	}
	return false;
}

/* Which tags were present (bits), and their values. */
struct dyn_tags {
	uint32_t seen;
	uint64_t strtab, strsz, symtab, syment, rela, relasz, relaent, jmprel, pltrelsz, pltrel;
	uint64_t gnu_hash, versym;
};

enum {
	T_STRTAB,
	T_STRSZ,
	T_SYMTAB,
	T_SYMENT,
	T_RELA,
	T_RELASZ,
	T_RELAENT,
	T_JMPREL,
	T_PLTRELSZ,
	T_PLTREL,
	T_GNU_HASH,
	T_VERSYM
};

#define HAS(t, bit) (((t)->seen >> (bit)) & 1)

static void note_tag(struct dyn_tags *t, const Elf64_Dyn *e)
{
	static const struct {
		int64_t tag;
		int bit;
		size_t off;
	} known[] = {
	    {DT_STRTAB, T_STRTAB, offsetof(struct dyn_tags, strtab)},
	    {DT_STRSZ, T_STRSZ, offsetof(struct dyn_tags, strsz)},
	    {DT_SYMTAB, T_SYMTAB, offsetof(struct dyn_tags, symtab)},
	    {DT_SYMENT, T_SYMENT, offsetof(struct dyn_tags, syment)},
	    {DT_RELA, T_RELA, offsetof(struct dyn_tags, rela)},
	    {DT_RELASZ, T_RELASZ, offsetof(struct dyn_tags, relasz)},
	    {DT_RELAENT, T_RELAENT, offsetof(struct dyn_tags, relaent)},
	    {DT_JMPREL, T_JMPREL, offsetof(struct dyn_tags, jmprel)},
	    {DT_PLTRELSZ, T_PLTRELSZ, offsetof(struct dyn_tags, pltrelsz)},
	    {DT_PLTREL, T_PLTREL, offsetof(struct dyn_tags, pltrel)},
	    {DT_GNU_HASH, T_GNU_HASH, offsetof(struct dyn_tags, gnu_hash)},
	    {DT_VERSYM, T_VERSYM, offsetof(struct dyn_tags, versym)},
	};
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		/* A repeated tag is refused (got_image_read_dynamic): which one a loader keeps is
		 * not ours to guess. */
		if (e->d_tag == known[i].tag) {
			if (HAS(t, known[i].bit))
				t->seen |= 1u << 31; /* repeated */
			t->seen |= 1u << known[i].bit;
			memcpy((char *)t + known[i].off, &e->d_un.d_val, sizeof(uint64_t));
			return;
		}
	}
}

/* A relocation table: [v, v + size) of Elf64_Rela. */
static bool place_relocs(const struct got_image *im, uint64_t v, uint64_t size,
			 const Elf64_Rela **out, size_t *n)
{
	uintptr_t at;
	if (size % sizeof(Elf64_Rela) != 0 || !place(im, v, size, _Alignof(Elf64_Rela), &at, NULL))
		return false;
	*out = (const Elf64_Rela *)at;
	*n = size / sizeof(Elf64_Rela);
	return true;
}

/* DT_GNU_HASH's fixed part: header (bucket count, first hashed symbol, bloom words,
 * bloom shift), bloom filter, buckets. The chain after them has one entry per hashed
 * symbol, a count the table does not give: each entry is checked when read. */
static int read_gnu_hash(struct got_image *im, uint64_t v)
{
	uintptr_t at;
	if (!place(im, v, 4 * sizeof(uint32_t), _Alignof(uint64_t), &at, NULL))
		return -EINVAL;
	const uint32_t *h = (const uint32_t *)at;
	uint64_t bytes = 4 * sizeof(uint32_t) + (uint64_t)h[2] * sizeof(uint64_t) +
			 (uint64_t)h[0] * sizeof(uint32_t);
	/* A shift of 32 or more would shift a 32-bit hash out of range. */
	if (h[0] == 0 || h[2] == 0 || h[3] >= 32 || !in_load(im, at, bytes, PF_R, NULL))
		return -EINVAL;
	im->gnu_nbuckets = h[0];
	im->gnu_symoffset = h[1];
	im->gnu_bloom_size = h[2];
	im->gnu_bloom_shift = h[3];
	im->gnu_bloom = (const uint64_t *)(h + 4);
	im->gnu_buckets = (const uint32_t *)(im->gnu_bloom + h[2]);
	im->gnu_chain = (uintptr_t)(im->gnu_buckets + h[0]);
	return 0;
}

int got_image_read_dynamic(struct got_image *im)
{
	const Elf64_Dyn *dyn = (const Elf64_Dyn *)im->dynamic;
	struct dyn_tags t = {0};
	for (size_t i = 0; i < im->ndyn && dyn[i].d_tag != DT_NULL; i++)
		note_tag(&t, &dyn[i]);
	if (t.seen >> 31)
		return -EINVAL;
	if (HAS(&t, T_SYMENT) && t.syment != sizeof(Elf64_Sym))
		return -EINVAL;
	if (HAS(&t, T_RELAENT) && t.relaent != sizeof(Elf64_Rela))
		return -EINVAL;
	if (HAS(&t, T_RELA) != HAS(&t, T_RELASZ) || HAS(&t, T_STRTAB) != HAS(&t, T_STRSZ))
		return -EINVAL;
	if (HAS(&t, T_JMPREL) != HAS(&t, T_PLTRELSZ))
		return -EINVAL;
	/* x86-64 uses RELA for its PLT; DT_PLTREL names which (absent: RELA). */
	if (HAS(&t, T_JMPREL) && HAS(&t, T_PLTREL) && t.pltrel != DT_RELA)
		return -EINVAL;
	if (HAS(&t, T_STRTAB)) {
		uintptr_t at;
		if (t.strsz == 0 || !place(im, t.strtab, t.strsz, 1, &at, NULL))
			return -EINVAL;
		im->strtab = (const char *)at;
		im->strsz = t.strsz;
	}
	if (HAS(&t, T_SYMTAB)) {
		/* No count in the dynamic section: relocations index the table, and the
		 * index is checked against the end of the segment holding it. */
		uintptr_t at, end;
		if (!place(im, t.symtab, sizeof(Elf64_Sym), _Alignof(Elf64_Sym), &at, &end))
			return -EINVAL;
		im->symtab = (const Elf64_Sym *)at;
		im->nsyms = (end - at) / sizeof(Elf64_Sym);
	}
	if (HAS(&t, T_RELA) && t.relasz != 0 &&
	    !place_relocs(im, t.rela, t.relasz, &im->rela, &im->nrela))
		return -EINVAL;
	if (HAS(&t, T_JMPREL) && t.pltrelsz != 0 &&
	    !place_relocs(im, t.jmprel, t.pltrelsz, &im->jmprel, &im->njmprel))
		return -EINVAL;
	if ((im->nrela || im->njmprel) && (!im->symtab || !im->strtab))
		return -EINVAL;
	if (HAS(&t, T_GNU_HASH) && read_gnu_hash(im, t.gnu_hash) != 0)
		return -EINVAL;
	if (HAS(&t, T_VERSYM)) {
		uintptr_t at;
		if (!place(im, t.versym, sizeof(uint16_t), _Alignof(uint16_t), &at, NULL))
			return -EINVAL;
		im->versym = at;
	}
	return 0;
}

int got_image_parse(uintptr_t base, const Elf64_Phdr *phdr, size_t phnum, struct got_image *out)
{
	int rc = got_image_read_phdrs(base, phdr, phnum, out);
	if (rc == 0)
		rc = got_image_read_dynamic(out);
	return rc;
}

/* ---------------------------------------------------------------- looking up */

/* Whether symbol i's name is name (len bytes and its NUL inside the string table). */
static bool name_is(const struct got_image *im, const Elf64_Sym *s, const char *name, size_t len)
{
	return s->st_name < im->strsz && len < im->strsz - s->st_name &&
	       im->strtab[s->st_name + len] == 0 && memcmp(im->strtab + s->st_name, name, len) == 0;
}

/* A function defined here, in its default version (a hidden version, 0x8000 in
 * DT_VERSYM, is an older one kept for old binaries: not what a lookup binds to). */
static bool defined_function(const struct got_image *im, const Elf64_Sym *s, size_t i)
{
	if (s->st_shndx == SHN_UNDEF || s->st_value == 0 || ELF64_ST_TYPE(s->st_info) != STT_FUNC)
		return false;
	if (!im->versym)
		return true;
	uintptr_t at = im->versym + i * sizeof(uint16_t);
	return in_load(im, at, sizeof(uint16_t), PF_R, NULL) &&
	       (*(const uint16_t *)at & 0x8000) == 0;
}

const Elf64_Sym *got_image_lookup(const struct got_image *im, const char *name)
{
	if (!im->gnu_buckets || !im->symtab || !im->strtab)
		return NULL;
	uint32_t h = 5381; /* the GNU hash: h * 33 + c */
	size_t len = 0;
	for (; name[len]; len++)
		h = h * 33 + (unsigned char)name[len];
	/* The bloom filter: two bits per name, in a 64-bit word. */
	uint64_t word = im->gnu_bloom[(h / 64) % im->gnu_bloom_size];
	uint64_t bits = (1ULL << (h % 64)) | (1ULL << ((h >> im->gnu_bloom_shift) % 64));
	if ((word & bits) != bits)
		return NULL;
	/* The bucket's chain: consecutive symbols, hashes with the low bit replaced by
	 * "last of the chain". */
	for (uint64_t i = im->gnu_buckets[h % im->gnu_nbuckets];
	     i >= im->gnu_symoffset && i < im->nsyms; i++) {
		uintptr_t at;
		if (!add_base(im->gnu_chain, (i - im->gnu_symoffset) * sizeof(uint32_t), &at) ||
		    !in_load(im, at, sizeof(uint32_t), PF_R, NULL))
			return NULL;
		uint32_t chain = *(const uint32_t *)at;
		const Elf64_Sym *s = &im->symtab[i];
		if ((chain | 1) == (h | 1) && name_is(im, s, name, len) &&
		    defined_function(im, s, i))
			return s;
		if (chain & 1)
			break;
	}
	return NULL;
}

/* ---------------------------------------------------------------- finding slots */

struct finder {
	const struct got_image *im;
	const char *const *names;
	size_t lens[GOT_IMAGE_MAX_NAMES];
	size_t nnames;
	uint64_t first_chars[4]; /* bit c: a name searched starts with byte c */
	struct got_image_slot *out;
	size_t max, found, bad;
};

/* The index of name[0..avail) in the list (it must end inside avail), or -1. */
static int match(const struct finder *f, const char *name, size_t avail)
{
	/* Most relocations name nothing searched (a library's own imports: isl_*, mpz_*):
	 * one bit tells, before a comparison with each name. */
	uint8_t c = (uint8_t)name[0];
	if (!(f->first_chars[c >> 6] & (1ULL << (c & 63))))
		return -1;
	for (size_t i = 0; i < f->nnames; i++) {
		size_t len = f->lens[i];
		if (len < avail && name[0] == f->names[i][0] && name[len] == 0 &&
		    memcmp(name, f->names[i], len) == 0)
			return (int)i;
	}
	return -1;
}

static void scan(struct finder *f, const Elf64_Rela *r, size_t n)
{
	const struct got_image *im = f->im;
	for (size_t i = 0; i < n; i++) {
		uint32_t type = ELF64_R_TYPE(r[i].r_info);
		uint64_t sym = ELF64_R_SYM(r[i].r_info);
		if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || sym == STN_UNDEF)
			continue;
		if (sym >= im->nsyms || im->symtab[sym].st_name >= im->strsz) {
			f->bad++;
			continue;
		}
		const Elf64_Sym *s = &im->symtab[sym];
		int e = match(f, im->strtab + s->st_name, im->strsz - s->st_name);
		if (e < 0)
			continue;
		uintptr_t addr;
		if (!add_base(im->base, r[i].r_offset, &addr) || addr % sizeof(uintptr_t) != 0 ||
		    !in_load(im, addr, sizeof(uintptr_t), PF_R | PF_W, NULL)) {
			f->bad++;
			continue;
		}
		uintptr_t plt = 0;
		if (s->st_shndx == SHN_UNDEF && s->st_value != 0 &&
		    !add_base(im->base, s->st_value, &plt)) {
			f->bad++;
			continue;
		}
		if (f->found < f->max)
			f->out[f->found] =
			    (struct got_image_slot){.addr = addr,
						    .plt = plt,
						    .entry = (uint32_t)e,
						    .jump_slot = type == R_X86_64_JUMP_SLOT};
		f->found++;
	}
}

size_t got_image_find_slots(const struct got_image *im, const char *const *names, size_t nnames,
			    struct got_image_slot *out, size_t max, size_t *bad)
{
	struct finder f = {.im = im, .names = names, .out = out, .max = max};
	f.nnames = nnames < GOT_IMAGE_MAX_NAMES ? nnames : GOT_IMAGE_MAX_NAMES;
	for (size_t i = 0; i < f.nnames; i++) {
		f.lens[i] = names[i] && names[i][0] ? strlen(names[i]) : SIZE_MAX;
		if (f.lens[i] != SIZE_MAX) {
			uint8_t c = (uint8_t)names[i][0];
			f.first_chars[c >> 6] |= 1ULL << (c & 63);
		}
	}
	if (im->symtab && im->strtab) {
		scan(&f, im->rela, im->nrela);
		scan(&f, im->jmprel, im->njmprel);
	}
	*bad = f.bad;
	return f.found;
}
