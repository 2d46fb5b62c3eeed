/*
 * unwind.h - the pluggable unwinder interface and the frame-pointer unwinder.
 *
 * An unwinder turns the registers of an interrupted thread into pcs[] (leaf first).
 * The signal handler calls the one sampler_init was given at start-up (an unwinder_fn:
 * agent_init (agent/agent.c) passes unwind_dwarf; unwind_fp has the same signature).
 * Context: signal handler (async-signal-safe). Every memory read is bounded to
 * [sp, stack_hi) of the interrupted thread: all of it is mapped for the thread's own
 * stack, so a corrupt frame pointer ends the walk instead of faulting.
 */
#ifndef DDPROF_AGENT_UNWIND_H
#define DDPROF_AGENT_UNWIND_H

#include <stdbool.h>
#include <stdint.h>

/* Deepest stack kept; deeper ones end in PC_TRUNCATED in the last slot. */
#define UNWIND_MAX_DEPTH 256

/* Synthetic pcs: never valid code addresses (the zero page is never mapped). */
#define PC_TRUNCATED ((uintptr_t)1) /* "[truncated]": stack deeper than the limit */
#define PC_UNKNOWN ((uintptr_t)2)   /* "[unknown]": no pc could be read */
#define PC_DROPPED ((uintptr_t)3)   /* "[dropped]": stack refused past the ceiling */
/* "[incomplete]": outermost slot of a stack whose walk stopped before a root frame
 * (_start, clone3...) because a caller could not be recovered. */
#define PC_INCOMPLETE ((uintptr_t)4)
/* "[profiler]": the CPU time of the profiler's own thread (symbolizing, compressing,
 * uploading, building unwind tables), added by the uploader so the profile accounts
 * for all the CPU the process used, the profiler's cost included. */
#define PC_PROFILER ((uintptr_t)5)
/* "[start-up]": the CPU the main thread used before the profiler started (the exec, the
 * dynamic loader, constructors that ran before ours), in the first profile, so that
 * its total is the process's CPU (profiles.h: profiles_note_startup). */
#define PC_STARTUP ((uintptr_t)6)
#define PC_SYNTHETIC_MAX ((uintptr_t)0xfff)

struct unwind_regs {
	uintptr_t pc;
	uintptr_t sp;
	uintptr_t fp;
	uintptr_t stack_hi; /* exclusive top of the thread's stack; 0 = unknown */
	/* The lowest address of the thread's stack when known (0 = unknown), given with an
	 * interrupted context: its leaf's red zone (the 128 bytes below sp, which the ABI
	 * leaves to the function and the kernel skips when it pushes a signal frame) is
	 * then readable, where a function after its epilogue's `leave` still finds the
	 * saved frame pointer its CFI points at. */
	uintptr_t stack_lo;
	/* The interrupted context's general registers (ucontext_t's gregs), or NULL: a
	 * leaf whose CFA is in a caller-saved register (CFI_REG) is unwound from them. */
	const long long *gregs;
};

/* The x86-64 System V red zone below the stack pointer. */
#define UNWIND_RED_ZONE 128

/* Unwinder statistics, per process (relaxed counters, any thread). */
struct unwind_stats {
	uint64_t walks;		 /* stacks unwound with DWARF */
	uint64_t complete;	 /* reached a root frame (_start, clone3) */
	uint64_t truncated;	 /* cut at UNWIND_MAX_DEPTH (neither complete nor incomplete) */
	uint64_t fp_steps;	 /* frames recovered with frame pointers (no table for the pc) */
	uint64_t cfi_steps;	 /* frames recovered with CFI rows */
	uint64_t signal_frames;	 /* signal trampolines crossed */
	uint64_t guarded_reads;	 /* reads outside the thread's stack, via process_vm_readv */
	uint64_t failed_reads;	 /* reads refused (unmapped, or over the per-walk budget) */
	uint64_t boot_cfi_steps; /* frames recovered from in-memory CFI (no table yet) */
};

/* Returns the number of pcs written (>= 1). async-signal-safe. */
typedef uint32_t (*unwinder_fn)(const struct unwind_regs *regs, uintptr_t *pcs, uint32_t max);

/* async-signal-safe. Follows the rbp chain. */
uint32_t unwind_fp(const struct unwind_regs *regs, uintptr_t *pcs, uint32_t max);

/*
 * async-signal-safe. DWARF CFI unwinder (unwind_dwarf.c): looks each pc up in the
 * module map (agent/unwind/modules.h), applies its CFI row, crosses signal frames, and falls
 * back to the rbp chain where no table covers a pc. A stack that does not end in a
 * root frame gets PC_INCOMPLETE as its outermost pc.
 */
uint32_t unwind_dwarf(const struct unwind_regs *regs, uintptr_t *pcs, uint32_t max);

void unwind_dwarf_get_stats(struct unwind_stats *out);

/* Start-up, before sampling: moves the walk counters to the fork-local page
 * (agent/sample/fork_local.h) when it has room. */
void unwind_dwarf_place_counters(void);

/* async-signal-safe. Guarded reads (process_vm_readv) on or off; off, reads outside
 * the thread's stack end the walk instead. The constructor turns them off: they may
 * be fatal under a seccomp filter, and checking for one costs start-up time. */
void unwind_dwarf_set_guarded_reads(bool on);

/* async-signal-safe. Guarded reads off for the rest of the process's life (and its
 * fork children's): the application installed a seccomp filter, which may kill on
 * process_vm_readv. unwind_dwarf_enable_guarded_reads never turns them on again. */
void unwind_dwarf_forbid_guarded_reads(void);

/* Normal context, off the application's path (the module service's first call):
 * turns guarded reads on when the status file (status_path, NULL: /proc/self/status)
 * says no seccomp filter is active; off when one is, or it cannot tell. Returns
 * whether they are on. */
bool unwind_dwarf_enable_guarded_reads(const char *status_path);

#endif
