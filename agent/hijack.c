/*
 * hijack.c - safe-point redirect of an interrupted thread (see hijack.h).
 *
 * This file is async-signal-safe in hijack_armed, hijack_try and what they call: C11
 * atomics and plain memory copies into the private area mapped at start-up.
 * hijack_init, hijack_arm and hijack_disarm run in normal context; ddprof_hijack_run
 * runs in normal context after the redirect (outside the handler, on the private stack).
 *
 * x86-64 Linux only. The kernel's signal frame (arch/x86/kernel/signal.c) is, from the
 * handler's ucontext downwards in memory: the restorer address 8 bytes below uc, then
 * uc and siginfo, then, above them and 64-byte aligned, the FPU/xsave area that
 * uc_mcontext.fpregs points to. rt_sigreturn reads the frame at rsp - 8, so the copy is
 * restored by pointing rsp at the copied uc; the xsave area must stay 64-byte aligned
 * (xrstor faults otherwise, and the kernel then kills the thread with SIGSEGV).
 */
#include "hijack.h"
#include "agent/fork_local.h"

#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/single_threaded.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "agent/syscall_wrappers.h"
#include "agent/unwind.h"

#define HIJACK_STACK_BYTES (128u * 1024u)
#define HIJACK_FRAME_BYTES (32u * 1024u) /* AMX xsave areas reach ~11 KiB */
#define HIJACK_GUARD_BYTES 4096u
#define MAX_UNSAFE_RANGES 32
/* Outermost frames allowed in unsafe code: __libc_start_call_main and
 * __libc_start_main, or clone3, start_thread and our thread start. */
#define MAX_ROOT_FRAMES 3
/* struct _fpx_sw_bytes (asm/sigcontext.h) in the reserved tail of the fxsave area. */
#define FPX_SW_OFFSET 464
#ifndef FP_XSTATE_MAGIC1
#define FP_XSTATE_MAGIC1 0x46505853u
#endif
#define FXSAVE_BYTES 512u
#define ARCH_SHSTK_STATUS 0x5005
#define ARCH_SHSTK_SHSTK 1ull

struct code_range {
	uintptr_t lo, hi;
};

static struct code_range unsafe[MAX_UNSAFE_RANGES];
static size_t n_unsafe;
static void (*hijack_fn)(void);
FORK_CHILD_DATA static uint8_t *stack_top; /* NULL: unavailable; a fork child reads it */
static uint8_t *frame_buf;		   /* HIJACK_FRAME_BYTES above the stack */
FORK_CHILD_DATA static _Atomic bool armed; /* a fork child arms it */
static _Atomic uint64_t st_redirects, st_refused, st_syscall_redirects;

/* Read by the entry stub after the function returns: the copied frame's uc. Hidden:
 * the stub reaches it rip-relative. */
__attribute__((visibility("hidden"))) uintptr_t ddprof_hijack_resume_sp;

void ddprof_hijack_entry(void);

/* Normal context, on the private stack, with the interrupted code's signal mask. */
__attribute__((visibility("hidden"), used)) void ddprof_hijack_run(void)
{
	int saved_errno = errno;
	hijack_fn();
	atomic_fetch_add_explicit(&st_redirects, 1, memory_order_relaxed);
	errno = saved_errno;
}

/* Entered with rsp at the 16-byte aligned top of the private stack. Its return address
 * is undefined: unwinders stop here (a root frame) instead of reading the private stack
 * further. cld: the interrupted code may have had the direction flag set, the ABI wants
 * it clear at a call. rt_sigreturn (15) does not return. */
__asm__(".text\n"
	".globl ddprof_hijack_entry\n"
	".hidden ddprof_hijack_entry\n"
	".type ddprof_hijack_entry, @function\n"
	"ddprof_hijack_entry:\n"
	".cfi_startproc\n"
	".cfi_undefined rip\n"
	"cld\n"
	"call ddprof_hijack_run\n"
	"mov ddprof_hijack_resume_sp(%rip), %rsp\n"
	"mov $15, %eax\n"
	"syscall\n"
	"ud2\n"
	".cfi_endproc\n"
	".size ddprof_hijack_entry, .-ddprof_hijack_entry\n");

struct scan {
	uintptr_t own, malloc_addr, malloc_seen;
	bool first;	    /* the next module is the main executable */
	bool exe_allocates; /* ... and it defines malloc, or holds its canonical address */
};

static bool is_system_module(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	static const char *const prefixes[] = {"libc.so",  "ld-linux",	    "libpthread.so",
					       "libdl.so", "linux-vdso.so", "linux-gate.so"};
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (strncmp(base, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

static bool module_contains(const struct dl_phdr_info *info, uintptr_t addr)
{
	for (int i = 0; addr && i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && addr >= lo && addr < lo + ph->p_memsz)
			return true;
	}
	return false;
}

static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct scan *s = arg;
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	bool allocator =
	    module_contains(info, s->malloc_addr) || module_contains(info, s->malloc_seen);
	if (s->first && allocator)
		s->exe_allocates = true;
	s->first = false;
	if (!is_system_module(name) && !module_contains(info, s->own) && !allocator)
		return 0;
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	if (strncmp(base, "libc.so", 7) == 0)
		syscall_wrappers_init(info);
	for (int i = 0; i < info->dlpi_phnum && n_unsafe < MAX_UNSAFE_RANGES; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
		unsafe[n_unsafe++] = (struct code_range){lo, lo + ph->p_memsz};
	}
	return 0;
}

static bool shadow_stack_enabled(void)
{
	unsigned long long features = 0;
	return syscall(SYS_arch_prctl, ARCH_SHSTK_STATUS, &features) == 0 &&
	       (features & ARCH_SHSTK_SHSTK);
}

int hijack_init(void (*fn)(void), const void *own_code, const void *malloc_addr)
{
	if (stack_top)
		return 0;
	if (shadow_stack_enabled())
		return -ENOTSUP; /* the second rt_sigreturn would find no shadow-stack token */
	/* The address of malloc as this library sees it, and as the caller resolved it:
	 * the definition the process uses, libc's or a replacement's (jemalloc, tcmalloc),
	 * whose locks pthread_create may need. In a non-PIE executable that takes malloc's
	 * address, the first is a stub in the executable. */
	struct scan s = {(uintptr_t)own_code, (uintptr_t)malloc_addr, (uintptr_t)&malloc, true,
			 false};
	n_unsafe = 0;
	dl_iterate_phdr(collect, &s);
	if (s.exe_allocates) {
		/* Every stack runs through main: no sample could ever be a safe point. */
		n_unsafe = 0;
		return -ENOTSUP;
	}
	size_t bytes = HIJACK_GUARD_BYTES + HIJACK_STACK_BYTES + HIJACK_FRAME_BYTES;
	/* Untouched in the process that maps it: a fork child that redirects pays for the
	 * pages it uses, never a copy. */
	uint8_t *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	mprotect(p, HIJACK_GUARD_BYTES, PROT_NONE); /* an overflow faults, not corrupts */
	hijack_fn = fn;
	frame_buf = p + HIJACK_GUARD_BYTES + HIJACK_STACK_BYTES;
	stack_top = frame_buf; /* 16-byte aligned: page aligned */
	return 0;
}

FORK_CHILD_PATH bool hijack_arm(void)
{
	if (!stack_top)
		return false;
	atomic_store_explicit(&armed, true, memory_order_relaxed);
	return true;
}

FORK_CHILD_PATH void hijack_disarm(void)
{
	atomic_store_explicit(&armed, false, memory_order_relaxed);
}

/* async-signal-safe */
bool hijack_armed(void)
{
	return atomic_load_explicit(&armed, memory_order_relaxed);
}

/* async-signal-safe */
static bool in_unsafe_code(uintptr_t pc)
{
	for (size_t i = 0; i < n_unsafe; i++)
		if (pc >= unsafe[i].lo && pc < unsafe[i].hi)
			return true;
	return false;
}

enum point { NOT_SAFE, SAFE, SAFE_AT_SYSCALL };

/* async-signal-safe. pcs[0] is the interrupted pc, the others return addresses. */
static enum point safe_point(const uintptr_t *pcs, uint32_t n)
{
	if (n < 2 || pcs[n - 1] <= PC_SYNTHETIC_MAX)
		return NOT_SAFE; /* not a complete walk: something is unknown */
	uint32_t i = n - 1;
	/* The outermost frame may be the executable's _start; then the libc (and our
	 * thread start) frames that call the application. */
	if (!in_unsafe_code(pcs[i]))
		i--;
	uint32_t root = 0;
	while (i > 0 && root < MAX_ROOT_FRAMES && in_unsafe_code(pcs[i])) {
		i--;
		root++;
	}
	/* The system-call exception: a leaf right after the syscall instruction of one of
	 * libc's plain wrappers (read, write, poll...: agent/syscall_wrappers.h), called
	 * straight from the application's code, in a process that never had a second
	 * thread. There the wrapper holds no lock and has nothing left to update; libc
	 * functions that take a lock make their calls from inner functions, whose caller
	 * is in libc (the caller is checked, a tail call aside). Single-threaded: no
	 * other thread can cancel this one while glibc would allow it asynchronously. A
	 * program whose CPU goes to system calls (I/O in a loop) shows no other safe
	 * point: its samples arrive as the calls return. */
	uint32_t k = 0;
	if (n >= 3 && i >= 1 && __libc_single_threaded && pcs[1] > PC_SYNTHETIC_MAX &&
	    !in_unsafe_code(pcs[1]) && syscall_wrappers_after_call(pcs[0]))
		k = 1;
	enum point kind = k == 1 ? SAFE_AT_SYSCALL : SAFE;
	for (; k <= i; k++)
		if (pcs[k] <= PC_SYNTHETIC_MAX || in_unsafe_code(pcs[k]))
			return NOT_SAFE;
	return kind;
}

/* async-signal-safe. Size of the FPU area at fp, as the kernel wrote it. */
static size_t fpstate_bytes(const uint8_t *fp)
{
	uint32_t magic, extended;
	memcpy(&magic, fp + FPX_SW_OFFSET, sizeof(magic));
	memcpy(&extended, fp + FPX_SW_OFFSET + 4, sizeof(extended));
	if (magic != FP_XSTATE_MAGIC1)
		return FXSAVE_BYTES;
	return extended;
}

/* async-signal-safe */
bool hijack_try(void *ucv, const siginfo_t *si, const uintptr_t *pcs, uint32_t n)
{
	if (!atomic_load_explicit(&armed, memory_order_relaxed))
		return false;
	ucontext_t *uc = ucv;
	uint8_t *frame = (uint8_t *)uc - sizeof(uintptr_t); /* the restorer's address */
	uint8_t *fp = (uint8_t *)uc->uc_mcontext.fpregs;
	enum point kind = safe_point(pcs, n);
	if (kind == NOT_SAFE || pcs[0] != (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] || !fp ||
	    (const uint8_t *)si <= (uint8_t *)uc || fp <= (const uint8_t *)si ||
	    ((uintptr_t)fp & 63)) {
		atomic_fetch_add_explicit(&st_refused, 1, memory_order_relaxed);
		return false;
	}
	size_t fp_off = (size_t)(fp - frame);
	size_t fp_len = fpstate_bytes(fp);
	/* The copy keeps the area's 64-byte alignment. */
	uintptr_t dst_fp = ((uintptr_t)frame_buf + fp_off + 63) & ~(uintptr_t)63;
	uint8_t *dst = (uint8_t *)(dst_fp - fp_off);
	if (fp_len < FXSAVE_BYTES || dst_fp + fp_len > (uintptr_t)frame_buf + HIJACK_FRAME_BYTES) {
		atomic_fetch_add_explicit(&st_refused, 1, memory_order_relaxed);
		return false;
	}
	/* Relaxed: one thread, and the handler cannot nest; the exchange only keeps a
	 * disarm from normal context (the function already ran) from being undone. */
	if (!atomic_exchange_explicit(&armed, false, memory_order_relaxed))
		return false;
	if (kind == SAFE_AT_SYSCALL)
		atomic_fetch_add_explicit(&st_syscall_redirects, 1, memory_order_relaxed);
	memcpy(dst, frame, fp_off + fp_len);
	ucontext_t *copy = (ucontext_t *)(dst + sizeof(uintptr_t));
	copy->uc_mcontext.fpregs = (fpregset_t)dst_fp;
	/* Every signal blocked while the function runs (the copy keeps the original mask
	 * for the second sigreturn): an application handler must not run on the private
	 * stack, nor while we hold our lock or are inside pthread_create (a handler that
	 * exits or longjmps would deadlock or leave them held). The kernel's sigset in the
	 * frame is 8 bytes, where glibc's sigset_t is 128: only those 8 are written. */
	memset(&uc->uc_sigmask, 0xff, sizeof(uint64_t));
	ddprof_hijack_resume_sp = (uintptr_t)copy;
	uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)ddprof_hijack_entry;
	uc->uc_mcontext.gregs[REG_RSP] = (greg_t)(uintptr_t)stack_top;
	return true;
}

void hijack_get_stats(struct hijack_stats *out)
{
	out->redirects = atomic_load_explicit(&st_redirects, memory_order_relaxed);
	out->refused = atomic_load_explicit(&st_refused, memory_order_relaxed);
	out->syscall_redirects = atomic_load_explicit(&st_syscall_redirects, memory_order_relaxed);
}
