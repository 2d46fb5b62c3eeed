/*
 * sandbox.c - what the application's seccomp filters leave the profiler (see sandbox.h).
 *
 * This file is async-signal-safe where marked: initial-exec TLS and relaxed atomics.
 */
#include "agent/sample/sandbox.h"

#include <stdatomic.h>

#include "agent/unwind/unwind.h"
#include "common/fork_child.h"
#include "common/log.h"

/* initial-exec: read by the sampling handler. Inherited across fork by the forking
 * thread, as its filter is. */
static __thread bool thread_sandboxed __attribute__((tls_model("initial-exec")));
/* Flags: relaxed loads and stores, nothing is published with them. A fork child reads
 * them on its path: on the page it touches anyway. */
FORK_CHILD_DATA static _Atomic bool process_sandboxed;
FORK_CHILD_DATA static _Atomic bool any_sandboxed;
static _Atomic uint64_t skips;

static void enter_common(void)
{
	if (!atomic_load_explicit(&any_sandboxed, memory_order_relaxed)) {
		atomic_store_explicit(&any_sandboxed, true, memory_order_relaxed);
		/* process_vm_readv is the one system call the handler makes. */
		unwind_dwarf_forbid_guarded_reads();
		log_debug("seccomp filter installed by the application: the profiler makes no "
			  "new kind of system call in the threads it covers");
	}
}

void sandbox_enter_thread(void)
{
	enter_common();
	thread_sandboxed = true;
}

void sandbox_enter_process(void)
{
	enter_common();
	thread_sandboxed = true;
	atomic_store_explicit(&process_sandboxed, true, memory_order_relaxed);
}

/* async-signal-safe */
FORK_CHILD_PATH bool sandbox_thread_active(void)
{
	/* The process-wide flags first: a fork child's path reads no TLS page for this. */
	if (!atomic_load_explicit(&any_sandboxed, memory_order_relaxed))
		return false;
	return atomic_load_explicit(&process_sandboxed, memory_order_relaxed) || thread_sandboxed;
}

/* async-signal-safe */
bool sandbox_process_active(void)
{
	return atomic_load_explicit(&process_sandboxed, memory_order_relaxed);
}

/* async-signal-safe */
FORK_CHILD_PATH bool sandbox_any(void)
{
	return atomic_load_explicit(&any_sandboxed, memory_order_relaxed);
}

struct sandbox_state sandbox_save(void)
{
	struct sandbox_state st = {thread_sandboxed,
				   atomic_load_explicit(&process_sandboxed, memory_order_relaxed)};
	return st;
}

void sandbox_restore(struct sandbox_state st)
{
	/* any_sandboxed stays: guarded reads stay off, the cautious side. */
	thread_sandboxed = st.thread;
	atomic_store_explicit(&process_sandboxed, st.process, memory_order_relaxed);
}

void sandbox_inherit(void)
{
	thread_sandboxed = true;
}

/* async-signal-safe */
void sandbox_count_skip(void)
{
	atomic_fetch_add_explicit(&skips, 1, memory_order_relaxed);
}

uint64_t sandbox_skips(void)
{
	return atomic_load_explicit(&skips, memory_order_relaxed);
}
