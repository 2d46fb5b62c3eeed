/*
 * unwind_fp.c - frame-pointer unwinder (x86-64 System V).
 *
 * This file is async-signal-safe: it runs inside the sampling signal handler, reads
 * only the interrupted thread's stack within [sp, stack_hi), and calls nothing.
 *
 * A frame is [fp] = caller's fp, [fp + 8] = return address. The chain must move
 * strictly up the stack and stay 8-byte aligned; anything else (code built without
 * frame pointers leaves rbp holding arbitrary data) ends the walk. The leaf frame's
 * caller is missed when the sample lands in a prologue or a leaf without a frame:
 * the DWARF unwinder fixes that.
 */
#include "agent/unwind/unwind.h"

#include <stdbool.h>

#define FRAME_SIZE (2 * sizeof(uintptr_t)) /* saved fp + return address */
#define FRAME_ALIGN_MASK ((uintptr_t)7)

/* async-signal-safe */
static inline bool frame_in_stack(uintptr_t fp, uintptr_t lo, uintptr_t hi)
{
	return fp >= lo && fp < hi && hi - fp >= FRAME_SIZE && (fp & FRAME_ALIGN_MASK) == 0;
}

/* async-signal-safe */
uint32_t unwind_fp(const struct unwind_regs *regs, uintptr_t *pcs, uint32_t max)
{
	uint32_t n = 0;
	if (max == 0)
		return 0;
	pcs[n++] = regs->pc ? regs->pc : PC_UNKNOWN;
	uintptr_t lo = regs->sp, hi = regs->stack_hi, fp = regs->fp;
	if (hi == 0 || lo >= hi)
		return n; /* stack unknown (alternate signal stack, coroutine): leaf only */
	while (frame_in_stack(fp, lo, hi)) {
		const uintptr_t *frame = (const uintptr_t *)fp;
		uintptr_t ret = frame[1];
		uintptr_t next = frame[0];
		if (ret <= PC_SYNTHETIC_MAX)
			break;
		if (n + 1 >= max) {
			pcs[n++] = PC_TRUNCATED;
			break;
		}
		pcs[n++] = ret;
		if (next <= fp)
			break; /* must move up the stack: no loops */
		lo = fp + FRAME_SIZE;
		fp = next;
	}
	return n;
}
