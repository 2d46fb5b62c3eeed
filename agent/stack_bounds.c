/*
 * stack_bounds.c - stack bounds for the unwinder (see stack_bounds.h).
 *
 * Context: normal context only (constructor, uploader thread): reads /proc/self/maps
 * with stdio. The published ranges and the handler's lookup are agent/stack_ranges.c.
 */
#include "stack_bounds.h"
#include "stack_ranges.h"

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

bool stack_bounds_self(bool is_main, struct stack_range *out)
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
