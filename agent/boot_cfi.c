/*
 * boot_cfi.c - unwind rules of the start-up modules, from their .eh_frame_hdr (see
 * boot_cfi.h).
 *
 * This file is async-signal-safe in boot_cfi_find and what it calls (C11 atomics, the
 * grace counters and agent/cfi_lookup.c). boot_cfi_init, boot_cfi_disable and the
 * stats run in normal context; boot_cfi_atfork_child in the fork child handler.
 */
#include "boot_cfi.h"

#include <link.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "agent/cfi_lookup.h"
#include "agent/fork_local.h"
#include "agent/grace.h"

/* Executable segments: a module usually has one; the list holds 64 (/bin/true has 4
 * modules, python3 with its start-up libraries ~12). Past that, the rest are left out:
 * their pcs get no row, and a walk through them is not complete. */
#define BOOT_SEGMENTS_MAX 64
/* A handler stopped inside (a debugger) must not hold up dlclose for ever. */
#define DISABLE_WAIT_NS (100ULL * 1000000ULL)

struct boot_segment {
	uintptr_t lo, hi; /* runtime [lo, hi) of one executable PT_LOAD */
	struct cfi_lookup_module cfi;
};

static struct boot_segment segs[BOOT_SEGMENTS_MAX];
static uint32_t nsegs, nmodules;
static bool roots_covered;
/* Written by a fork child's handler (the grace reset): on the page it writes anyway. */
FORK_CHILD_DATA static _Atomic bool enabled;
FORK_CHILD_DATA static struct grace readers;
/* boot_cfi_disable's progress: one thread waits for the readers (grace.h: one writer at
 * a time), the others for it. No mutex: a fork child would have to re-initialize it,
 * one more page written by every child. */
enum { LIVE, DISABLING, DISABLED };
FORK_CHILD_DATA static _Atomic int disable_state;
static _Atomic uint64_t st_lookups, st_rows;

struct scan {
	uintptr_t libc_pc;
	bool first, exe_ok, libc_ok;
};

static int add_module(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct scan *sc = arg;
	bool exe = sc->first;
	sc->first = false;
	struct cfi_lookup_module m;
	if (cfi_lookup_module_from_phdrs(info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum,
					 &m) != 0)
		return 0;
	bool added = false;
	for (size_t i = 0; i < info->dlpi_phnum && nsegs < BOOT_SEGMENTS_MAX; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || ph->p_memsz == 0)
			continue;
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		segs[nsegs++] = (struct boot_segment){lo, lo + ph->p_memsz, m};
		added = true;
		if (sc->libc_pc >= lo && sc->libc_pc < lo + ph->p_memsz)
			sc->libc_ok = true;
	}
	if (added) {
		nmodules++;
		if (exe)
			sc->exe_ok = true;
	}
	return 0;
}

int boot_cfi_init(void)
{
	nsegs = nmodules = 0;
	/* getpid: any function of libc's, as this process resolves it. */
	struct scan sc = {.libc_pc = (uintptr_t)&getpid, .first = true};
	dl_iterate_phdr(add_module, &sc);
	roots_covered = sc.exe_ok && sc.libc_ok;
	atomic_store_explicit(&disable_state, LIVE, memory_order_relaxed);
	/* Release: the list is written before a handler can see it enabled (pairs with
	 * the acquire in boot_cfi_find). */
	atomic_store_explicit(&enabled, nsegs > 0, memory_order_release);
	return (int)nmodules;
}

FORK_CHILD_PATH bool boot_cfi_covers_roots(void)
{
	return roots_covered && atomic_load_explicit(&enabled, memory_order_relaxed);
}

/* async-signal-safe */
bool boot_cfi_find(uintptr_t pc, struct cfi_row *out)
{
	/* Relaxed: the cheap common answer once disabled; decided again inside. */
	if (!atomic_load_explicit(&enabled, memory_order_relaxed))
		return false;
	unsigned slot = grace_enter(&readers);
	bool found = false;
	/* Acquire pairs with boot_cfi_init's release (the list) and, through the grace
	 * epoch, with boot_cfi_disable: a reader that entered after its wait began sees
	 * false here. */
	if (atomic_load_explicit(&enabled, memory_order_acquire)) {
		for (uint32_t i = 0; i < nsegs; i++) {
			if (pc < segs[i].lo || pc >= segs[i].hi)
				continue;
			atomic_fetch_add_explicit(&st_lookups, 1, memory_order_relaxed);
			found = cfi_lookup_pc(&segs[i].cfi, pc, out) == 0 && out->kind != CFI_NONE;
			if (found)
				atomic_fetch_add_explicit(&st_rows, 1, memory_order_relaxed);
			break;
		}
	}
	grace_exit(&readers, slot);
	return found;
}

void boot_cfi_disable(void)
{
	if (!atomic_load_explicit(&enabled, memory_order_relaxed))
		return;
	int expect = LIVE;
	/* Acquire (either way) pairs with the release below: a thread that returns has
	 * seen the wait end. */
	if (atomic_compare_exchange_strong_explicit(&disable_state, &expect, DISABLING,
						    memory_order_acquire, memory_order_acquire)) {
		/* seq_cst: ordered before grace_wait's epoch increment, which readers
		 * entering later see (grace.h). */
		atomic_store_explicit(&enabled, false, memory_order_seq_cst);
		/* A reader still inside past the bound is a thread stopped in its handler;
		 * the unload cannot wait for it. */
		grace_wait(&readers, DISABLE_WAIT_NS);
		/* Release pairs with the acquires of the threads waiting below. */
		atomic_store_explicit(&disable_state, DISABLED, memory_order_release);
		return;
	}
	/* Another thread's dlclose is waiting for the readers: at most DISABLE_WAIT_NS. */
	struct timespec nap = {0, 100000};
	while (atomic_load_explicit(&disable_state, memory_order_acquire) == DISABLING)
		nanosleep(&nap, NULL);
}

FORK_CHILD_PATH void boot_cfi_atfork_child(void)
{
	grace_reset(&readers);
	/* A disable in progress in another thread of the parent: done here, where no
	 * other thread reads. */
	if (atomic_load_explicit(&disable_state, memory_order_relaxed) == DISABLING) {
		atomic_store_explicit(&enabled, false, memory_order_relaxed);
		atomic_store_explicit(&disable_state, DISABLED, memory_order_relaxed);
	}
}

void boot_cfi_get_stats(struct boot_cfi_stats *out)
{
	out->modules = nmodules;
	out->lookups = atomic_load_explicit(&st_lookups, memory_order_relaxed);
	out->rows = atomic_load_explicit(&st_rows, memory_order_relaxed);
	out->disabled = !atomic_load_explicit(&enabled, memory_order_relaxed);
}
