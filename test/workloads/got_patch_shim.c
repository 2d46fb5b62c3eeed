/*
 * got_patch_shim.c - agent/alloc/got_patch.c in a shared library of its own, for
 * alloc_nopie: the patcher never patches the module holding its code, and what
 * alloc_nopie checks is its own program's slots.
 * Context: alloc_nopie's main thread.
 */
#include "agent/alloc/got_patch.h"

#define SHIM_EXPORT __attribute__((visibility("default")))

SHIM_EXPORT int shim_got_patch_apply(struct got_patch_entry *table, size_t n);
SHIM_EXPORT int shim_got_patch_restore(void);
SHIM_EXPORT void shim_got_patch_get_stats(struct got_patch_stats *out);

int shim_got_patch_apply(struct got_patch_entry *table, size_t n)
{
	return got_patch_apply(table, n);
}

int shim_got_patch_restore(void)
{
	return got_patch_restore();
}

void shim_got_patch_get_stats(struct got_patch_stats *out)
{
	got_patch_get_stats(out);
}
