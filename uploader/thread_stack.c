/*
 * thread_stack.c - the uploader thread's stack: a mapping of ours, not glibc's.
 *
 * Owns: one MADV_WIPEONFORK mapping (guard page first), handed to pthread_create.
 * Why: in every fork child, glibc's fork code marks each thread stack it allocated free
 * by writing into the thread's descriptor at the top of that stack; for our thread that
 * was a page copied in every child, the costliest single instruction of a short child's
 * life in perf on these virtual machines (a first touch costs a new process 10-25 us, a
 * copy more). A stack the application provides is only unlinked from a list (one write,
 * here into a wiped page: no copy), and the kernel does not copy the mapping's page
 * tables at fork. A fork child that starts its own uploader thread reuses the mapping,
 * zero-filled: the parent's thread does not exist there.
 * Context: normal context, the thread that starts the uploader (under its lock).
 */
#include "uploader/thread_stack.h"
#include "common/page_size.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define UPLOADER_STACK_BYTES (8u << 20) /* reserved; the thread touches tens of KiB */
static uint8_t *stack_base;		  /* guard page first, then the stack */
static pid_t stack_pid;			  /* the process whose thread runs on it */

void thread_stack_apply(pthread_attr_t *attr)
{
	pid_t pid = getpid();
	if (stack_base && stack_pid == pid)
		stack_base = NULL; /* a second thread in one process (tests): a new stack */
	if (!stack_base) {
		void *p = mmap(NULL, UPLOADER_STACK_BYTES, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
		if (p == MAP_FAILED)
			return; /* glibc's stack, as before */
		if (madvise(p, UPLOADER_STACK_BYTES, MADV_WIPEONFORK) != 0 ||
		    mprotect(p, page_size(), PROT_NONE) != 0) {
			munmap(p, UPLOADER_STACK_BYTES); /* kernel < 4.14: glibc's stack */
			return;
		}
		stack_base = p;
	}
	size_t guard = page_size();
	if (pthread_attr_setstack(attr, stack_base + guard, UPLOADER_STACK_BYTES - guard) == 0)
		stack_pid = pid;
}
