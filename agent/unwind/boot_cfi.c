/*
 * boot_cfi.c - unwind rules of the start-up modules, from their .eh_frame_hdr (see
 * boot_cfi.h).
 *
 * This file is async-signal-safe in boot_cfi_find and what it calls
 * (agent/unwind/cfi_lookup.c): plain reads of an array written before any handler
 * could run.
 * boot_cfi_init runs in normal context (the constructor).
 */
#include "agent/unwind/boot_cfi.h"

#include <link.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "agent/unwind/cfi_lookup.h"
#include "agent/sample/fork_local.h"

/* Modules and executable segments kept: /bin/true has 5 modules, python3 ~8 at
 * start-up; past the room, the rest are left out (their pcs get no row, and a walk
 * through them is not complete). */
#define BOOT_MODULES_MAX 64
#define BOOT_SEGMENTS_MAX 64

struct boot_segment {
	uintptr_t lo, hi; /* runtime [lo, hi) of one executable PT_LOAD */
	struct cfi_lookup_module cfi;
};

static struct boot_segment segs[BOOT_SEGMENTS_MAX];
/* Published with a release store once segs is written (boot_cfi_init). */
static _Atomic uint32_t nsegs;
static uint32_t nmodules, nleft_out;
/* Read by every fork child of a process without tables (uploader_atfork_child): on the
 * page it touches anyway (common/fork_child.h). */
FORK_CHILD_DATA static bool roots_covered;

/* One module as dl_iterate_phdr reports it. */
struct mod {
	const char *name;
	uintptr_t bias;
	const ElfW(Phdr) * phdr;
	size_t phnum;
	bool startup; /* in the DT_NEEDED closure (or the executable, the vdso, us) */
	bool expanded;
};

struct scan {
	struct mod m[BOOT_MODULES_MAX];
	size_t n;
	bool overflow;
};

static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct scan *sc = arg;
	if (sc->n == BOOT_MODULES_MAX) {
		sc->overflow = true;
		return 0;
	}
	sc->m[sc->n++] = (struct mod){info->dlpi_name ? info->dlpi_name : "",
				      info->dlpi_addr,
				      info->dlpi_phdr,
				      info->dlpi_phnum,
				      false,
				      false};
	return 0;
}

static bool holds(const struct mod *m, uintptr_t addr)
{
	for (size_t i = 0; i < m->phnum; i++) {
		const ElfW(Phdr) *ph = &m->phdr[i];
		uintptr_t lo = m->bias + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && addr >= lo && addr - lo < ph->p_memsz)
			return true;
	}
	return false;
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

/* Marks the modules m names in DT_NEEDED as start-up modules. The dynamic section as
 * the loader left it: glibc turns DT_STRTAB into a runtime address in place on x86-64;
 * a link-time one is taken as such. Every string must lie in a mapped PT_LOAD of m. */
static void mark_needed(struct scan *sc, const struct mod *m)
{
	const ElfW(Dyn) *dyn = NULL;
	size_t ndyn = 0;
	for (size_t i = 0; i < m->phnum; i++) {
		if (m->phdr[i].p_type == PT_DYNAMIC) {
			dyn = (const ElfW(Dyn) *)(m->bias + m->phdr[i].p_vaddr);
			ndyn = m->phdr[i].p_memsz / sizeof(*dyn);
		}
	}
	uintptr_t strtab = 0, strsz = 0;
	for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; i++) {
		if (dyn[i].d_tag == DT_STRTAB)
			strtab = dyn[i].d_un.d_ptr;
		else if (dyn[i].d_tag == DT_STRSZ)
			strsz = dyn[i].d_un.d_val;
	}
	if (strtab && !holds(m, strtab))
		strtab += m->bias;
	if (!strtab || !strsz || !holds(m, strtab) || !holds(m, strtab + strsz - 1))
		return;
	for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; i++) {
		if (dyn[i].d_tag != DT_NEEDED || dyn[i].d_un.d_val >= strsz)
			continue;
		const char *need = (const char *)strtab + dyn[i].d_un.d_val;
		size_t room = strsz - dyn[i].d_un.d_val;
		if (strnlen(need, room) == room)
			continue; /* not terminated inside the table */
		for (size_t k = 0; k < sc->n; k++)
			if (!sc->m[k].startup &&
			    strcmp(base_name(sc->m[k].name), base_name(need)) == 0)
				sc->m[k].startup = true;
	}
}

/* Whether m carries Go's build id note (name "Go", type 4): its code has no CFI in
 * memory, and its roots are marked by its table only (cfi_roots.h). The notes as
 * mapped, padded to their segment's alignment: every byte read lies in a PT_NOTE
 * segment that a PT_LOAD of m maps. */
static bool is_go_module(const struct mod *m)
{
	for (size_t i = 0; i < m->phnum; i++) {
		const ElfW(Phdr) *ph = &m->phdr[i];
		uintptr_t p = m->bias + ph->p_vaddr, end = p + ph->p_memsz;
		uintptr_t pad = ph->p_align == 8 ? 7 : 3;
		if (ph->p_type != PT_NOTE || ph->p_memsz == 0 || !holds(m, p) || !holds(m, end - 1))
			continue;
		while (end - p >= sizeof(ElfW(Nhdr))) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			uintptr_t name = p + sizeof(*nh);
			uintptr_t desc = name + ((nh->n_namesz + pad) & ~pad);
			uintptr_t next = desc + ((nh->n_descsz + pad) & ~pad);
			if (next > end || next <= p)
				break;
			if (nh->n_type == 4 && (nh->n_namesz == 3 || nh->n_namesz == 4) &&
			    memcmp((const void *)name, "Go", 3) == 0)
				return true;
			p = next;
		}
	}
	return false;
}

int boot_cfi_init(void)
{
	static struct scan sc; /* 3 KiB: not on the constructor's stack */
	memset(&sc, 0, sizeof(sc));
	nmodules = nleft_out = 0;
	atomic_store_explicit(&nsegs, 0, memory_order_relaxed);
	dl_iterate_phdr(collect, &sc);
	/* The roots of the closure: the executable (listed first), the vdso (its program
	 * headers follow the ELF header the auxv gives), us (-z nodelete). */
	uintptr_t vdso = getauxval(AT_SYSINFO_EHDR);
	for (size_t i = 0; i < sc.n; i++) {
		struct mod *m = &sc.m[i];
		m->startup = i == 0 || (vdso && (uintptr_t)m->phdr - vdso < 4096) ||
			     holds(m, (uintptr_t)&boot_cfi_init);
	}
	for (bool grew = true; grew;) {
		grew = false;
		for (size_t i = 0; i < sc.n; i++) {
			if (sc.m[i].startup && !sc.m[i].expanded) {
				sc.m[i].expanded = true;
				mark_needed(&sc, &sc.m[i]);
				grew = true;
			}
		}
	}
	uintptr_t libc_pc = (uintptr_t)&getpid; /* any function of libc's, as resolved */
	bool exe_ok = false, libc_ok = false;
	uint32_t n = 0;
	for (size_t i = 0; i < sc.n; i++) {
		const struct mod *m = &sc.m[i];
		struct cfi_lookup_module cfi;
		if (cfi_lookup_module_from_phdrs(m->bias, m->phdr, m->phnum, &cfi) != 0)
			continue;
		if (!m->startup) {
			nleft_out++;
			continue;
		}
		bool added = false;
		for (size_t k = 0; k < m->phnum && n < BOOT_SEGMENTS_MAX; k++) {
			const ElfW(Phdr) *ph = &m->phdr[k];
			if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || ph->p_memsz == 0)
				continue;
			uintptr_t lo = m->bias + ph->p_vaddr;
			segs[n++] = (struct boot_segment){lo, lo + ph->p_memsz, cfi};
			added = true;
			libc_ok |= libc_pc >= lo && libc_pc - lo < ph->p_memsz;
		}
		if (added) {
			nmodules++;
			exe_ok |= i == 0;
		} else {
			nleft_out++;
		}
	}
	nleft_out += sc.overflow;
	/* A Go program's walks end at its roots only once its table marks them: its table
	 * is wanted at once (modules_service.c). */
	roots_covered = exe_ok && libc_ok && !(sc.n > 0 && is_go_module(&sc.m[0]));
	/* Release pairs with the acquire in boot_cfi_find: the entries are written before
	 * a handler can count them. */
	atomic_store_explicit(&nsegs, n, memory_order_release);
	return (int)nmodules;
}

FORK_CHILD_PATH bool boot_cfi_covers_roots(void)
{
	return roots_covered;
}

/* async-signal-safe */
bool boot_cfi_find(uintptr_t pc, struct cfi_row *out)
{
	/* Acquire pairs with boot_cfi_init's release. */
	uint32_t n = atomic_load_explicit(&nsegs, memory_order_acquire);
	for (uint32_t i = 0; i < n; i++)
		if (pc >= segs[i].lo && pc < segs[i].hi)
			return cfi_lookup_pc(&segs[i].cfi, pc, out) == 0 && out->kind != CFI_NONE;
	return false;
}

bool boot_cfi_holds(uintptr_t addr)
{
	/* Acquire pairs with boot_cfi_init's release. */
	uint32_t n = atomic_load_explicit(&nsegs, memory_order_acquire);
	for (uint32_t i = 0; i < n; i++)
		if (addr >= segs[i].lo && addr < segs[i].hi)
			return true;
	return false;
}

void boot_cfi_get_counts(uint32_t *modules, uint32_t *left_out)
{
	*modules = nmodules;
	*left_out = nleft_out;
}
