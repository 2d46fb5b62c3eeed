/*
 * alloc_nopie.c - a non-PIE program that takes malloc's address in its code, for
 * test_got_patch. The link gives it a canonical PLT entry for malloc: the address
 * every module sees as malloc's (libc's own GLOB_DAT slot for malloc holds it), which
 * dlsym may return. Patched through libgot_patch_shim.so with counting hooks: the
 * hooks must call malloc itself, not that entry (it jumps through the program's own
 * slot, patched to the hook: a hook calling itself without end), and the calls the
 * program makes through its PLT and through the taken address, and those libc makes
 * (strdup), are all counted; after the restore, none.
 * Prints its counts and originals_past_plt; exit 0 when every count is right.
 * Context: one thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/alloc/got_patch.h"

#define CALLS 100

int shim_got_patch_apply(struct got_patch_entry *table, size_t n);
int shim_got_patch_restore(void);
void shim_got_patch_get_stats(struct got_patch_stats *out);

static void *orig_malloc, *orig_free;
static long mallocs, frees;
static void *volatile sink;

static void *hook_malloc(size_t n)
{
	mallocs++;
	return ((void *(*)(size_t))orig_malloc)(n);
}

static void hook_free(void *p)
{
	frees++;
	((void (*)(void *))orig_free)(p);
}

/* An absolute address in non-PIC code: the canonical PLT entry. */
__attribute__((noinline)) static void *(*malloc_address(void))(size_t)
{
	return malloc;
}

/* The calls counted: CALLS each through the PLT, the taken address, libc's strdup. */
static void calls(void *(*taken)(size_t))
{
	char *(*volatile dup)(const char *) = strdup;
	for (int i = 0; i < CALLS; i++) {
		sink = malloc(16);
		free(sink);
		sink = taken(16);
		free(sink);
		sink = dup("x");
		free(sink);
	}
}

int main(void)
{
	struct got_patch_entry table[] = {{"malloc", (void *)hook_malloc, &orig_malloc},
					  {"free", (void *)hook_free, &orig_free}};
	void *(*taken)(size_t) = malloc_address();
	int rc = shim_got_patch_apply(table, 2);
	long m0 = mallocs, f0 = frees;
	calls(taken);
	long patched_mallocs = mallocs - m0, patched_frees = frees - f0;
	int restored = shim_got_patch_restore();
	m0 = mallocs;
	f0 = frees;
	calls(taken);
	long restored_calls = mallocs - m0 + frees - f0;
	struct got_patch_stats st;
	shim_got_patch_get_stats(&st);
	printf("apply %d, original %p, canonical entry %p, originals_past_plt %llu, failed_plt "
	       "%llu\n",
	       rc, orig_malloc, (void *)taken, (unsigned long long)st.originals_past_plt,
	       (unsigned long long)st.failed_plt);
	printf("patched: %ld mallocs, %ld frees (expected %d each); restored %d slots, then "
	       "%ld calls (expected 0)\n",
	       patched_mallocs, patched_frees, 3 * CALLS, restored, restored_calls);
	int ok = rc == 0 && orig_malloc && orig_malloc != (void *)taken &&
		 patched_mallocs == 3 * CALLS && patched_frees == 3 * CALLS && restored > 0 &&
		 restored_calls == 0;
	return ok ? 0 : 1;
}
