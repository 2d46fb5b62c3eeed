/*
 * preload.c - the composition root: what LD_PRELOAD=libddprof.so runs.
 *
 * Owns: the constructor (read the configuration, start the agent, then the uploader),
 * the destructor (final profile at normal exit), the interposed pthread_create (the
 * agent arms a timer in every new thread and deletes it at thread exit), dlopen and
 * dlclose, the pthread_atfork handlers (the agent's, the uploader's and the fork
 * guard's steps in their order), and the public API (ddprof.h). The agent is reached
 * through agent/agent.h only, the uploader through uploader/uploader.h.
 * Context: constructor/destructor on the main thread (or whichever thread calls exit);
 * pthread_create in application threads; fork handlers in the forking thread;
 * preload_death in a signal handler (async-signal-safe: it calls the uploader's
 * uploader_final_from_signal only).
 * Start-up cost: no library is loaded here beyond our own dependencies; the uploader
 * thread loads the rest off the application's path.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/dl_guard.h"
#include "common/fork_child.h"
#include "common/identity.h"
#include "common/log.h"
#include "preload/ddprof.h"
#include "uploader/uploader.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

static struct config cfg;
/* Set when the constructor returns, whatever it decided (release: agent_running's value
 * is then final; pairs with the pthread_create wrapper's acquire). */
static _Atomic bool constructor_done;
FORK_CHILD_DATA static thread_create_fn real_pthread_create; /* a fork child reads it */

/* libc's own pthread_create, for the profiler's threads: an application's wrapper (the
 * next definition after ours) may take locks of its own, which the thread that needs
 * ours may hold. Set by the constructor. */
FORK_CHILD_DATA static thread_create_fn own_create; /* a fork child reads it */

static thread_create_fn resolve_libc_pthread_create(void)
{
	/* RTLD_NOLOAD: libc is loaded already; a lookup in its handle searches libc (and
	 * its dependencies), never the objects before it. */
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	thread_create_fn f = libc ? (thread_create_fn)dlsym(libc, "pthread_create") : NULL;
	if (libc)
		dlclose(libc); /* a reference count: libc stays */
	return f;
}

static thread_create_fn resolve_pthread_create(void)
{
	thread_create_fn f = __atomic_load_n(&real_pthread_create, __ATOMIC_ACQUIRE);
	if (!f) {
		/* Before our constructor (another library's constructor made a thread). */
		f = (thread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
		/* Release pairs with the acquire above: any thread may resolve it; all get
		 * the same value. */
		__atomic_store_n(&real_pthread_create, f, __ATOMIC_RELEASE);
	}
	return f;
}

static void thread_end(void *root)
{
	agent_thread_end(root);
}

/* In a section of its own: the serializer leaves it out of stacks (uploader/pprof.c). */
__attribute__((section("ddprof_trampoline"))) static void *thread_trampoline(void *p)
{
	struct thread_start start;
	agent_thread_begin(p, &start); /* its timer, when the agent runs */
	/* However the thread ends (return, pthread_exit, cancellation), thread_end runs.
	 * A cleanup handler, not a pthread key destructor: glibc walks every key slot of
	 * a thread that set one, at its exit, a cost every thread would pay. root:
	 * where the CPU of a thread that ends unsampled goes, its start routine called
	 * from this frame (built with a frame pointer) and this frame's callers. */
	struct sampler_thread_root root = {
	    .start_fn = (uintptr_t)start.fn,
	    /* A label's address (clang-format would read it as a logical and). */
	    /* clang-format off */
	    .caller_pc = (uintptr_t)&&call_start,
	    /* clang-format on */
	    .frame = (uintptr_t)__builtin_frame_address(0),
	};
	void *ret;
	pthread_cleanup_push(thread_end, &root);
call_start:
	ret = start.fn(start.arg);
	pthread_cleanup_pop(1);
	return ret;
}

DDPROF_EXPORT int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
				 void *arg)
{
	thread_create_fn real = resolve_pthread_create();
	if (!real)
		return EAGAIN;
	/* Acquire pairs with the constructor's release. Before our constructor ran (another
	 * library's constructor creates a thread), the thread still goes through the
	 * trampoline: the start-up scan arms its timer, and its end account (the cleanup
	 * handler) adds the CPU after its last expiry. Once the constructor gave up
	 * (disabled, or failed), threads are the application's alone. */
	if (!agent_running()) {
		if (atomic_load_explicit(&constructor_done, memory_order_acquire))
			return real(t, attr, fn, arg);
	} else {
		uploader_ensure_thread(); /* a fork child's deferred uploader thread */
	}
	struct thread_start *s = agent_thread_new(fn, arg, attr);
	if (!s)
		return real(t, attr, fn, arg); /* unsampled rather than failing the app */
	int rc = real(t, attr, thread_trampoline, s);
	if (rc != 0)
		agent_thread_new_failed(s);
	return rc;
}

/* Whether this thread's prepare handler took our locks: the parent and child handlers
 * act only then (a fork racing with the constructor must not unlock what it never
 * locked). */
static __thread bool fork_prepared __attribute__((tls_model("initial-exec")));
/* The same for the fork child, process-wide on the page it touches anyway (the
 * thread's TLS would be one page more); written only when it changes, in practice
 * once. */
FORK_CHILD_DATA static _Atomic bool child_prepared;

/*
 * The fork handlers: the agent's steps (agent/agent.h), the uploader's and the fork
 * guard's (common/dl_guard.h), in this order. Samples during them are harmless (the
 * sampling handler takes no lock), but on kernels that restart a fork a signal
 * interrupts, where the agent blocks the sampling signal first and unblocks it last
 * (agent/agent.c says why).
 */
static void atfork_prepare(void)
{
	/* The thread's TLS is written only when a value changes: the previous fork left
	 * the page write-protected (copy-on-write), so a store would fault, and with the
	 * process's other threads running on other CPUs, shoot down their TLBs. */
	bool running = agent_running();
	if (fork_prepared != running)
		fork_prepared = running;
	if (atomic_load_explicit(&child_prepared, memory_order_relaxed) != running)
		atomic_store_explicit(&child_prepared, running, memory_order_relaxed);
	if (!running)
		return;
	agent_atfork_prepare_first(); /* the sampling signal, on old kernels */
	dl_guard_atfork_prepare();    /* first lock: no other lock is held while it waits */
	uploader_atfork_prepare();
	agent_atfork_prepare(); /* the thread registry's, then the modules' */
}

static void atfork_parent(void)
{
	if (!fork_prepared)
		return;
	agent_atfork_parent(); /* the modules', then the thread registry's */
	uploader_atfork_parent();
	dl_guard_atfork_parent();
	agent_atfork_parent_last();
}

FORK_CHILD_PATH static void atfork_child(void)
{
	/* Not this thread's fork_prepared: its TLS page is one more page touched. */
	if (!atomic_load_explicit(&child_prepared, memory_order_relaxed))
		return;
	dl_guard_atfork_child(); /* first: what follows may start a thread */
	/* A fresh profile, the parent's threads and thread records forgotten, the module
	 * registry the child's. */
	agent_atfork_child(own_create);
	uploader_atfork_child();
	/* Last: the signal mask, the application's signal table, and the child's timer:
	 * from here on samples may land (agent/agent.c). */
	agent_atfork_child_last();
}

/*
 * dlopen/dlclose: a new or unloaded module changes the unwind tables.
 *
 * dlopen is caller-sensitive: glibc uses its return address to pick the caller's link
 * namespace and, for a name without a slash or with a dynamic string token ($ORIGIN),
 * the caller's RUNPATH and origin. A C wrapper would make libddprof the caller, so
 * dlopen is a small assembly stub that asks preload_dlopen_enter where to go and jumps
 * there with the application's return address still on the stack:
 *  - to preload_dlopen_in_caller, when glibc would make the same choices with
 *    libddprof as the caller: a path with a slash and no '$', from a caller in the
 *    base namespace (libddprof's). It calls the real dlopen and then builds the new
 *    modules' unwind tables in the caller's own call (agent_module_loaded), before
 *    the caller can reach the library's code: a Python import, a plugin's load. Only
 *    the library's constructors run before their tables exist.
 *  - to the real dlopen otherwise; the module registry then rescans every few
 *    milliseconds until the new module shows up (agent_module_loading).
 * dlclose is not caller-sensitive: a plain wrapper notifies after it returns.
 */
typedef void *(*dlopen_fn)(const char *file, int mode);
typedef int (*dlclose_fn)(void *handle);
static dlopen_fn real_dlopen;
static dlclose_fn real_dlclose;
/* dlopen calls of this thread inside preload_dlopen_in_caller (a constructor that
 * loads a library): only the outermost builds tables, once the whole load is done. */
static __thread unsigned dlopen_depth __attribute__((tls_model("initial-exec")));

/* glibc 2.35's _dl_find_object, looked up at the first dlopen (the library asks for no
 * symbol version past 2.34): without it, every dlopen takes the real one directly. */
typedef int (*find_object_fn)(void *pc, struct dl_find_object *out);
static find_object_fn find_object;
static _Atomic int find_object_state; /* 0 not looked up, 1 found, 2 absent */
/* Set at start-up: LD_AUDIT modules are told who loads what (la_objsearch gets the
 * caller's cookie): they see the application's calls as they are. */
static bool audited;

/* Whether the caller at return address caller lies in the base link namespace (where
 * glibc puts a caller it finds in no module, JIT code). */
static bool caller_in_base_namespace(const void *caller)
{
	/* Acquire pairs with the release below: find_object is written. */
	int state = atomic_load_explicit(&find_object_state, memory_order_acquire);
	if (state == 0) {
		find_object = (find_object_fn)dlsym(RTLD_DEFAULT, "_dl_find_object");
		state = find_object ? 1 : 2;
		/* Release pairs with the acquire above; every thread finds the same. */
		atomic_store_explicit(&find_object_state, state, memory_order_release);
	}
	struct dl_find_object dlfo;
	if (state != 1)
		return false;
	if (find_object((void *)caller, &dlfo) != 0)
		return true;
	Lmid_t ns;
	return dlinfo(dlfo.dlfo_link_map, RTLD_DI_LMID, &ns) == 0 && ns == LM_ID_BASE;
}

static void *preload_dlopen_in_caller(const char *file, int mode)
{
	dlopen_depth++;
	void *h = real_dlopen(file, mode);
	dlopen_depth--;
	if (h && dlopen_depth == 0) {
		int saved_errno = errno;
		agent_module_loaded();
		errno = saved_errno;
	}
	return h;
}

/* Called by the stub with dlopen's arguments and its return address; returns the
 * function the stub jumps to (NULL: dlopen fails). */
void *preload_dlopen_enter(const char *file, int mode, const void *caller);
__attribute__((used)) void *preload_dlopen_enter(const char *file, int mode, const void *caller)
{
	(void)mode;
	dlopen_fn f = __atomic_load_n(&real_dlopen, __ATOMIC_ACQUIRE);
	if (!f) {
		f = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
		/* Release pairs with the acquire above; every thread resolves the same. */
		__atomic_store_n(&real_dlopen, f, __ATOMIC_RELEASE);
	}
	if (f && file && !audited && strchr(file, '/') && !strchr(file, '$') &&
	    agent_module_load_in_caller() && caller_in_base_namespace(caller))
		return (void *)preload_dlopen_in_caller;
	agent_module_loading(); /* not for the profiler's own loads: agent.c says why */
	return (void *)f;
}

/* x86-64: rdi/rsi (file, mode) kept across the call, the return address (at rsp + 24
 * after the two pushes and the pad) passed as the third argument; 16-byte alignment
 * at the call (entry rsp is 8 mod 16: two pushes and 8 more make it 0). If dlsym
 * failed, NULL is returned to the caller as dlopen's failure. */
__asm__(".text\n"
	".globl dlopen\n"
	".type dlopen, @function\n"
	"dlopen:\n"
	".cfi_startproc\n"
	"push %rdi\n"
	".cfi_adjust_cfa_offset 8\n"
	"push %rsi\n"
	".cfi_adjust_cfa_offset 8\n"
	"sub $8, %rsp\n"
	".cfi_adjust_cfa_offset 8\n"
	"mov 24(%rsp), %rdx\n"
	"call preload_dlopen_enter\n"
	"add $8, %rsp\n"
	".cfi_adjust_cfa_offset -8\n"
	"pop %rsi\n"
	".cfi_adjust_cfa_offset -8\n"
	"pop %rdi\n"
	".cfi_adjust_cfa_offset -8\n"
	"test %rax, %rax\n"
	"jz 1f\n"
	"jmp *%rax\n"
	"1: ret\n"
	".cfi_endproc\n"
	".size dlopen, .-dlopen\n");

DDPROF_EXPORT int dlclose(void *handle)
{
	dlclose_fn f = __atomic_load_n(&real_dlclose, __ATOMIC_ACQUIRE);
	if (!f) {
		f = (dlclose_fn)dlsym(RTLD_NEXT, "dlclose");
		/* Release pairs with the acquire above. */
		__atomic_store_n(&real_dlclose, f, __ATOMIC_RELEASE);
		if (!f)
			return -1;
	}
	int rc = f(handle);
	if (rc == 0)
		agent_module_unloaded();
	return rc;
}

/* async-signal-safe: in the thread a deadly signal was delivered to (agent.h). */
static void preload_death(int sig)
{
	(void)sig;
	uploader_final_from_signal();
}

__attribute__((constructor)) static void ddprof_init(void)
{
	int saved_errno = errno;
	config_load(&cfg, NULL); /* NULL: the process environment */
	identity_note_start();
	if (!cfg.enabled)
		goto out;
	audited = getenv("LD_AUDIT") != NULL;
	own_create = resolve_libc_pthread_create();
	if (!resolve_pthread_create() || !own_create) {
		log_error("cannot find pthread_create; profiling disabled");
		goto out;
	}
	/* The profiles, unwinding, the sampling signal and thread tracking (agent.h); it
	 * logs why it cannot start. */
	int signo = agent_init(&cfg);
	if (signo < 0)
		goto out;
	/* The locks the fork handlers take, on the agent's fork-local page. */
	uploader_place_lock();
	dl_guard_place(agent_fork_local_alloc(sizeof(pthread_mutex_t)));
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	/* The agent runs: this thread's timer, the existing threads', new threads'. */
	agent_start();
	/* On request, a process killed by SIGTERM, SIGINT or SIGHUP (their default action)
	 * sends its final profile before it dies of the signal. Not in a PID namespace's
	 * init: the kernel ignores those signals there at their default action, which a
	 * handler would change. */
	if (cfg.flush_on_signal && getpid() != 1)
		agent_watch_deaths(preload_death);
	/* The uploader thread starts at the process's first need (uploader.h). */
	uploader_start(&cfg, agent_profiles(), own_create);
	int rc = agent_start_modules(cfg.unwind_cache_dir, own_create);
	if (rc < 0)
		log_warn("cannot start the module thread (%s); unwinding with frame pointers "
			 "only",
			 strerror(-rc));
	log_debug("sampling at %u Hz with signal %d, upload every %.3f s", cfg.cpu_hz, signo,
		  (double)cfg.upload_period_ns / NS_PER_SEC);
out:
	atomic_store_explicit(&constructor_done, true, memory_order_release);
	errno = saved_errno;
}

FORK_CHILD_PATH __attribute__((destructor)) static void ddprof_fini(void)
{
	if (!agent_running())
		return;
	uploader_stop(); /* keeps errno */
	agent_stop();
}

/* The library's DT_FINI (the link's -Wl,-fini): nothing to do, on the fork path's code
 * pages. crti's _fini, the default, does nothing either, but alone on a page at the end
 * of .text: every fork child that exits would take a page fault for it. */
void preload_dt_fini(void);
FORK_CHILD_PATH __attribute__((used)) void preload_dt_fini(void)
{
}

DDPROF_EXPORT int ddprof_status(void)
{
	return agent_running() ? 0 : -ENOTCONN;
}

DDPROF_EXPORT int ddprof_flush(unsigned timeout_ms)
{
	if (ddprof_status() != 0)
		return -ENOTCONN;
	int rc = uploader_flush((uint64_t)timeout_ms * 1000000ULL);
	return rc == -ESRCH ? -ENOTCONN : rc;
}

DDPROF_EXPORT int ddprof_get_diagnostics(struct ddprof_diagnostics *out, size_t size)
{
	if (!out || size == 0)
		return -EINVAL;
	struct ddprof_diagnostics d;
	memset(&d, 0, sizeof(d));
	if (agent_running()) {
		struct uploader_stats us;
		uploader_get_stats(&us);
		d.samples = us.samples;
		d.dropped_samples = us.dropped_samples;
		d.profiles_exported = us.profiles_exported;
		d.export_failures = us.export_failures;
		d.serialize_failures = us.serialize_failures;
		d.bytes_exported = us.bytes_exported;
		d.uploader_started = uploader_thread_started();
		d.signal_lost = uploader_signal_lost();
		d.uploads_ok = us.uploads_ok;
		d.uploads_failed = us.uploads_failed;
		d.uploads_dropped = us.uploads_dropped;
		d.bytes_sent = us.bytes_sent;
		struct agent_diagnostics ad;
		agent_get_diagnostics(&ad);
		d.live_timers = ad.live_timers;
		d.timer_failures = ad.timer_failures;
		d.timers_armed_late = ad.timers_armed_late;
		d.foreign_signals = ad.foreign_signals;
		d.app_signals = ad.app_signals;
		d.active_profile_bytes = ad.active_profile_bytes;
		d.signal = ad.signal;
		d.unwind_tables = ad.unwind_tables;
		d.unwind_table_bytes = ad.unwind_table_bytes;
		d.unwind_table_build_ns = ad.unwind_table_build_ns;
		d.stacks_unwound = ad.stacks_unwound;
		d.stacks_incomplete = ad.stacks_incomplete;
		d.unwind_fp_fallbacks = ad.unwind_fp_fallbacks;
		d.boot_cfi_frames = ad.boot_cfi_frames;
		d.unwind_rules_unsupported = ad.unwind_rules_unsupported;
		d.unwind_cache_hits = ad.unwind_cache_hits;
		d.unwind_cache_stored = ad.unwind_cache_stored;
		d.unwind_cache_failures = ad.unwind_cache_failures;
		d.sandbox_skips = ad.sandbox_skips;
		d.alloc_samples = ad.alloc_samples;
		d.heap_live_samples = ad.heap_live_samples;
		d.heap_table_bytes = ad.heap_table_bytes;
		d.heap_table_overflows = ad.heap_table_overflows;
		d.heap_stacks = ad.heap_stacks;
		d.heap_stacks_refused = ad.heap_stacks_refused;
		d.heap_profiler_bytes = ad.heap_profiler_bytes;
		d.heap_compactions = ad.heap_compactions;
		d.profiler_mapped_bytes = ad.profiler_mapped_bytes;
		d.jit_map_rejects = ad.jit_map_rejects;
		d.jit_map_bad_lines = ad.jit_map_bad_lines;
		d.jit_frames = ad.jit_frames;
		d.lock_hooks_installed = ad.lock_hooks_installed;
		d.lock_contended = ad.lock_contended;
		d.lock_samples = ad.lock_samples;
		d.lock_cond_waits = ad.lock_cond_waits;
		d.wall_hooks_installed = ad.wall_hooks_installed;
		d.wall_wait_samples = ad.wall_wait_samples;
		d.wall_running_samples = ad.wall_running_samples;
		d.wall_deferred_samples = ad.wall_deferred_samples;
		d.wall_open_charged = ad.wall_open_charged;
		d.wall_unregistered_threads = ad.wall_unregistered_threads;
	}
	memset(out, 0, size);
	memcpy(out, &d, size < sizeof(d) ? size : sizeof(d));
	return 0;
}
