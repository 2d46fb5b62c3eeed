/*
 * unwind_dwarf.c - DWARF CFI unwinder for the signal handler (x86-64 System V).
 *
 * This file is async-signal-safe: it runs inside the sampling signal handler. It reads
 * the module map (agent/unwind/modules.h) inside a grace section, the immutable CFI tables,
 * and the interrupted thread's memory; it calls nothing but process_vm_readv (a
 * syscall) and allocates nothing.
 *
 * Per frame: find the module segment holding the pc (return addresses are looked up
 * at pc - 1: a call may be a function's last instruction), find its CFI row, compute
 * the CFA (SP or FP + offset, the PLT rule, or the signal frame's saved registers), read
 * the return address at CFA - 8 and the caller's rbp where the row says it was saved.
 * Where no table covers a pc yet, the start-up modules' CFI read from memory
 * (agent/unwind/boot_cfi.h); where nothing does (JIT code, a module loaded later whose
 * table is still being built), one frame-pointer step instead. A walk that ends anywhere
 * but a CFI root row (the return address column undefined: _start, clone3) gets
 * PC_INCOMPLETE.
 *
 * Memory reads: inside [sp, stack_hi) of the thread's own stack the words are read
 * directly (all of it is mapped: the stack grows down to sp). Anything else (a
 * sigaltstack, a fiber stack, a wild pointer) goes through process_vm_readv on our own
 * pid, which fails with EFAULT instead of faulting; at most GUARDED_READS_MAX of those
 * per walk, so a corrupt stack costs microseconds, never the process.
 */
#include "agent/unwind/unwind.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include "agent/unwind/boot_cfi.h"
#include "agent/unwind/cfi_table.h"
#include "agent/sample/fork_local.h"
#include "agent/unwind/module_map.h"
#include "agent/unwind/modules.h"
#include "common/digits.h"
#include "common/raw_syscall.h"
#include "common/sys_io.h"

#define GUARDED_READS_MAX 32

/* Off when a seccomp filter may kill the process on process_vm_readv. The constructor
 * turns them off and the first module refresh, off the application's start-up path,
 * turns them on when no filter is active (unwind_dwarf_enable_guarded_reads). A flag: relaxed
 * loads and stores, nothing is published with it. */
static _Atomic bool guarded_reads = true;
/* Set for good once the application installs a seccomp filter through libc (the
 * sandbox state: agent/sample/sandbox.h); a fork child inherits it, as it inherits the
 * filter. Checked beside guarded_reads: a refresh of the status file may have turned
 * those on just before. */
static _Atomic bool guarded_reads_forbidden;
/* Written at every walk: on the fork-local page when unwind_dwarf_place_counters found room,
 * where the parent takes no copy-on-write fault after a fork (agent/sample/fork_local.h). A
 * fork child finds them zero: it counts its own walks. */
struct walk_counters {
	_Atomic uint64_t walks, complete, truncated, fp_steps, cfi_steps, signal_frames,
	    guarded_reads, failed_reads, boot_cfi_steps;
};
static struct walk_counters counters_fallback;
static struct walk_counters *ctr = &counters_fallback;

void unwind_dwarf_place_counters(void)
{
	ctr = fork_local_or(&counters_fallback, sizeof(*ctr));
}

struct walk {
	uintptr_t lo, hi;	/* directly readable: [lo, hi) of the thread's stack */
	const long long *gregs; /* the leaf's registers, until the first step (CFI_REG) */
	int guarded_left;
	pid_t pid;
	uint32_t fp_steps, cfi_steps, guarded, failed, boot_steps;
};

/* async-signal-safe */
static bool read_word(struct walk *w, uintptr_t addr, uintptr_t *out)
{
	if (addr & (sizeof(uintptr_t) - 1)) {
		w->failed++;
		return false; /* saved registers are always 8-byte aligned */
	}
	if (addr >= w->lo && addr < w->hi && w->hi - addr >= sizeof(uintptr_t)) {
		*out = *(const uintptr_t *)addr;
		return true;
	}
	/* guarded_reads_forbidden: a filter installed since the last check of
	 * /proc/self/status may forbid process_vm_readv (that check sees the main thread's
	 * mode only). */
	if (!atomic_load_explicit(&guarded_reads, memory_order_relaxed) || w->guarded_left <= 0 ||
	    addr < 4096 || atomic_load_explicit(&guarded_reads_forbidden, memory_order_relaxed)) {
		w->failed++;
		return false;
	}
	w->guarded_left--;
	w->guarded++;
	struct iovec local = {out, sizeof(*out)};
	struct iovec remote = {(void *)addr, sizeof(*out)};
	if (w->pid == 0)
		w->pid = (pid_t)raw_syscall(SYS_getpid, 0, 0, 0, 0);
	long n = raw_syscall6(SYS_process_vm_readv, w->pid, (long)&local, 1, (long)&remote, 1, 0);
	if (n != (long)sizeof(*out)) {
		w->failed++;
		return false;
	}
	return true;
}

/* Registers of one frame. */
struct frame {
	uintptr_t pc, sp, fp;
	bool fp_known;
	bool exact_pc; /* leaf or interrupted by a signal: look up pc itself, not pc - 1 */
};

enum step { STEP_OK, STEP_ROOT, STEP_FAIL };

/* One frame-pointer step: [fp] = caller's fp, [fp + 8] = return address. */
/* async-signal-safe */
static enum step step_fp(struct walk *w, struct frame *f)
{
	if (!f->fp_known || f->fp < f->sp || (f->fp & 7))
		return STEP_FAIL;
	uintptr_t next_fp, ra;
	if (!read_word(w, f->fp, &next_fp) || !read_word(w, f->fp + 8, &ra))
		return STEP_FAIL;
	f->sp = f->fp + 16;
	f->fp = next_fp;
	f->pc = ra;
	f->exact_pc = false;
	w->fp_steps++;
	return STEP_OK;
}

/* The kernel's rt_sigframe: when the handler returns into the restorer, sp points at
 * the ucontext_t. */
/* async-signal-safe */
static enum step step_signal(struct walk *w, struct frame *f)
{
	uintptr_t uc = f->sp, pc, sp, fp;
	if (!read_word(w, uc + offsetof(ucontext_t, uc_mcontext.gregs[REG_RIP]), &pc) ||
	    !read_word(w, uc + offsetof(ucontext_t, uc_mcontext.gregs[REG_RSP]), &sp) ||
	    !read_word(w, uc + offsetof(ucontext_t, uc_mcontext.gregs[REG_RBP]), &fp))
		return STEP_FAIL;
	f->pc = pc;
	f->sp = sp;
	f->fp = fp;
	f->fp_known = true;
	f->exact_pc = true; /* the interrupted instruction, not a return address */
	return STEP_OK;
}

/* async-signal-safe */
static enum step step_cfi(struct walk *w, struct frame *f, const struct cfi_row *r)
{
	uintptr_t cfa;
	switch (r->kind) {
	case CFI_ROOT:
		return STEP_ROOT;
	case CFI_SIGNAL:
		return step_signal(w, f);
	case CFI_SP:
		cfa = f->sp + (uintptr_t)(intptr_t)r->cfa_off;
		break;
	case CFI_FP:
		if (!f->fp_known)
			return STEP_FAIL;
		cfa = f->fp + (uintptr_t)(intptr_t)r->cfa_off;
		break;
	case CFI_PLT:
		cfa = f->sp + 8 + ((f->pc & 15) >= (uintptr_t)r->cfa_off ? 8 : 0);
		break;
	case CFI_REG: {
		/* DWARF register numbers to the kernel's gregs slots (rsp and rbp have
		 * rows of their own). */
		static const signed char greg_of[16] = {
		    REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI, -1,	   -1,
		    REG_R8,  REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};
		int g = greg_of[cfi_reg_number(r->cfa_off) & 15];
		if (!w->gregs || g < 0)
			return STEP_FAIL;
		cfa = (uintptr_t)w->gregs[g] + (uintptr_t)(intptr_t)cfi_reg_offset(r->cfa_off);
		break;
	}
	case CFI_DEREF_SP:
	case CFI_DEREF_FP: {
		if (r->kind == CFI_DEREF_FP && !f->fp_known)
			return STEP_FAIL;
		uintptr_t base = r->kind == CFI_DEREF_SP ? f->sp : f->fp;
		uintptr_t saved;
		if (!read_word(w, base + (uintptr_t)(intptr_t)cfi_deref_offset(r->cfa_off), &saved))
			return STEP_FAIL;
		cfa = saved + (uintptr_t)cfi_deref_addend(r->cfa_off);
		break;
	}
	default:
		return STEP_FAIL;
	}
	if (cfa <= f->sp)
		return STEP_FAIL; /* the stack must unwind upwards: no loops */
	uintptr_t ra;
	if (!read_word(w, cfa - 8, &ra))
		return STEP_FAIL;
	if (r->fp_rule == CFI_FP_SAVED) {
		uintptr_t fp;
		if (!read_word(w, cfa + (uintptr_t)(intptr_t)r->fp_off, &fp))
			return STEP_FAIL;
		f->fp = fp;
		f->fp_known = true;
	} else if (r->fp_rule == CFI_FP_UNKNOWN) {
		f->fp_known = false;
	}
	f->sp = cfa;
	f->pc = ra;
	f->exact_pc = false;
	w->cfi_steps++;
	return STEP_OK;
}

/* async-signal-safe */
void unwind_dwarf_set_guarded_reads(bool on)
{
	atomic_store_explicit(&guarded_reads, on, memory_order_relaxed);
}

/* async-signal-safe */
void unwind_dwarf_forbid_guarded_reads(void)
{
	atomic_store_explicit(&guarded_reads_forbidden, true, memory_order_relaxed);
	atomic_store_explicit(&guarded_reads, false, memory_order_relaxed);
}

/* Normal context (open, read and close only). The "Seccomp:" line of /proc/self/status
 * (2: a filter), read to the end: the file is longer than a page with a few hundred
 * supplementary groups. Unknown (unreadable, or no such line: a kernel without seccomp
 * says so too rarely to matter) counts as a filter. Read from procfs rather than asked
 * with prctl(PR_GET_SECCOMP): a filter may kill on prctl, never on open/read. */
static bool seccomp_filter_active(const char *status_path)
{
	static const char key[] = "\nSeccomp:";
	const size_t klen = sizeof(key) - 1, keep = klen + 8; /* the key and its value */
	int fd = open(status_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	char buf[4096];
	size_t have = 0;
	int mode = -1;
	for (;;) {
		ssize_t n = sys_read(fd, buf + have, sizeof(buf) - 1 - have);
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = 0;
		const char *s = strstr(buf, key);
		if (s && strchr(s + klen, '\n')) {
			mode = (int)digits_value(s + klen, NULL);
			break;
		}
		if (have > keep) { /* keep the tail: the key may straddle two reads */
			memmove(buf, buf + have - keep, keep);
			have = keep;
		}
	}
	close(fd);
	return mode != 0;
}

bool unwind_dwarf_enable_guarded_reads(const char *status_path)
{
	bool on = !atomic_load_explicit(&guarded_reads_forbidden, memory_order_relaxed) &&
		  !seccomp_filter_active(status_path ? status_path : "/proc/self/status");
	unwind_dwarf_set_guarded_reads(on);
	return on;
}

/* The red zone is read only this far above the stack's lowest known address: a page,
 * in case that address is a guard page's rather than the first usable one. */
#define RED_ZONE_MARGIN 4096

uint32_t unwind_dwarf(const struct unwind_regs *regs, uintptr_t *pcs, uint32_t max)
{
	if (max < 2) {
		if (max == 1)
			pcs[0] = regs->pc ? regs->pc : PC_UNKNOWN;
		return max;
	}
	struct walk w = {
	    .lo = regs->sp,
	    .hi = regs->stack_hi,
	    .gregs = regs->gregs,
	    .guarded_left = GUARDED_READS_MAX,
	};
	if (w.hi <= w.lo)
		w.lo = w.hi = 0; /* not on the thread's own stack: every read guarded */
	else if (regs->stack_lo && regs->sp >= regs->stack_lo &&
		 regs->sp - regs->stack_lo >= UNWIND_RED_ZONE + RED_ZONE_MARGIN)
		w.lo = regs->sp - UNWIND_RED_ZONE; /* the leaf's red zone (unwind.h) */
	struct frame f = {regs->pc, regs->sp, regs->fp, true, true};
	uint32_t n = 0;
	pcs[n++] = f.pc ? f.pc : PC_UNKNOWN;
	bool root = false, truncated = false;
	unsigned slot;
	const struct module_map *map = module_map_enter(&slot);
	while (f.pc > PC_SYNTHETIC_MAX) {
		uintptr_t lookup = f.exact_pc ? f.pc : f.pc - 1;
		const struct module_entry *e = module_map_find(map, lookup);
		const struct cfi_row *r =
		    e && e->table ? cfi_table_find(e->table, lookup - e->bias) : NULL;
		/* No table yet: the start-up modules' CFI, read from memory (boot_cfi.h). */
		struct cfi_row boot_row;
		if (!(e && e->table) && boot_cfi_find(lookup, &boot_row)) {
			r = &boot_row;
			w.boot_steps++;
		}
		uintptr_t old_sp = f.sp;
		enum step s = r ? step_cfi(&w, &f, r) : step_fp(&w, &f);
		w.gregs = NULL; /* the leaf's registers are no caller's */
		if (s == STEP_ROOT) {
			root = true;
			break;
		}
		if (s == STEP_FAIL || f.pc <= PC_SYNTHETIC_MAX)
			break;
		if (r && r->kind == CFI_SIGNAL) {
			w.lo = w.hi = 0; /* maybe another stack now: guarded reads */
			if (regs->stack_hi && f.sp >= regs->sp && f.sp < regs->stack_hi) {
				w.lo = f.sp;
				w.hi = regs->stack_hi;
			}
			atomic_fetch_add_explicit(&ctr->signal_frames, 1, memory_order_relaxed);
		} else if (f.sp <= old_sp) {
			break;
		} else if (w.hi && f.sp > w.lo && f.sp <= w.hi) {
			w.lo = f.sp; /* frames below the caller's sp are dead */
		}
		if (n + 1 >= max) {
			pcs[n++] = PC_TRUNCATED; /* cut on purpose, not incomplete */
			truncated = true;
			break;
		}
		pcs[n++] = f.pc;
	}
	module_map_exit(slot);
	if (!root && !truncated)
		pcs[n++] = PC_INCOMPLETE; /* n < max: the loop stops at max - 1 */
	atomic_fetch_add_explicit(&ctr->walks, 1, memory_order_relaxed);
	if (root)
		atomic_fetch_add_explicit(&ctr->complete, 1, memory_order_relaxed);
	if (truncated)
		atomic_fetch_add_explicit(&ctr->truncated, 1, memory_order_relaxed);
	if (w.fp_steps)
		atomic_fetch_add_explicit(&ctr->fp_steps, w.fp_steps, memory_order_relaxed);
	if (w.cfi_steps)
		atomic_fetch_add_explicit(&ctr->cfi_steps, w.cfi_steps, memory_order_relaxed);
	if (w.guarded)
		atomic_fetch_add_explicit(&ctr->guarded_reads, w.guarded, memory_order_relaxed);
	if (w.boot_steps)
		atomic_fetch_add_explicit(&ctr->boot_cfi_steps, w.boot_steps, memory_order_relaxed);
	if (w.failed)
		atomic_fetch_add_explicit(&ctr->failed_reads, w.failed, memory_order_relaxed);
	return n;
}

void unwind_dwarf_get_stats(struct unwind_stats *out)
{
	out->walks = atomic_load_explicit(&ctr->walks, memory_order_relaxed);
	out->truncated = atomic_load_explicit(&ctr->truncated, memory_order_relaxed);
	out->complete = atomic_load_explicit(&ctr->complete, memory_order_relaxed);
	out->fp_steps = atomic_load_explicit(&ctr->fp_steps, memory_order_relaxed);
	out->cfi_steps = atomic_load_explicit(&ctr->cfi_steps, memory_order_relaxed);
	out->signal_frames = atomic_load_explicit(&ctr->signal_frames, memory_order_relaxed);
	out->boot_cfi_steps = atomic_load_explicit(&ctr->boot_cfi_steps, memory_order_relaxed);
	out->guarded_reads = atomic_load_explicit(&ctr->guarded_reads, memory_order_relaxed);
	out->failed_reads = atomic_load_explicit(&ctr->failed_reads, memory_order_relaxed);
}
