/*
 * preload.c - the composition root: what LD_PRELOAD=libddprof.so runs.
 *
 * Owns: the constructor (read the configuration, start sampling, start the uploader),
 * the destructor (final profile at normal exit), the interposed pthread_create (arm a
 * timer in every new thread, delete it at thread exit), the pthread_atfork handlers,
 * and the public API (ddprof.h).
 * Context: constructor/destructor on the main thread (or whichever thread calls exit);
 * pthread_create in application threads; fork handlers in the forking thread.
 * Start-up cost: no library is loaded here beyond our own dependencies; the uploader
 * thread loads the rest off the application's path.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "agent/sample/app_signals.h"
#include "agent/unwind/boot_cfi.h"
#include "agent/unwind/cfi_cache.h"
#include "agent/sample/fork_local.h"
#include "agent/unwind/modules.h"
#include "agent/store/profile.h"
#include "agent/sample/sandbox.h"
#include "agent/sample/sampler.h"
#include "agent/sample/thread_start.h"
#include "agent/sample/threads.h"
#include "agent/unwind/unwind.h"
#include "common/raw_syscall.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/digits.h"
#include "common/dl_guard.h"
#include "common/log.h"
#include "preload/ddprof.h"
#include "uploader/uploader.h"

#define DDPROF_EXPORT __attribute__((visibility("default")))

static struct config cfg;
/* On the fork-local page when it has room: the signal handler writes the pair's
 * counters at every sample, and there the parent takes no copy-on-write fault after
 * a fork (agent/sample/fork_local.h); a fork child finds it zero-filled. */
static struct profile_pair profiles_fallback;
FORK_CHILD_DATA static struct profile_pair *profiles = &profiles_fallback; /* fork child reads */
/* Set once the agent runs: new threads get timers from then on. Acquire/release pairs
 * the constructor's set-up with the pthread_create wrapper reading it. */
/* On the page a fork child touches anyway: its destructor reads it (fork_local.h). */
FORK_CHILD_DATA static _Atomic bool agent_running;
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
	/* A thread that started before the constructor ran (another library's
	 * constructor started it) ends here too: if the start-up scan armed its timer,
	 * its CPU since its last sample is accounted like any thread's. */
	if (atomic_load_explicit(&agent_running, memory_order_acquire) && !sandbox_thread_active())
		threads_exit_self(root);
}

/* In a section of its own: the serializer leaves it out of stacks (uploader/pprof.c). */
__attribute__((section("ddprof_trampoline"))) static void *thread_trampoline(void *p)
{
	struct thread_start start;
	memcpy(&start, p, sizeof(start));
	thread_start_release(p);
	/* Filters are inherited: a thread created under one makes no new kind of system
	 * call for us either (agent/sample/sandbox.h). */
	if (start.sandboxed) {
		sandbox_inherit();
		sandbox_count_skip();
	} else if (atomic_load_explicit(&agent_running, memory_order_acquire)) {
		/* Acquire pairs with the constructor's release: its set-up is visible. Not
		 * yet running: the start-up scan will find this thread. */
		threads_start_self(false, start.stack_size);
	}
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
	if (!atomic_load_explicit(&agent_running, memory_order_acquire)) {
		if (atomic_load_explicit(&constructor_done, memory_order_acquire))
			return real(t, attr, fn, arg);
	} else {
		uploader_ensure_thread(); /* a fork child's deferred uploader thread */
	}
	/* No malloc: see agent/sample/thread_start.h. */
	struct thread_start *s = thread_start_alloc();
	if (!s)
		return real(t, attr, fn, arg); /* unsampled rather than failing the app */
	s->fn = fn;
	s->arg = arg;
	s->stack_size = thread_start_stack_size(attr);
	s->sandboxed = sandbox_thread_active();
	int rc = real(t, attr, thread_trampoline, s);
	if (rc != 0)
		thread_start_release(s);
	return rc;
}

/*
 * Samples during our fork handlers are harmless: the handler takes no lock and writes
 * only lock-free state, and in the child the timer is armed last. One exception, where
 * prepare blocks the sampling signal until the parent and child handlers ran (a system
 * call in each, which other forks do without): kernels before 5.0 restart a fork when a
 * signal arrives during it (the memory copy is thrown away): with the thread's CPU timer
 * running through the fork's kernel work, a fork longer than the period would never
 * finish (always_block_for_fork).
 * fork_unblock: this thread's prepare blocked it (it was not blocked before), written
 * only when it changes. forks_blocking counts such forks in flight: a fork child reads
 * its TLS only when it is not 0, and otherwise touches one page less.
 */
static bool always_block_for_fork;
static __thread bool fork_unblock __attribute__((tls_model("initial-exec")));
FORK_CHILD_DATA static _Atomic unsigned forks_blocking;

/* Kernel older than 5.0 ("signal: Don't restart fork when signals come in"), or
 * unknown: block the sampling signal around every fork. Start-up. */
static bool kernel_restarts_fork(void)
{
	struct utsname u;
	if (raw_syscall(SYS_uname, (long)&u, 0, 0, 0) != 0) /* not libc's: a code page less */
		return true;
	return digits_value(u.release, NULL) < 5;
}

/* Just the sampling signal; set at start-up, read only after (a fork child calling
 * sigemptyset would fault in one more page of libc's code; on the page the child
 * touches anyway, agent/sample/fork_local.h). */
FORK_CHILD_DATA static sigset_t sampling_set;

static void block_sampling_signal_if_needed(void)
{
	bool unblock = false;
	if (always_block_for_fork) {
		sigset_t old;
		pthread_sigmask(SIG_BLOCK, &sampling_set, &old);
		unblock = sigismember(&old, sampler_signal()) != 1;
	}
	if (fork_unblock != unblock)
		fork_unblock = unblock;
	if (unblock)
		atomic_fetch_add_explicit(&forks_blocking, 1, memory_order_relaxed);
}

/* Only the sampling signal, and only if prepare blocked it: the rest of the mask is
 * left as the application's handlers leave it. */
static void restore_signal_mask_parent(void)
{
	if (fork_unblock) {
		pthread_sigmask(SIG_UNBLOCK, &sampling_set, NULL);
		atomic_fetch_sub_explicit(&forks_blocking, 1, memory_order_relaxed);
	}
}

FORK_CHILD_PATH static void restore_signal_mask_child(void)
{
	/* The count is the parent's at fork; only this thread is here. */
	if (atomic_load_explicit(&forks_blocking, memory_order_relaxed) == 0)
		return;
	if (fork_unblock)
		pthread_sigmask(SIG_UNBLOCK, &sampling_set, NULL);
	atomic_store_explicit(&forks_blocking, 0, memory_order_relaxed);
}

/* Whether this thread's prepare handler took our locks: the parent and child handlers
 * act only then (a fork racing with the constructor must not unlock what it never
 * locked). */
static __thread bool fork_prepared __attribute__((tls_model("initial-exec")));
/* The same for the fork child, process-wide on the page it touches anyway (the
 * thread's TLS would be one page more); written only when it changes, in practice
 * once. */
FORK_CHILD_DATA static _Atomic bool child_prepared;

static void atfork_prepare(void)
{
	/* The thread's TLS is written only when a value changes: the previous fork left
	 * the page write-protected (copy-on-write), so a store would fault, and with the
	 * process's other threads running on other CPUs, shoot down their TLBs. */
	bool running = atomic_load_explicit(&agent_running, memory_order_acquire);
	if (fork_prepared != running)
		fork_prepared = running;
	if (atomic_load_explicit(&child_prepared, memory_order_relaxed) != running)
		atomic_store_explicit(&child_prepared, running, memory_order_relaxed);
	if (!running)
		return;
	block_sampling_signal_if_needed();
	dl_guard_atfork_prepare(); /* first: no other lock is held while it waits */
	uploader_atfork_prepare();
	threads_atfork_prepare();
	modules_atfork_prepare();
}

static void atfork_parent(void)
{
	if (!fork_prepared)
		return;
	modules_atfork_parent();
	threads_atfork_parent();
	uploader_atfork_parent();
	dl_guard_atfork_parent();
	restore_signal_mask_parent();
}

FORK_CHILD_PATH static void atfork_child(void)
{
	/* Not this thread's fork_prepared: its TLS page is one more page touched. */
	if (!atomic_load_explicit(&child_prepared, memory_order_relaxed))
		return;
	dl_guard_atfork_child(); /* first: what follows may start a thread */
	/* A fresh profile: the parent's samples are the parent's to upload. */
	/* Start time 0: the uploader takes the process's start time when it first needs
	 * it (uploader.c). A clock read here would cost every child more pages touched
	 * (the read's stack or the vDSO's), a page fault each. */
	profiles_reinit_after_fork(profiles, 0);
	threads_atfork_child();
	thread_start_after_fork();
	modules_atfork_child(own_create);
	uploader_atfork_child();
	restore_signal_mask_child();
	app_signals_after_fork_child(threads_fork_child_pid());
	/* Last: from here on samples may land (harmless: see always_block_for_fork). Not
	 * under a seccomp filter: a timer is a new kind of system call
	 * (agent/sample/sandbox.h). */
	if (!sandbox_thread_active())
		threads_atfork_child_arm();
	else
		sandbox_count_skip();
}

/*
 * dlopen/dlclose: a new or unloaded module changes the unwind tables.
 *
 * dlopen is caller-sensitive: glibc uses its return address to pick the caller's
 * RUNPATH, $ORIGIN and link namespace. A C wrapper would make libddprof the caller, so
 * dlopen is a small assembly stub that asks ddprof_dlopen_enter for the real function
 * and jumps to it with the application's return address still on the stack. The
 * module thread then rescans until the new module shows up (modules_notify_load).
 * dlclose is not caller-sensitive: a plain wrapper notifies after it returns.
 */
typedef void *(*dlopen_fn)(const char *file, int mode);
typedef int (*dlclose_fn)(void *handle);
static dlopen_fn real_dlopen;
static dlclose_fn real_dlclose;

/* Called by the stub; returns the real dlopen. */
void *ddprof_dlopen_enter(void);
__attribute__((used)) void *ddprof_dlopen_enter(void)
{
	dlopen_fn f = __atomic_load_n(&real_dlopen, __ATOMIC_ACQUIRE);
	if (!f) {
		f = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
		/* Release pairs with the acquire above; every thread resolves the same. */
		__atomic_store_n(&real_dlopen, f, __ATOMIC_RELEASE);
	}
	/* The profiler's own loads (libcurl, libdw and their dependencies, from the
	 * uploader thread) wait for the periodic rescan: the application rarely runs
	 * their code, and an exit flush should not compete with their tables. */
	if (atomic_load_explicit(&agent_running, memory_order_acquire) &&
	    !sampler_thread_is_internal() && !sandbox_thread_active())
		modules_notify_load();
	return (void *)f;
}

/* x86-64: rdi/rsi (file, mode) kept across the call; 16-byte alignment at the call
 * (entry rsp is 8 mod 16: two pushes and 8 more make it 0). If dlsym failed, NULL is
 * returned to the caller as dlopen's failure. */
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
	"call ddprof_dlopen_enter\n"
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
	if (rc == 0 && atomic_load_explicit(&agent_running, memory_order_acquire) &&
	    !sampler_thread_is_internal() && !sandbox_thread_active())
		modules_notify();
	return rc;
}

__attribute__((constructor)) static void ddprof_init(void)
{
	int saved_errno = errno;
	config_load(&cfg, NULL); /* NULL: the process environment */
	if (!cfg.enabled)
		goto out;
	own_create = resolve_libc_pthread_create();
	if (!resolve_pthread_create() || !own_create) {
		log_error("cannot find pthread_create; profiling disabled");
		goto out;
	}
	profiles = fork_local_or(&profiles_fallback, sizeof(*profiles));
	/* The profile starts now: the uploader thread may start much later (at the first
	 * need). A system call, not the vDSO, whose code and data pages /bin/true would
	 * not touch otherwise (start-up cost); 0 if it fails, and the thread then sets
	 * the start as it starts (uploader_main). */
	struct timespec now_rt;
	uint64_t start_ns = raw_syscall(SYS_clock_gettime, CLOCK_REALTIME, (long)&now_rt, 0, 0) == 0
				? timespec_ns(&now_rt)
				: 0;
	int rc = profiles_init(profiles, cfg.max_memory, start_ns);
	if (rc < 0) {
		log_error("cannot reserve %llu bytes for profiles (%s); profiling disabled",
			  (unsigned long long)cfg.max_memory, strerror(-rc));
		goto out;
	}
	uint64_t period_ns = NS_PER_SEC / cfg.cpu_hz;
	/* An empty module map first: until the tables are built, the DWARF unwinder
	 * reads the start-up modules' CFI straight from their memory (boot_cfi.h). */
	modules_init();
	boot_cfi_init();
	unwind_place_counters();
	uploader_place_lock();
	dl_guard_place(fork_local_alloc(sizeof(pthread_mutex_t)));
	/* A seccomp filter may kill us on process_vm_readv: only the stack is read directly
	 * until the first module refresh has checked for one (reading /proc/self/status
	 * would be a noticeable share of a short program's start-up: BENCHMARKS.md). */
	unwind_set_guarded_reads(false);
	int signo = sampler_init(profiles, period_ns, cfg.signal, unwind_dwarf);
	if (signo < 0) {
		log_error("no free signal for sampling; profiling disabled");
		goto out;
	}
	sigemptyset(&sampling_set);
	sigaddset(&sampling_set, signo);
	always_block_for_fork = kernel_restarts_fork();
	rc = threads_init(signo, period_ns);
	if (rc < 0) {
		log_error("cannot set up thread tracking (%s); profiling disabled", strerror(-rc));
		goto out;
	}
	sampler_set_enabled(true);
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	/* Release pairs with the wrapper's acquire. New threads register themselves from
	 * now on, before the scan, so no thread is missed (one seen twice is armed once). */
	atomic_store_explicit(&agent_running, true, memory_order_release);
	bool is_main = getpid() == sampler_gettid();
	/* The main thread's CPU before its timer (the exec's and the loader's page faults,
	 * earlier constructors): enough to matter in a short run's total. One system call
	 * (the vDSO does not serve CPU clocks). */
	struct timespec pre;
	if (is_main && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &pre) == 0) {
		uint64_t ns = timespec_ns(&pre);
		if (ns <= SAMPLER_PRESTART_CREDIT_MAX_NS)
			profiles_note_startup(profiles, sampler_gettid(), ns);
	}
	threads_start_self(is_main, 0);
	threads_scan_existing();
	/* The uploader thread starts at the process's first need (uploader.h). */
	uploader_start(&cfg, profiles, own_create);
	/* Unwind tables are built off the application's path, by the uploader thread (one
	 * profiler thread: each thread costs every fork), or by a thread of their own if
	 * the uploader's could not start. */
	cfi_cache_set_dir(cfg.unwind_cache_dir);
	rc = modules_start(own_create);
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
	if (!atomic_load_explicit(&agent_running, memory_order_acquire))
		return;
	uploader_stop(); /* keeps errno */
	sampler_set_enabled(false);
}

/* The library's DT_FINI (the link's -Wl,-fini): nothing to do, on the fork path's code
 * pages. crti's _fini, the default, does nothing either, but alone on a page at the end
 * of .text: every fork child that exits would take a page fault for it. */
void ddprof_dt_fini(void);
FORK_CHILD_PATH __attribute__((used)) void ddprof_dt_fini(void)
{
}

DDPROF_EXPORT int ddprof_status(void)
{
	return atomic_load_explicit(&agent_running, memory_order_acquire) ? 0 : -ENOTCONN;
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
	if (atomic_load_explicit(&agent_running, memory_order_acquire)) {
		struct uploader_stats us;
		uploader_get_stats(&us);
		d.samples = us.samples;
		d.dropped_samples = us.dropped_samples;
		d.profiles_exported = us.profiles_exported;
		d.export_failures = us.export_failures;
		d.serialize_failures = us.serialize_failures;
		d.bytes_exported = us.bytes_exported;
		d.live_timers = threads_count();
		d.timer_failures = threads_timer_failures();
		d.foreign_signals = sampler_foreign_signals();
		d.active_profile_bytes = region_used(&profiles_active(profiles)->region);
		d.signal = sampler_signal();
		struct modules_stats ms;
		modules_get_stats(&ms);
		d.unwind_tables = ms.tables;
		d.unwind_table_bytes = ms.table_bytes;
		d.unwind_table_build_ns = ms.build_ns;
		struct unwind_stats us2;
		unwind_get_stats(&us2);
		d.stacks_unwound = us2.walks;
		d.stacks_incomplete = us2.walks - us2.complete - us2.truncated;
		d.unwind_fp_fallbacks = us2.fp_steps;
		d.timers_armed_late = threads_deferred_armed();
		struct cfi_cache_stats cs;
		cfi_cache_get_stats(&cs);
		d.unwind_cache_hits = cs.hits;
		d.unwind_cache_stored = cs.stored;
		d.unwind_cache_failures = cs.refused + cs.store_failures;
		d.uploader_started = uploader_thread_started();
		d.sandbox_skips = sandbox_skips();
		d.app_signals = app_signals_forwarded();
		d.signal_lost = uploader_signal_lost();
		d.boot_cfi_frames = us2.boot_cfi_steps;
		d.uploads_ok = us.uploads_ok;
		d.uploads_failed = us.uploads_failed;
		d.uploads_dropped = us.uploads_dropped;
		d.bytes_sent = us.bytes_sent;
	}
	memset(out, 0, size);
	memcpy(out, &d, size < sizeof(d) ? size : sizeof(d));
	return 0;
}
