/*
 * stack_bounds.c - stack bounds for the unwinder (see stack_bounds.h).
 *
 * Context: normal context only (constructor, uploader thread): reads /proc/self/maps
 * with stdio. The published ranges and the handler's lookup are agent/unwind/stack_ranges.c.
 */
#include "agent/unwind/stack_bounds.h"
#include "agent/unwind/stack_ranges.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Used when the main thread's stack limit is unlimited (legacy mmap layout). */
#define MAIN_STACK_FALLBACK (1UL << 30)

extern void *__libc_stack_end; /* glibc: top of the main thread's stack */

int stack_bounds_snapshot(void)
{
	struct range_set *next = stack_ranges_unpublished();
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	char line[512];
	uint32_t n = 0;
	while (n < STACK_RANGES_MAX && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[5];
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3)
			continue;
		if (perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p')
			next->r[n++] = (struct stack_range){lo, hi};
	}
	fclose(f);
	next->n = n; /* maps lists mappings in address order: the array is sorted */
	stack_ranges_publish(next);
	return (int)n;
}

/*
 * glibc's NPTL on x86-64 (TLS_TCB_AT_TP) puts the thread descriptor, which pthread_self
 * points to, at the top of the block it maps for a thread's stack, with the static TLS
 * just below it and the stack below that; the block holds at least the requested size
 * (a cached block may be bigger, never smaller). So everything from the thread's sp up
 * to its descriptor is mapped, and the stack reaches at least requested-size below the
 * descriptor, less the guard page and the TLS (STACK_SLACK covers both, generously: a
 * lower bound set too high only sends the deepest samples to guarded reads). Checked
 * against the caller's own sp; any surprise falls back to pthread_getattr_np.
 */
#define STACK_SLACK (64 * 1024)
#define STACK_MIN_FAST (4 * STACK_SLACK)
#define TLS_MAX_FAST (1024 * 1024) /* descriptor to the first frame: static TLS and more */

static bool bounds_from_descriptor(size_t stack_size, struct stack_range *out)
{
	uintptr_t hi = (uintptr_t)pthread_self();
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
	if (stack_size < STACK_MIN_FAST || hi < stack_size || sp >= hi || hi - sp > TLS_MAX_FAST)
		return false;
	uintptr_t lo = hi - stack_size + STACK_SLACK;
	if (sp <= lo)
		return false;
	out->lo = lo;
	out->hi = hi;
	return true;
}

bool stack_bounds_self(bool is_main, size_t stack_size, struct stack_range *out)
{
	if (is_main) {
		struct rlimit rl;
		uintptr_t hi = (uintptr_t)__libc_stack_end;
		uintptr_t size = MAIN_STACK_FALLBACK;
		if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
			size = rl.rlim_cur;
		/* __libc_stack_end sits just below argv/envp: every frame is under it. */
		out->hi = hi + sizeof(uintptr_t);
		out->lo = hi > size ? hi - size : 0;
		return hi != 0;
	}
	if (stack_size && bounds_from_descriptor(stack_size, out))
		return true;
	pthread_attr_t attr;
	if (pthread_getattr_np(pthread_self(), &attr) != 0)
		return false;
	void *addr = NULL;
	size_t size = 0;
	int rc = pthread_attr_getstack(&attr, &addr, &size);
	pthread_attr_destroy(&attr);
	if (rc != 0 || !addr)
		return false;
	out->lo = (uintptr_t)addr;
	out->hi = (uintptr_t)addr + size;
	return true;
}
