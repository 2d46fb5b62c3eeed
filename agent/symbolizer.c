/*
 * symbolizer.c - executable mappings and ELF symbol tables (see symbolizer.h).
 *
 * Context: uploader thread only. Uses libelf (elfutils): small, already a dependency
 * of the DWARF work, and robust against malformed files. A module whose ELF cannot be
 * read is cached as "no symbols" so it is tried once, not every upload.
 *
 * Address translation: a mapping at `start` shows file offset `offset`; the PT_LOAD
 * segment holding that offset maps file offset p_offset to vaddr p_vaddr, so
 *     vaddr(pc) = pc - start + offset - p_offset + p_vaddr.
 */
#include "symbolizer.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

#define MAX_LOADS 16 /* PT_LOAD segments kept per module; real modules have 2-5 */
#define BUILD_ID_MAX 64 /* bytes of build id kept (GNU build ids are 20) */
#define NT_GNU_BUILD_ID_TYPE 3

struct elf_sym {
	uint64_t addr;
	uint64_t size;
	uint32_t name; /* offset into module names */
	uint8_t global; /* preferred over a local alias at the same address */
};

struct load_seg {
	uint64_t offset, vaddr, filesz;
};

struct module {
	char *path;
	unsigned long inode;
	char build_id[2 * BUILD_ID_MAX + 1];
	struct load_seg loads[MAX_LOADS];
	size_t nloads;
	struct elf_sym *syms;
	size_t nsyms;
	char *names;
	size_t names_len;
	bool loaded;
};

struct mapping_entry {
	struct sym_mapping pub;
	struct module *mod; /* NULL for anonymous ([vdso], JIT) */
	int64_t vaddr_delta; /* vaddr = pc + vaddr_delta */
	bool delta_known;
};

struct symbolizer {
	struct module **mods;
	size_t nmods, capmods;
	struct mapping_entry *maps;
	size_t nmaps, capmaps;
	size_t bytes;
};

struct symbolizer *symbolizer_new(void)
{
	elf_version(EV_CURRENT);
	return calloc(1, sizeof(struct symbolizer));
}

static void module_free(struct module *m)
{
	free(m->path);
	free(m->syms);
	free(m->names);
	free(m);
}

void symbolizer_free(struct symbolizer *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nmods; i++)
		module_free(s->mods[i]);
	free(s->mods);
	free(s->maps);
	free(s);
}

static int sym_cmp(const void *a, const void *b)
{
	const struct elf_sym *x = a, *y = b;
	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->global != y->global)
		return x->global ? -1 : 1;
	return (x->size > y->size) ? -1 : (x->size < y->size);
}

static void read_build_id(struct module *m, Elf *e)
{
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(e, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		if (!d)
			continue;
		size_t off = 0, name_off, desc_off;
		GElf_Nhdr nh;
		while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
			if (nh.n_type != NT_GNU_BUILD_ID_TYPE || nh.n_namesz != 4 ||
			    memcmp((char *)d->d_buf + name_off, "GNU", 4) != 0)
				continue;
			size_t n = nh.n_descsz < BUILD_ID_MAX ? nh.n_descsz : BUILD_ID_MAX;
			const uint8_t *id = (const uint8_t *)d->d_buf + desc_off;
			for (size_t i = 0; i < n; i++)
				snprintf(m->build_id + 2 * i, 3, "%02x", id[i]);
			return;
		}
	}
}

/* Appends the function symbols of one symbol table section. */
static int read_symtab(struct module *m, Elf *e, Elf_Scn *scn, GElf_Shdr *sh, size_t *cap,
		       size_t *names_cap)
{
	Elf_Data *d = elf_getdata(scn, NULL);
	if (!d || sh->sh_entsize == 0)
		return 0;
	size_t count = sh->sh_size / sh->sh_entsize;
	for (size_t i = 0; i < count; i++) {
		GElf_Sym sym;
		if (!gelf_getsym(d, (int)i, &sym))
			break;
		int type = GELF_ST_TYPE(sym.st_info);
		if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_value == 0 ||
		    sym.st_shndx == SHN_UNDEF)
			continue;
		const char *name = elf_strptr(e, sh->sh_link, sym.st_name);
		if (!name || !*name)
			continue;
		size_t len = strlen(name) + 1;
		if (m->nsyms == *cap) {
			size_t nc = *cap ? *cap * 2 : 256;
			struct elf_sym *ns = realloc(m->syms, nc * sizeof(*ns));
			if (!ns)
				return -ENOMEM;
			m->syms = ns;
			*cap = nc;
		}
		if (m->names_len + len > *names_cap) {
			size_t nc = *names_cap ? *names_cap * 2 : 4096;
			while (nc < m->names_len + len)
				nc *= 2;
			char *nn = realloc(m->names, nc);
			if (!nn)
				return -ENOMEM;
			m->names = nn;
			*names_cap = nc;
		}
		memcpy(m->names + m->names_len, name, len);
		m->syms[m->nsyms++] = (struct elf_sym){
			.addr = sym.st_value,
			.size = sym.st_size,
			.name = (uint32_t)m->names_len,
			.global = GELF_ST_BIND(sym.st_info) != STB_LOCAL,
		};
		m->names_len += len;
	}
	return 0;
}

/* Reads segments, build id and symbols. Failure leaves the module without symbols. */
static void module_load(struct module *m)
{
	m->loaded = true;
	int fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e || elf_kind(e) != ELF_K_ELF) {
		log_debug("%s: not an ELF file: %s", m->path, elf_errmsg(-1));
		goto out;
	}
	size_t nph = 0;
	if (elf_getphdrnum(e, &nph) == 0) {
		for (size_t i = 0; i < nph && m->nloads < MAX_LOADS; i++) {
			GElf_Phdr ph;
			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD)
				m->loads[m->nloads++] = (struct load_seg){ ph.p_offset, ph.p_vaddr,
									   ph.p_filesz };
		}
	}
	read_build_id(m, e);
	size_t cap = 0, names_cap = 0;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(e, scn)) != NULL) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM)
			if (read_symtab(m, e, scn, &sh, &cap, &names_cap) < 0)
				break;
	}
	qsort(m->syms, m->nsyms, sizeof(m->syms[0]), sym_cmp);
	/* Keep one symbol per address (the first after sorting: global, biggest). */
	size_t w = 0;
	for (size_t i = 0; i < m->nsyms; i++)
		if (w == 0 || m->syms[w - 1].addr != m->syms[i].addr)
			m->syms[w++] = m->syms[i];
	m->nsyms = w;
out:
	if (e)
		elf_end(e);
	close(fd);
}

static struct module *module_get(struct symbolizer *s, const char *path, unsigned long inode)
{
	for (size_t i = 0; i < s->nmods; i++)
		if (s->mods[i]->inode == inode && strcmp(s->mods[i]->path, path) == 0)
			return s->mods[i];
	if (s->nmods == s->capmods) {
		size_t nc = s->capmods ? s->capmods * 2 : 32;
		struct module **nm = realloc(s->mods, nc * sizeof(*nm));
		if (!nm)
			return NULL;
		s->mods = nm;
		s->capmods = nc;
	}
	struct module *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->path = strdup(path);
	m->inode = inode;
	if (!m->path) {
		free(m);
		return NULL;
	}
	module_load(m);
	s->bytes += sizeof(*m) + m->nsyms * sizeof(m->syms[0]) + m->names_len;
	s->mods[s->nmods++] = m;
	return m;
}

static void mapping_translate(struct mapping_entry *me)
{
	struct module *m = me->mod;
	if (!m)
		return;
	for (size_t i = 0; i < m->nloads; i++) {
		const struct load_seg *l = &m->loads[i];
		/* The mapping's offset is page-aligned, the segment's need not be. */
		uint64_t seg_page = l->offset & ~(uint64_t)0xfff;
		if (me->pub.offset >= seg_page && me->pub.offset < l->offset + l->filesz) {
			me->vaddr_delta = (int64_t)me->pub.offset - (int64_t)me->pub.start -
					  (int64_t)l->offset + (int64_t)l->vaddr;
			me->delta_known = true;
			return;
		}
	}
}

int symbolizer_refresh(struct symbolizer *s)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -errno;
	s->nmaps = 0;
	char line[4096 + 128];
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, offset, inode;
		char perms[5];
		int path_at = 0;
		if (sscanf(line, "%lx-%lx %4s %lx %*s %lu %n", &start, &end, perms, &offset,
			   &inode, &path_at) < 5)
			continue;
		if (perms[2] != 'x')
			continue;
		char *path = line + path_at;
		path[strcspn(path, "\n")] = 0;
		if (s->nmaps == s->capmaps) {
			size_t nc = s->capmaps ? s->capmaps * 2 : 64;
			struct mapping_entry *nm = realloc(s->maps, nc * sizeof(*nm));
			if (!nm)
				break;
			s->maps = nm;
			s->capmaps = nc;
		}
		struct mapping_entry *me = &s->maps[s->nmaps];
		memset(me, 0, sizeof(*me));
		me->pub.start = start;
		me->pub.end = end;
		me->pub.offset = offset;
		me->mod = (path[0] == '/') ? module_get(s, path, inode) : NULL;
		if (me->mod) {
			me->pub.path = me->mod->path;
			me->pub.build_id = me->mod->build_id;
			mapping_translate(me);
		} else {
			/* Anonymous executable memory: keep its bracketed name if any. */
			me->pub.path = strcmp(path, "[vdso]") == 0 ? "[vdso]" : "[anon]";
			me->pub.build_id = "";
		}
		s->nmaps++;
	}
	fclose(f);
	return (int)s->nmaps;
}

int symbolizer_find_mapping(const struct symbolizer *s, uintptr_t pc)
{
	size_t lo = 0, hi = s->nmaps;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (pc < s->maps[mid].pub.start)
			hi = mid;
		else if (pc >= s->maps[mid].pub.end)
			lo = mid + 1;
		else
			return (int)mid;
	}
	return -1;
}

const struct sym_mapping *symbolizer_mapping(const struct symbolizer *s, int idx)
{
	return &s->maps[idx].pub;
}

size_t symbolizer_mapping_count(const struct symbolizer *s)
{
	return s->nmaps;
}

const char *symbolizer_function(struct symbolizer *s, uintptr_t pc, bool is_return_address)
{
	int idx = symbolizer_find_mapping(s, pc);
	if (idx < 0)
		return NULL;
	const struct mapping_entry *me = &s->maps[idx];
	const struct module *m = me->mod;
	if (!m || !me->delta_known || m->nsyms == 0)
		return NULL;
	uint64_t vaddr = (uint64_t)((int64_t)pc + me->vaddr_delta) - (is_return_address ? 1 : 0);
	/* Last symbol with addr <= vaddr. */
	size_t lo = 0, hi = m->nsyms;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->syms[mid].addr <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct elf_sym *sym = &m->syms[lo - 1];
	if (sym->size != 0 && vaddr >= sym->addr + sym->size)
		return NULL; /* in a gap between functions (PLT, padding) */
	return m->names + sym->name;
}

size_t symbolizer_module_count(const struct symbolizer *s)
{
	return s->nmods;
}

size_t symbolizer_bytes(const struct symbolizer *s)
{
	return s->bytes;
}
