/*
 * test_unwind.c - the DWARF unwinder on real and synthetic stacks.
 *
 * Real stacks: recursion in functions with and without frame pointers, unwound from a
 * getcontext at the bottom, must give every frame and end in a root; a signal handler
 * must see through the signal frame into the interrupted function; a walk must go
 * through a function whose CFA is loaded from a stack slot, and from a leaf whose CFA is
 * in rax (read from the interrupted context's registers). Synthetic stacks:
 * random words (fake return addresses into libc, wild frame pointers) must end the walk
 * cleanly with [incomplete], never crash, and never read outside the given stack except
 * through guarded reads.
 */
#include <check.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include "agent/unwind/boot_cfi.h"
#include "agent/unwind/modules.h"
#include "agent/unwind/stack_bounds.h"
#include "agent/unwind/unwind.h"
#include "check_run.h"

static uintptr_t pcs[UNWIND_MAX_DEPTH];
static uint32_t npcs;
static uintptr_t descend_ret; /* return address of the recursive call in descend_* */

static void unwind_here(const ucontext_t *uc)
{
	struct stack_range r;
	ck_assert(stack_bounds_self(true, 0, &r));
	struct unwind_regs regs = {
	    .pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP],
	    .sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP],
	    .fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP],
	    .stack_hi = r.hi,
	};
	npcs = unwind_dwarf(&regs, pcs, UNWIND_MAX_DEPTH);
}

static void setup(void)
{
	modules_init();
	ck_assert_int_gt(modules_refresh(), 3); /* tables of every loaded module, now */
}

/* Code without frame pointers: gcc's per-function switch. clang (the ASan build) has
 * none: there these functions keep their frame pointers, and the walks still step by
 * CFI (cfi_steps), the tables being there. */
#ifdef __clang__
#define NO_FRAME_POINTER
#else
#define NO_FRAME_POINTER , optimize("omit-frame-pointer")
#endif

/* The same recursion twice: without frame pointers (only CFI can find the callers) and
 * with them. The volatile array keeps a frame of some size on the stack; the leaf
 * unwinds from a getcontext; depth 1 records the return address every level pushes. */
#define DEFINE_DESCEND(name, ...)                                                                  \
	__attribute__((noinline __VA_ARGS__)) static int name(int depth)                           \
	{                                                                                          \
		volatile char pad[48];                                                             \
		pad[0] = (char)depth;                                                              \
		if (depth == 0) {                                                                  \
			ucontext_t uc;                                                             \
			getcontext(&uc);                                                           \
			unwind_here(&uc);                                                          \
			return pad[0];                                                             \
		}                                                                                  \
		int r = name(depth - 1);                                                           \
		if (depth == 1)                                                                    \
			descend_ret = (uintptr_t)__builtin_return_address(0);                      \
		return r + pad[0];                                                                 \
	}
DEFINE_DESCEND(descend_nofp, NO_FRAME_POINTER)
DEFINE_DESCEND(descend_fp)

static void check_recursion(int depth, const char *what)
{
	/* pcs: [getcontext's return in the leaf] [descend's return x depth] [test]... */
	uint32_t same = 0;
	for (uint32_t i = 0; i < npcs; i++)
		same += pcs[i] == descend_ret;
	ck_assert_msg(same == (uint32_t)depth, "%s: %u frames of the recursion, expected %d", what,
		      same, depth);
	ck_assert_msg(pcs[npcs - 1] > PC_SYNTHETIC_MAX,
		      "%s: walk ended in synthetic pc %lu after %u frames", what,
		      (unsigned long)pcs[npcs - 1], npcs);
}

START_TEST(recursion_without_frame_pointers)
{
	descend_nofp(20);
	check_recursion(20, "no frame pointers");
	struct unwind_stats st;
	unwind_dwarf_get_stats(&st);
	ck_assert_uint_ge(st.cfi_steps, 20);
}
END_TEST

START_TEST(recursion_with_frame_pointers)
{
	descend_fp(30);
	check_recursion(30, "frame pointers");
}
END_TEST

START_TEST(deep_stack_is_truncated_not_incomplete)
{
	descend_nofp(UNWIND_MAX_DEPTH + 20);
	ck_assert_uint_eq(npcs, UNWIND_MAX_DEPTH);
	ck_assert_uint_eq(pcs[npcs - 1], PC_TRUNCATED);
}
END_TEST

/* A function that realigns its stack and keeps its caller's SP in a slot, as OpenSSL's
 * assembly does (sha512-x86_64 and others): its CFA is the expression *(rsp + 8) + 16
 * (DW_OP_breg7 8; DW_OP_deref; DW_OP_plus_uconst 16), the caller's rbp saved at
 * CFA - 16, and rbp zeroed, so that no frame-pointer step can stand in for the rule. It
 * calls cb, which unwinds. */
void realigned_frame(void (*cb)(void));
extern const char realigned_ret[];
__asm__(".text\n"
	".globl realigned_frame\n"
	".type realigned_frame, @function\n"
	"realigned_frame:\n"
	".cfi_startproc\n"
	"push %rbp\n"
	".cfi_adjust_cfa_offset 8\n"
	".cfi_offset rbp, -16\n"
	"mov %rsp, %rax\n"
	"sub $64, %rsp\n"
	"and $-32, %rsp\n"
	"mov %rax, 8(%rsp)\n"
	".cfi_escape 0x0f, 0x05, 0x77, 0x08, 0x06, 0x23, 0x10\n"
	"xor %ebp, %ebp\n"
	"call *%rdi\n"
	".globl realigned_ret\n"
	"realigned_ret:\n"
	"mov 8(%rsp), %rsp\n"
	".cfi_def_cfa rsp, 16\n"
	"pop %rbp\n"
	".cfi_adjust_cfa_offset -8\n"
	".cfi_restore rbp\n"
	"ret\n"
	".cfi_endproc\n"
	".size realigned_frame, .-realigned_frame\n");

static void unwind_from_callback(void)
{
	ucontext_t uc;
	getcontext(&uc);
	unwind_here(&uc);
}

START_TEST(through_a_frame_whose_cfa_is_loaded_from_a_slot)
{
	realigned_frame(unwind_from_callback);
	bool found = false;
	for (uint32_t i = 0; i < npcs; i++)
		found |= pcs[i] == (uintptr_t)realigned_ret;
	ck_assert_msg(found, "realigned_frame's return address is not in the %u frames", npcs);
	ck_assert_msg(pcs[npcs - 1] > PC_SYNTHETIC_MAX,
		      "walk ended in synthetic pc %lu after %u frames",
		      (unsigned long)pcs[npcs - 1], npcs);
}
END_TEST

/* A handler running on the thread's stack unwinds through the kernel's signal frame
 * into the function that raised the signal. */
static volatile sig_atomic_t in_raiser;
static uintptr_t raiser_lo, raiser_hi;

static void on_usr1(int sig, siginfo_t *si, void *ucv)
{
	(void)sig;
	(void)si;
	(void)ucv;
	ucontext_t uc;
	getcontext(&uc);
	unwind_here(&uc);
}

__attribute__((noinline NO_FRAME_POINTER)) static void raiser(void)
{
	in_raiser = 1;
	raise(SIGUSR1);
	in_raiser = 0;
}

__attribute__((noinline)) static void raiser_end(void)
{
	__asm__ volatile("");
}

START_TEST(through_a_signal_frame)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_usr1;
	sa.sa_flags = SA_SIGINFO;
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	raiser_lo = (uintptr_t)raiser;
	raiser_hi = (uintptr_t)raiser_end;
	if (raiser_hi < raiser_lo) { /* the compiler may order them either way */
		raiser_hi = raiser_lo + 64;
	}
	raiser();
	struct unwind_stats st;
	unwind_dwarf_get_stats(&st);
	ck_assert_uint_ge(st.signal_frames, 1);
	bool found = false;
	for (uint32_t i = 0; i < npcs; i++)
		found |= pcs[i] > raiser_lo && pcs[i] <= raiser_hi;
	ck_assert_msg(found, "raiser() not found among %u frames after the signal frame", npcs);
	ck_assert(pcs[npcs - 1] > PC_SYNTHETIC_MAX); /* rooted, not incomplete */
}
END_TEST

/* A leaf whose CFA is in rax, as OpenSSL's assembly has it after `mov %rsp,%rax` and a
 * realignment: it spins, stack realigned, until a signal's handler (which unwinds from
 * the interrupted context, registers included) sets the flag rdi points at. Its caller
 * is assembly too, so that its return address (spin_ret) is known: a frame-pointer step
 * from the leaf would skip it. */
void spin_via(volatile int *flag);
extern const char spin_ret[];
__asm__(".text\n"
	"cfa_in_rax_spin:\n"
	".cfi_startproc\n"
	"mov %rsp, %rax\n"
	".cfi_def_cfa_register rax\n"
	"and $-64, %rsp\n"
	"sub $64, %rsp\n"
	"1: pause\n"
	"cmpl $0, (%rdi)\n"
	"je 1b\n"
	"mov %rax, %rsp\n"
	".cfi_def_cfa_register rsp\n"
	"ret\n"
	".cfi_endproc\n"
	".globl spin_via\n"
	".type spin_via, @function\n"
	"spin_via:\n"
	".cfi_startproc\n"
	"sub $8, %rsp\n"
	".cfi_adjust_cfa_offset 8\n"
	"call cfa_in_rax_spin\n"
	".globl spin_ret\n"
	"spin_ret:\n"
	"add $8, %rsp\n"
	".cfi_adjust_cfa_offset -8\n"
	"ret\n"
	".cfi_endproc\n"
	".size spin_via, .-spin_via\n");

static volatile int spin_flag;
static uint32_t spin_in_leaf; /* walks made while the leaf spun */

static void on_alarm_unwind(int sig, siginfo_t *si, void *ucv)
{
	(void)sig;
	(void)si;
	const ucontext_t *uc = ucv;
	struct stack_range r;
	if (!stack_bounds_self(true, 0, &r))
		return;
	struct unwind_regs regs = {
	    .pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP],
	    .sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP],
	    .fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP],
	    .stack_hi = r.hi,
	    .gregs = uc->uc_mcontext.gregs,
	};
	npcs = unwind_dwarf(&regs, pcs, UNWIND_MAX_DEPTH);
	spin_in_leaf++;
	spin_flag = 1;
}

START_TEST(leaf_whose_cfa_is_in_another_register)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_alarm_unwind;
	sa.sa_flags = SA_SIGINFO;
	ck_assert_int_eq(sigaction(SIGALRM, &sa, NULL), 0);
	struct itimerval it = {.it_value = {0, 20000}};
	ck_assert_int_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
	spin_via(&spin_flag);
	ck_assert_uint_eq(spin_in_leaf, 1);
	ck_assert_msg(npcs >= 3 && pcs[1] == (uintptr_t)spin_ret,
		      "the leaf's caller is %#lx, not spin_ret (%#lx), in %u frames",
		      npcs > 1 ? (unsigned long)pcs[1] : 0UL, (unsigned long)spin_ret, npcs);
	ck_assert_msg(pcs[npcs - 1] > PC_SYNTHETIC_MAX,
		      "walk ended in synthetic pc %lu after %u frames",
		      (unsigned long)pcs[npcs - 1], npcs);
}
END_TEST

/* Random stack contents with pcs in libc (so CFI rows apply) and wild rbp values. */
START_TEST(garbage_stacks_end_cleanly)
{
	enum { WORDS = 512 };
	static uintptr_t fake[WORDS];
	uintptr_t libc_pc = (uintptr_t)&memcpy;
	unsigned seed = 777;
	uint32_t incomplete = 0;
	for (int iter = 0; iter < 20000; iter++) {
		for (int i = 0; i < WORDS; i++) {
			uint32_t r = (uint32_t)rand_r(&seed);
			switch (r % 4) {
			case 0:
				fake[i] = libc_pc + (r % 0x100000); /* inside libc's code */
				break;
			case 1:
				fake[i] = (uintptr_t)&fake[(r >> 3) % WORDS]; /* into the stack */
				break;
			case 2:
				fake[i] = (uintptr_t)r << 20; /* wild, probably unmapped */
				break;
			default:
				fake[i] = r;
			}
		}
		struct unwind_regs regs = {
		    .pc = libc_pc + (uint32_t)rand_r(&seed) % 0x100000,
		    .sp = (uintptr_t)&fake[0],
		    .fp = fake[1],
		    .stack_hi = (uintptr_t)&fake[WORDS],
		};
		uint32_t n = unwind_dwarf(&regs, pcs, UNWIND_MAX_DEPTH);
		ck_assert_uint_ge(n, 1);
		ck_assert_uint_le(n, UNWIND_MAX_DEPTH);
		incomplete += pcs[n - 1] == PC_INCOMPLETE;
	}
	/* Garbage almost never looks like a root frame. */
	ck_assert_uint_ge(incomplete, 19000);
	struct unwind_stats st;
	unwind_dwarf_get_stats(&st);
	ck_assert_uint_gt(st.cfi_steps, 0);
}
END_TEST

/* Without a known stack every read is guarded: a wild sp is survived. */
START_TEST(unknown_stack_reads_are_guarded)
{
	struct unwind_regs regs = {
	    .pc = (uintptr_t)&memcpy + 16,
	    .sp = (uintptr_t)0x10000, /* unmapped */
	    .fp = (uintptr_t)0x20000,
	    .stack_hi = 0,
	};
	uint32_t n = unwind_dwarf(&regs, pcs, UNWIND_MAX_DEPTH);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(pcs[1], PC_INCOMPLETE);
	struct unwind_stats st;
	unwind_dwarf_get_stats(&st);
	ck_assert_uint_ge(st.failed_reads, 1);
}
END_TEST

/* Guarded reads the walk of a wild stack made (0 when they are off). */
static uint64_t guarded_reads_of_a_wild_walk(void)
{
	struct unwind_stats before, after;
	unwind_dwarf_get_stats(&before);
	struct unwind_regs regs = {.pc = (uintptr_t)&memcpy + 16, .sp = 0x10000, .fp = 0x20000};
	unwind_dwarf(&regs, pcs, UNWIND_MAX_DEPTH);
	unwind_dwarf_get_stats(&after);
	return after.guarded_reads - before.guarded_reads;
}

static bool enable_with_status(const char *dir, const char *content)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/status", dir);
	if (content) {
		FILE *f = fopen(path, "w");
		ck_assert_ptr_nonnull(f);
		fputs(content, f);
		fclose(f);
	} else {
		unlink(path);
	}
	return unwind_dwarf_enable_guarded_reads(path);
}

/* The constructor turns guarded reads off; the first module refresh turns them on
 * unless /proc/self/status shows a seccomp filter (one may kill on process_vm_readv). */
START_TEST(guarded_reads_follow_the_seccomp_check)
{
	char dir[] = "/tmp/ddprof-unwind-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	unwind_dwarf_set_guarded_reads(false);
	ck_assert_uint_eq(guarded_reads_of_a_wild_walk(), 0);
	ck_assert(enable_with_status(dir, "Name:\ttest\nSeccomp:\t0\nSeccomp_filters:\t0\n"));
	ck_assert_uint_ge(guarded_reads_of_a_wild_walk(), 1);
	ck_assert(!enable_with_status(dir, "Name:\ttest\nSeccomp:\t2\nSeccomp_filters:\t1\n"));
	ck_assert_uint_eq(guarded_reads_of_a_wild_walk(), 0);
	ck_assert(!enable_with_status(dir, "Name:\ttest\nState:\tR\n")); /* no line: unknown */
	ck_assert(!enable_with_status(dir, NULL));			 /* unreadable */
	ck_assert(!enable_with_status(dir, ""));			 /* empty */
	/* Past the first page (hundreds of supplementary groups), across read sizes. */
	static char big[12000];
	for (size_t pad = 4070; pad < 4110; pad += 3) {
		size_t n = (size_t)snprintf(big, sizeof(big), "Name:\ttest\nGroups:\t");
		while (n < pad)
			big[n++] = '1';
		snprintf(big + n, sizeof(big) - n, "\nSeccomp:\t2\nSeccomp_filters:\t1\n");
		ck_assert_msg(!enable_with_status(dir, big), "filter missed at %zu", pad);
		snprintf(big + n, sizeof(big) - n, "\nSeccomp:\t0\nSeccomp_filters:\t0\n");
		ck_assert_msg(enable_with_status(dir, big), "no filter missed at %zu", pad);
	}
	rmdir(dir);
	/* A real filter (allow everything) in a child: the check sees it. */
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
		struct sock_fprog prog = {.len = 1, .filter = &allow};
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
		    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
			_exit(2);
		_exit(unwind_dwarf_enable_guarded_reads(NULL) || guarded_reads_of_a_wild_walk()
			  ? 1
			  : 0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "under a seccomp filter guarded reads stayed on (status 0x%x)", st);
	unwind_dwarf_set_guarded_reads(true);
}
END_TEST

/* Before any table is built (the uploader thread starts late): an empty module map, and
 * the start-up modules' CFI read straight from memory. */
static void setup_boot(void)
{
	modules_init();
	ck_assert_int_ge(boot_cfi_init(), 3); /* this test, libc, ld.so, the vdso */
	ck_assert(boot_cfi_covers_roots());
}

START_TEST(before_any_table_walks_are_complete_by_boot_cfi)
{
	struct unwind_stats before, after;
	unwind_dwarf_get_stats(&before);
	descend_nofp(20);
	check_recursion(20, "no frame pointers, no table");
	unwind_dwarf_get_stats(&after);
	ck_assert_uint_ge(after.cfi_steps - before.cfi_steps, 20);
	ck_assert_uint_ge(after.boot_cfi_steps - before.boot_cfi_steps, 20);
	ck_assert_uint_eq(after.fp_steps, before.fp_steps); /* not one frame-pointer guess */
}
END_TEST

static Suite *unwind_suite(void)
{
	Suite *s = suite_create("unwind");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, recursion_without_frame_pointers);
	tcase_add_test(tc, recursion_with_frame_pointers);
	tcase_add_test(tc, deep_stack_is_truncated_not_incomplete);
	tcase_add_test(tc, through_a_signal_frame);
	tcase_add_test(tc, through_a_frame_whose_cfa_is_loaded_from_a_slot);
	tcase_add_test(tc, leaf_whose_cfa_is_in_another_register);
	tcase_add_test(tc, garbage_stacks_end_cleanly);
	tcase_add_test(tc, unknown_stack_reads_are_guarded);
	tcase_add_test(tc, guarded_reads_follow_the_seccomp_check);
	suite_add_tcase(s, tc);
	TCase *boot = tcase_create("before tables");
	tcase_add_checked_fixture(boot, setup_boot, NULL);
	tcase_add_test(boot, before_any_table_walks_are_complete_by_boot_cfi);
	suite_add_tcase(s, boot);
	return s;
}

int main(void)
{
	return check_run_suite(unwind_suite());
}
