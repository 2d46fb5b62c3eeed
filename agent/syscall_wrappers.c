/*
 * syscall_wrappers.c - libc's plain system-call wrappers in memory (see
 * syscall_wrappers.h).
 *
 * This file is async-signal-safe in syscall_wrappers_after_call: reads of the ranges
 * recorded at start-up and of two bytes of libc's code. syscall_wrappers_init runs in
 * the constructor: reads of libc's dynamic section, hash table and symbols as the loader
 * left them, each checked to lie inside libc's mapped segments.
 */
#include "syscall_wrappers.h"

#include <elf.h>
#include <string.h>

/* Their bodies make the call and return its result: no lock, no state after the call.
 * Aliases are listed under each name the application may call. */
static const char *const names[] = {
    "read",	  "write",	  "pread",	 "pread64",	"pwrite",     "pwrite64",
    "readv",	  "writev",	  "preadv",	 "preadv64",	"pwritev",    "pwritev64",
    "recv",	  "recvfrom",	  "recvmsg",	 "send",	"sendto",     "sendmsg",
    "poll",	  "ppoll",	  "select",	 "pselect",	"epoll_wait", "epoll_pwait",
    "accept",	  "accept4",	  "connect",	 "close",	"fsync",      "fdatasync",
    "lseek",	  "lseek64",	  "ioctl",	 "sendfile",	"sendfile64", "splice",
    "copy_file_range", "getrandom", "munmap",	 "madvise",	"mprotect",
};
#define MAX_WRAPPERS (sizeof(names) / sizeof(names[0]))

struct range {
	uintptr_t lo, hi;
};
static struct range wrappers[MAX_WRAPPERS];
static size_t n_wrappers;

/* addr..addr+len lies inside one of the module's loaded segments. */
static bool mapped(const struct dl_phdr_info *info, uintptr_t addr, size_t len)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && addr >= lo && len <= ph->p_memsz &&
		    addr - lo <= ph->p_memsz - len)
			return true;
	}
	return false;
}

/* A pointer of the dynamic section: a runtime address (glibc relocates them in place on
 * x86-64), or a link-time one. 0 when neither lies in the module. */
static uintptr_t runtime(const struct dl_phdr_info *info, uintptr_t v, size_t len)
{
	if (mapped(info, v, len))
		return v;
	if (mapped(info, v + info->dlpi_addr, len))
		return v + info->dlpi_addr;
	return 0;
}

static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		h = h * 33 + *p;
	return h;
}

struct dynsym {
	const struct dl_phdr_info *info;
	const uint32_t *buckets, *chain;
	uint32_t nbuckets, symoffset;
	const ElfW(Sym) *symtab;
	const char *strtab;
	size_t strsz;
};

/* The defined function symbol name, or NULL. Every table read is bounds-checked. */
static const ElfW(Sym) *lookup(const struct dynsym *d, const char *name)
{
	uint32_t h = gnu_hash(name);
	uint32_t i = d->buckets[h % d->nbuckets];
	if (i < d->symoffset)
		return NULL;
	for (;; i++) {
		const uint32_t *c = &d->chain[i - d->symoffset];
		const ElfW(Sym) *sym = &d->symtab[i];
		if (!mapped(d->info, (uintptr_t)c, sizeof(*c)) ||
		    !mapped(d->info, (uintptr_t)sym, sizeof(*sym)))
			return NULL;
		if ((*c | 1) == (h | 1) && sym->st_name < d->strsz &&
		    strncmp(d->strtab + sym->st_name, name, d->strsz - sym->st_name) == 0 &&
		    ELF64_ST_TYPE(sym->st_info) == STT_FUNC && sym->st_shndx != SHN_UNDEF &&
		    sym->st_size > 0)
			return sym;
		if (*c & 1)
			return NULL;
	}
}

int syscall_wrappers_init(const struct dl_phdr_info *info)
{
	n_wrappers = 0;
	const ElfW(Dyn) *dyn = NULL;
	size_t ndyn = 0;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
			ndyn = info->dlpi_phdr[i].p_memsz / sizeof(*dyn);
		}
	uintptr_t hash = 0, symtab = 0, strtab = 0, strsz = 0;
	for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; i++) {
		if (dyn[i].d_tag == DT_GNU_HASH)
			hash = dyn[i].d_un.d_ptr;
		else if (dyn[i].d_tag == DT_SYMTAB)
			symtab = dyn[i].d_un.d_ptr;
		else if (dyn[i].d_tag == DT_STRTAB)
			strtab = dyn[i].d_un.d_ptr;
		else if (dyn[i].d_tag == DT_STRSZ)
			strsz = dyn[i].d_un.d_val;
	}
	struct dynsym d = {.info = info, .strsz = strsz};
	const uint32_t *ht = (const uint32_t *)runtime(info, hash, 4 * sizeof(uint32_t));
	d.symtab = (const ElfW(Sym) *)runtime(info, symtab, sizeof(ElfW(Sym)));
	d.strtab = (const char *)runtime(info, strtab, strsz ? strsz : 1);
	if (!ht || !d.symtab || !d.strtab || !strsz || ht[0] == 0)
		return 0;
	d.nbuckets = ht[0];
	d.symoffset = ht[1];
	uint32_t bloom_words = ht[2];
	const ElfW(Addr) *bloom = (const ElfW(Addr) *)(ht + 4);
	d.buckets = (const uint32_t *)(bloom + bloom_words);
	d.chain = d.buckets + d.nbuckets;
	if (!mapped(info, (uintptr_t)d.buckets, (size_t)d.nbuckets * sizeof(uint32_t)))
		return 0;
	for (size_t k = 0; k < MAX_WRAPPERS; k++) {
		const ElfW(Sym) *sym = lookup(&d, names[k]);
		if (!sym)
			continue;
		uintptr_t lo = info->dlpi_addr + sym->st_value;
		if (mapped(info, lo, sym->st_size))
			wrappers[n_wrappers++] = (struct range){lo, lo + sym->st_size};
	}
	return (int)n_wrappers;
}

/* async-signal-safe */
bool syscall_wrappers_after_call(uintptr_t pc)
{
	for (size_t i = 0; i < n_wrappers; i++)
		if (pc >= wrappers[i].lo + 2 && pc <= wrappers[i].hi) {
			const volatile uint8_t *op = (const uint8_t *)pc - 2;
			return op[0] == 0x0f && op[1] == 0x05;
		}
	return false;
}
