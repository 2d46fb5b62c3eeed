/*
 * stack_bounds.c - stack bounds for the unwinder (see stack_bounds.h).
 *
 * This file is async-signal-safe in stack_bounds_lookup: a binary search over a
 * static, immutable-once-published array. The snapshot is written into the unused
 * half of a double buffer and published with one release store, so a handler always
 * sees a whole snapshot.
 */
#include "stack_bounds.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Most processes have a few hundred mappings; past this the rest are not searched
 * (their threads' samples keep only the leaf frame). */
#define STACK_RANGES_MAX 4096
/* Used when the main thread's stack limit is unlimited (legacy mmap layout). */
#define MAIN_STACK_FALLBACK (1UL << 30)

struct range_set {
	uint32_t n;
	struct stack_range r[STACK_RANGES_MAX];
};

static struct range_set range_sets[2];
static _Atomic(struct range_set *) published;

extern void *__libc_stack_end; /* glibc: top of the main thread's stack */

int stack_bounds_snapshot(void)
{
	struct range_set *cur = atomic_load_explicit(&published, memory_order_relaxed);
	struct range_set *next = cur == &range_sets[0] ? &range_sets[1] : &range_sets[0];
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
			next->r[n++] = (struct stack_range){ lo, hi };
	}
	fclose(f);
	next->n = n; /* maps lists mappings in address order: the array is sorted */
	/* Release pairs with the acquire load in stack_bounds_lookup. A handler still
	 * reading the older buffer is safe until the snapshot after next: snapshots are
	 * taken at most once per upload period, handlers last microseconds. */
	atomic_store_explicit(&published, next, memory_order_release);
	return (int)n;
}

/* async-signal-safe */
bool stack_bounds_lookup(uintptr_t sp, struct stack_range *out)
{
	/* Acquire pairs with the release store in stack_bounds_snapshot. */
	const struct range_set *s = atomic_load_explicit(&published, memory_order_acquire);
	if (!s)
		return false;
	uint32_t lo = 0, hi = s->n;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (sp < s->r[mid].lo)
			hi = mid;
		else if (sp >= s->r[mid].hi)
			lo = mid + 1;
		else {
			*out = s->r[mid];
			return true;
		}
	}
	return false;
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
