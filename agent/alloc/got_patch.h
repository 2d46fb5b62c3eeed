/*
 * got_patch.h - points the GOT slots of the loaded modules for a few named functions at
 * replacements, and puts them back.
 *
 * Owns: the list of slots it patched (address, old value) and of the modules it has
 * walked, in memory it maps itself (never malloc: the functions it patches may be
 * malloc's), and the lock that keeps one writer at a time. The allocation profiler
 * names malloc and its family here, so that with allocation profiling off the
 * application's malloc never passes through this library: nothing is exported under
 * those names, the slots are patched only while profiling is on.
 *
 * What is patched: every R_X86_64_JUMP_SLOT (calls through the PLT) and
 * R_X86_64_GLOB_DAT (calls with -fno-plt, addresses taken in code) relocation whose
 * symbol is named in the table, in every module dl_iterate_phdr lists, libc's own
 * included (its internal calls, strdup's or fopen's malloc, go through such slots).
 * A slot is patched only when it holds what the loader would have put there from the
 * global scope: the original (resolved with dlsym), the executable's canonical PLT
 * entry for it, or a lazy JUMP_SLOT's stub in its own module. A slot bound elsewhere (a
 * library bound to an allocator of its own: RTLD_DEEPBIND, a local allocator) is left
 * alone and counted (slots_foreign): the replacement calls the global original, and
 * memory must go back to the allocator that gave it.
 * What is skipped, counted by reason: this library's own module (the profiler's own
 * allocations are not the application's), the vdso (no relocations), the loader
 * (ld.so: its allocations go through its __rtld_malloc pointers, filled in once libc
 * is relocated, not through a GOT slot of these names; they are its bookkeeping made
 * under its own locks, where a hook must not run), modules without a dynamic section.
 * A dynamic section that fails a bounds check is skipped and counted, never read out
 * of bounds.
 *
 * What the allocation profiler's table should name: the C functions (malloc, calloc,
 * realloc, reallocarray, free, posix_memalign, aligned_alloc, memalign, valloc,
 * pvalloc), not C++'s operator new and delete (_Znwm, _Znam, _ZdlPv, _ZdaPv, the
 * nothrow, aligned and sized variants): libstdc++ implements those by calling malloc,
 * aligned_alloc and free through its own GOT, patched like every module's, so each new
 * is seen once, as the allocation it makes. Naming the operators too would see each new
 * twice (the operator's slot in the caller, then malloc's in libstdc++). An allocator
 * or sanitizer that defines the operators itself (tcmalloc, jemalloc's C++ build, ASan)
 * serves them without going through libstdc++'s GOT: those are not seen (known limit).
 * libc calls itself through its slots too: glibc's reallocarray tail-calls realloc
 * through libc's GOT, so one reallocarray reaches both replacements, the second with
 * the same return address. Replacements that record must not count one allocation
 * twice (a per-thread flag set while inside one of them), or the table must leave
 * reallocarray out. The libraries the profiler loads itself (libdw, libcurl, zlib) are
 * patched like the application's: replacements tell the profiler's threads apart
 * (own_thread_is_self, common/own_thread.h).
 *
 * Known limits (as for ddprof's GOT hooks): a program that looks malloc up itself
 * (dlsym) gets the real one; function pointers stored in data (R_X86_64_64, a static
 * table initialized with &malloc) keep the original; a lazy JUMP_SLOT that the loader
 * is resolving at the very moment it is patched may get the loader's value after ours
 * (that module's slot stays unhooked until the next walk over all modules, after a
 * dlclose); a lazy slot not yet called in a module bound to an allocator of its own
 * (RTLD_DEEPBIND) looks like any other and is patched; statically linked code has no
 * slots at all.
 *
 * Context: normal context only (start-up, after a dlopen returns, the profiler's
 * thread); never a signal handler, never a replacement function (hooks may run while
 * the loader holds its locks). One writer at a time: got_patch_apply and
 * got_patch_restore take the module's lock, and never hold it while waiting on the
 * loader's dlopen lock (see got_patch.c), so a call from a library constructor cannot
 * deadlock with one on another thread. Fork: got_patch_atfork_prepare takes the lock
 * (a walk is bounded memory work and a few mprotect calls), so a child never inherits
 * it held, nor the loader's list lock that dl_iterate_phdr holds during a walk.
 */
#ifndef DDPROF_AGENT_GOT_PATCH_H
#define DDPROF_AGENT_GOT_PATCH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Names one table may hold: the wall hooks' blocking calls and some room. */
#define GOT_PATCH_MAX_SYMBOLS 40
/* Tables applied at once, each with records of its own: the allocation hooks', the
 * lock hooks' (agent/lock/lock_hooks.h) and the wall hooks' (agent/wall/wall_hooks.h). */
#define GOT_PATCH_MAX_TABLES 3

/* One function to redirect. The caller owns the table; it must stay valid and
 * unchanged from got_patch_apply until got_patch_restore has returned. */
struct got_patch_entry {
	const char *name;  /* the symbol, "malloc" */
	void *replacement; /* what the slots get: the hook */
	/* Where got_patch_apply stores the function the hook must call: dlsym(RTLD_DEFAULT,
	 * name) (or, when that is a non-PIE program's canonical PLT entry for it, the
	 * definition behind it), set before any slot points at the hook, never changed or
	 * cleared after (a hook running while got_patch_restore puts the slots back still
	 * calls it). Left NULL, and no slot patched, when the name cannot be resolved. */
	void **original;
};

/*
 * Patches the slots of every loaded module for the table's names. Modules walked by an
 * earlier call with the same table are not walked again unless something was unloaded
 * since (then every module is checked, and the records of those gone are dropped):
 * call it again after each dlopen; with nothing loaded or unloaded since the last call
 * it returns at once. A slot that holds the replacement already is left alone.
 * Up to GOT_PATCH_MAX_TABLES tables (told apart by their address) are applied side by
 * side, each with its own records; their names must not overlap (a slot belongs to the
 * first table that patched it: the other sees it bound elsewhere, slots_foreign).
 * Returns 0; -EINVAL (a bad table: n 0 or over GOT_PATCH_MAX_SYMBOLS, a NULL field);
 * -EBUSY (GOT_PATCH_MAX_TABLES other tables are applied, or this one with another n:
 * restore first); -ENOMEM (no memory for the
 * records); -EAGAIN (libraries kept being loaded during the call: a walk that sees a
 * load begin is dropped before it patches anything, and the next call does it).
 */
int got_patch_apply(struct got_patch_entry *table, size_t n);

/* Puts back every recorded slot that still holds its replacement, in the modules that
 * are still loaded, and forgets the tables: the next got_patch_apply starts afresh.
 * Returns the number of slots restored. */
int got_patch_restore(void);

struct got_patch_stats {
	uint64_t walks;		    /* calls that walked the modules */
	uint64_t quick;		    /* calls that found nothing loaded or unloaded since */
	uint64_t busy_retries;	    /* walks given up because a library was being loaded */
	uint64_t modules_patched;   /* modules that had a slot patched by a walk */
	uint64_t modules_unchanged; /* modules walked before: not read again */
	uint64_t slots_patched;
	uint64_t slots_already; /* held the replacement: left alone */
	uint64_t slots_foreign; /* bound to another definition: left alone */
	uint64_t slots_restored;
	uint64_t originals_past_plt; /* dlsym gave the program's canonical PLT entry: the
					definition behind it used instead */
	uint64_t skipped_self;	     /* the module holding this code */
	uint64_t skipped_vdso;	     /* the kernel's vdso */
	uint64_t skipped_loader;     /* ld.so */
	uint64_t skipped_no_dynamic; /* no PT_DYNAMIC */
	/* Failures, each also a skip: */
	uint64_t failed_dynamic;  /* a dynamic section out of bounds or unusual: module */
	uint64_t failed_reloc;	  /* a relocation naming a symbol, name or slot out of bounds */
	uint64_t failed_symbol;	  /* a name dlsym could not resolve (or resolved to the hook) */
	uint64_t failed_plt;	  /* the original is the slot's own PLT entry: left alone */
	uint64_t failed_mprotect; /* a read-only slot that could not be made writable */
	uint64_t failed_full;	  /* no room left in the records: slot left alone */
};

void got_patch_get_stats(struct got_patch_stats *out);

/* A module the profiler loaded for itself (its base, dlpi_addr) whose slots it sets on
 * its own (agent/symbolize/dw_memory.h): from now on no walk patches or restores it
 * (counted as skipped_self). under_lock(arg) runs under the lock the walks hold, so
 * that no walk writes a slot of the module at the same time. 0, or -ENOSPC (a few
 * modules at most; under_lock is not called). got_patch_include undoes it, before the
 * module is unloaded (another could be loaded at its base). */
int got_patch_exclude(uintptr_t base, void (*under_lock)(void *), void *arg);
void got_patch_include(uintptr_t base);

/* Start-up, before the fork handlers are registered: where the lock lives (zeroed
 * memory a fork child finds zeroed again, the fork-local page; NULL keeps the static
 * one). */
void got_patch_place(pthread_mutex_t *mem);
/* Fork handlers: prepare takes the lock, the parent releases it, the child starts it
 * afresh (the child keeps the patched slots and their records). */
void got_patch_atfork_prepare(void);
void got_patch_atfork_parent(void);
void got_patch_atfork_child(void);

#endif
