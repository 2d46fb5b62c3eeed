/*
 * modules.h - the registry of loaded modules and their unwind tables.
 *
 * Owns: the list of loaded ELF modules (from dl_iterate_phdr: the executable, shared
 * libraries, ld.so, the vdso), one CFI table per module built off the application's
 * path, and the immutable map the signal handler searches (executable segments sorted
 * by address, each with its table). The work runs in modules_service, on the
 * uploader thread (modules_set_host): one profiler thread, because every thread of
 * the process costs every fork (its stack mappings and its malloc arena); a thread of
 * our own ("ddprof-modules") only when there is no host.
 *  - Publication: a new map is built privately and published with one release store;
 *    handlers load it with acquire inside grace_enter/grace_exit. The old map and the
 *    tables of unloaded modules are freed only after grace_wait says no handler can
 *    still hold them (leaked and counted if a handler never leaves).
 *  - Updates: at start, after every dlopen/dlclose (modules_notify, from the preload
 *    layer), and every few seconds (libraries libc loads itself, e.g. NSS modules).
 *    Tables are built one module at a time, the map republished after each, the
 *    executable first, so early samples get DWARF unwinding as soon as possible.
 *  - Unloaded modules are kept in a list for the symbolizer (modules_take_retired):
 *    pcs sampled in a library that was dlclosed before the upload can still be named.
 * Context: module_map_enter/exit/find are async-signal-safe; everything else is normal
 * context. Fork: the child keeps the parent's published map and tables (inherited
 * memory, immutable) and rescans only after its first dlopen/dlclose
 * (modules_atfork_child): most fork children never load anything.
 */
#ifndef DDPROF_AGENT_MODULES_H
#define DDPROF_AGENT_MODULES_H

#include "common/own_thread.h"
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/unwind/cfi_table.h"

struct module;

/* One executable segment of a module, as the handler sees it. */
struct module_entry {
	uintptr_t start, end;	       /* runtime addresses, end exclusive */
	uintptr_t bias;		       /* runtime address = link-time vaddr + bias */
	const struct cfi_table *table; /* NULL: not built yet, or the module has no CFI */
	struct module *mod;	       /* writer-side record (not for the handler) */
};

struct module_map {
	size_t n;
	struct module_entry e[]; /* sorted by start, non-overlapping */
};

/* The handler's side of the map (module_map_enter, module_map_find, module_map_exit)
 * is declared in agent/unwind/module_map.h. */

/* libc's pthread_create (common/own_thread.h). */
typedef own_thread_create_fn modules_thread_create_fn;

/* The stack every profiler thread is created with (reserved, it touches tens of KiB):
 * not the application's default, which it may have made small
 * (pthread_setattr_default_np), while libelf, libdw and the TLS library run on ours. */
#define PROFILER_THREAD_STACK_BYTES (8u << 20)

/* Publishes an empty map. Normal context, before any handler can run. */
void modules_init(void);

/* The service's host (common/bg_host.h): its thread calls modules_service when kicked
 * by id and when the time it returned comes. A kick that finds the host neither
 * running nor to start (it may start late, at the process's first need: uploader.h)
 * makes modules_start fall back to a thread of our own; a dlopen or dlclose kicks with
 * start, which starts a host thread not started yet. Set before modules_start. Normal
 * context. */
struct bg_host;
void modules_set_host(struct bg_host *h, unsigned id);
/* Runs the module work that is due (a scan after a notify, the load polls, the
 * periodic rescan) on the calling thread, the host's. Returns when work is next due
 * (CLOCK_MONOTONIC ns), UINT64_MAX when none is. Normal context, no lock held. */
uint64_t modules_service(uint64_t now_ns);

/* Starts the work: on the host's thread when modules_set_host gave one that runs,
 * else on a thread of its own (create: the real pthread_create). The first scan comes
 * 1 ms after, or 1 s when the start-up modules' CFI covers the walks (modules_service.c,
 * START_DELAY_NS), or at the first dlopen or dlclose. 0 or -errno. */
int modules_start(modules_thread_create_fn create);

/* The host's thread could not be started (it starts late: uploader.h): the work moves
 * to a thread of our own, if it was hosted. Normal context. */
void modules_host_failed(modules_thread_create_fn create);

/* Stops the thread (bounded wait). Tables stay published: handlers may still run. */
void modules_stop(void);

/* A fork child's work is deferred (modules_atfork_child) to its first dlopen or
 * dlclose; this starts it now, as the child's uploader thread does when it finds no
 * table (its parent had built none). Returns whether the work runs. Normal context. */
bool modules_start_deferred(void);

/* Starts the host thread if it was not running, asking the service for nothing: the
 * host's other services (the GOT hooks of a module a dlopen caller's own rescan just
 * registered) need it. Normal context, an application thread. */
void modules_start_host(void);

/* A dlclose returned: rescan now. Cheap; any thread, normal context. */
void modules_notify(void);

/* A dlopen is about to run (the module appears later): rescan now and keep rescanning
 * every few milliseconds for a short while until something new shows up. */
void modules_notify_load(void);

/* The application's dlopen returned a module (preload/preload.c says when its own call
 * is the one that waits): rescans on the calling thread and builds the tables of the
 * modules loaded after start-up that have none, so that the caller's first call into
 * the library is unwound by its table. The modules loaded at start-up are left to the
 * service (boot CFI covers them). One step of dl_iterate_phdr when the loader mapped
 * nothing since the last scan (the library was loaded already). Normal context, an
 * application thread; takes the registry's lock (it waits while the service builds). */
void modules_load_sync(void);

/* Rescans now and builds every missing table, synchronously (the thread's body; tests).
 * Returns the number of modules or a negative errno. */
int modules_refresh(void);

/* Waits until the thread has built the tables of every module loaded right now, at
 * most timeout_ns. 0 or -ETIMEDOUT. For tests and benchmarks. */
int modules_wait_ready(uint64_t timeout_ns);

struct modules_stats {
	uint64_t modules;     /* loaded now */
	uint64_t tables;      /* of them, with a table */
	uint64_t table_bytes; /* memory of all live tables */
	uint64_t rows;
	uint64_t rows_unsupported; /* of them, rules the unwinder cannot evaluate */
	uint64_t build_ns;	   /* total time spent building tables */
	uint64_t build_failures;   /* modules whose CFI could not be read */
	uint64_t fdes_skipped;
	uint64_t publications; /* maps published */
	uint64_t leaked;       /* maps/tables not freed because a handler never left */
};
void modules_get_stats(struct modules_stats *out);
/* Whether any module has its unwind table (modules_stats.tables != 0), reading one word
 * on the page a fork child touches anyway (common/fork_child.h). */
bool modules_have_tables(void);

/* Whether the registry owes work a scan would do: modules it found have no table built
 * yet, or the loader reports loads and unloads its last scan did not see (a fork child
 * asks what its parent left undone). Normal context; reads the loader's counters (one
 * dl_iterate_phdr step). */
bool modules_registry_behind(void);

/* A module's executable segment that was unloaded, for the symbolizer. */
struct retired_segment {
	char path[256];
	uintptr_t start, end, file_offset;
};

/* Moves up to max unloaded segments into out; returns how many. */
size_t modules_take_retired(struct retired_segment *out, size_t max);

/* Normal context, the thread that names a profile: retires now the modules a dlclose
 * unloaded since the last rescan (one the service has not run for yet: a library
 * closed just before the process exits), so that modules_take_retired has them. Scans
 * the loaded modules, builds no table. Cheap when no dlclose is pending. */
void modules_retire_unloaded(void);

/* Fork handlers. Prepare waits at most for one dl_iterate_phdr walk (no I/O). */
void modules_atfork_prepare(void);
void modules_atfork_parent(void);
void modules_atfork_child(modules_thread_create_fn create);

#endif
