/*
 * bench_handler.c - what one sample costs inside the signal handler.
 *
 * Measures the handler's own work (unwind + record into the stack trie) on real stacks
 * of depth 10 and 100, three ways on the same recursion:
 *   fp        frame-pointer unwinder on code built with frame pointers (the baseline)
 *   dwarf     DWARF CFI unwinder on the same code
 *   dwarf-nofp DWARF CFI unwinder on code built without frame pointers
 *   dwarf-nofp-no-table  the same before any table is built: every rule read from the
 *             modules' .eh_frame_hdr in memory (agent/unwind/boot_cfi.h), fewer samples
 * and, as a reference, the kernel's own cost of delivering a signal to a no-op handler
 * (the same for every profiler). Each figure is the median of RUNS runs of ITERS
 * samples, taken in one process, one after another, so ratios compare like with like.
 *
 * usage: bench_handler [--quick]
 * Prints one line per case: "case depth ns_per_sample ratio_vs_fp frames".
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include "agent/unwind/boot_cfi.h"
#include "agent/unwind/modules.h"
#include "agent/store/profiles.h"
#include "agent/unwind/stack_bounds.h"
#include "agent/unwind/unwind.h"

#define RUNS 7

static long iters = 200000;
static long boot_iters = 4000; /* walks from in-memory CFI cost microseconds */
static struct profile_pair pp;
static uintptr_t pcs[UNWIND_MAX_DEPTH];
static volatile uint32_t sink;
static uint32_t frames_seen; /* frames of the last unwind: the stack really is deep */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static long cur_iters;

/* The leaf: captures its context once, then unwinds and records cur_iters times. */
static double measure_here(unwinder_fn unwind)
{
	ucontext_t uc;
	getcontext(&uc);
	struct stack_range r;
	stack_bounds_self(true, 0, &r);
	struct unwind_regs regs = {
	    .pc = (uintptr_t)uc.uc_mcontext.gregs[REG_RIP],
	    .sp = (uintptr_t)uc.uc_mcontext.gregs[REG_RSP],
	    .fp = (uintptr_t)uc.uc_mcontext.gregs[REG_RBP],
	    .stack_hi = r.hi,
	};
	uint64_t runs[RUNS];
	long n_iters = cur_iters;
	for (int k = 0; k < RUNS; k++) {
		uint64_t t0 = now_ns();
		for (long i = 0; i < n_iters; i++) {
			uint32_t n = unwind(&regs, pcs, UNWIND_MAX_DEPTH);
			profiles_record(&pp, 1, pcs, n, 1000000);
			sink += n;
			frames_seen = n;
		}
		runs[k] = now_ns() - t0;
	}
	qsort(runs, RUNS, sizeof(runs[0]), cmp_u64);
	return (double)runs[RUNS / 2] / (double)n_iters;
}

static unwinder_fn cur_unwinder;
static double result;

__attribute__((noinline)) static int descend_fp(int depth)
{
	volatile char pad[32];
	pad[0] = (char)depth;
	if (depth <= 1) {
		result = measure_here(cur_unwinder);
		return pad[0];
	}
	return descend_fp(depth - 1) + pad[0];
}

__attribute__((noinline, optimize("omit-frame-pointer"))) static int descend_nofp(int depth)
{
	volatile char pad[32];
	pad[0] = (char)depth;
	if (depth <= 1) {
		result = measure_here(cur_unwinder);
		return pad[0];
	}
	return descend_nofp(depth - 1) + pad[0];
}

static void on_signal(int sig)
{
	(void)sig;
}

/* Kernel signal delivery and return, for scale. */
static double signal_round_trip(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGUSR2, &sa, NULL);
	uint64_t runs[RUNS];
	long n = iters / 4;
	for (int k = 0; k < RUNS; k++) {
		uint64_t t0 = now_ns();
		for (long i = 0; i < n; i++)
			raise(SIGUSR2);
		runs[k] = now_ns() - t0;
	}
	qsort(runs, RUNS, sizeof(runs[0]), cmp_u64);
	return (double)runs[RUNS / 2] / (double)n;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--quick")) {
		iters = 5000;
		boot_iters = 200;
	}
	if (profiles_init(&pp, 64 << 20, 0) != 0)
		return 1;
	/* The ceiling mapped at once: the agent maps more only as its uploader thread,
	 * which this benchmark does not run, sees the need (agent/store/profiles.h). */
	for (int i = 0; i < 2; i++)
		region_reserve(&pp.p[i].region, 64 << 20);
	modules_init();
	/* Before any table is built (a process whose uploader thread has not started yet,
	 * agent/unwind/boot_cfi.h): the start-up modules' CFI read from memory at every frame. */
	static const int depths[] = {10, 100};
	double boot[2], boot_fp[2];
	uint32_t seen_boot[2];
	boot_cfi_init();
	for (size_t d = 0; d < 2; d++) {
		cur_iters = boot_iters;
		cur_unwinder = unwind_fp;
		descend_fp(depths[d]);
		boot_fp[d] = result;
		cur_unwinder = unwind_dwarf;
		descend_nofp(depths[d]);
		boot[d] = result;
		seen_boot[d] = frames_seen;
	}
	cur_iters = iters;
	if (modules_refresh() < 0)
		return 1;
	struct modules_stats ms;
	modules_get_stats(&ms);
	printf("# modules %llu, tables %llu, %llu rows, %.0f KiB, built in %.2f ms\n",
	       (unsigned long long)ms.modules, (unsigned long long)ms.tables,
	       (unsigned long long)ms.rows, ms.table_bytes / 1024.0, ms.build_ns / 1e6);
	for (size_t d = 0; d < 2; d++) {
		int depth = depths[d];
		uint32_t seen_fp, seen_dw, seen_nofp;
		cur_unwinder = unwind_fp;
		descend_fp(depth);
		double fp = result;
		seen_fp = frames_seen;
		cur_unwinder = unwind_dwarf;
		descend_fp(depth);
		double dw = result;
		seen_dw = frames_seen;
		descend_nofp(depth);
		double dw_nofp = result;
		seen_nofp = frames_seen;
		printf("fp %d %.1f %.2f %u\n", depth, fp, 1.0, seen_fp);
		printf("dwarf %d %.1f %.2f %u\n", depth, dw, dw / fp, seen_dw);
		printf("dwarf-nofp %d %.1f %.2f %u\n", depth, dw_nofp, dw_nofp / fp, seen_nofp);
		printf("dwarf-nofp-no-table %d %.1f %.2f %u\n", depth, boot[d],
		       boot[d] / boot_fp[d], seen_boot[d]);
	}
	printf("signal-delivery 0 %.1f 0\n", signal_round_trip());
	return (int)(sink & 0);
}
