/*
 * hook_set.c - a table of GOT hooks kept applied (see hook_set.h).
 * Normal context: start-up, the dlopen and dlclose wrappers, the host thread.
 */
#include "agent/alloc/hook_set.h"

#include <errno.h>

#include "common/dl_guard.h"

int hook_set_install(struct hook_set *h, struct got_patch_entry *table, size_t n)
{
	h->table = table;
	h->n = n;
	int rc = got_patch_apply(h->table, h->n);
	if (rc == -EAGAIN)
		rc = 0; /* what was being loaded is patched by the service's next rescan */
	if (rc == 0)
		atomic_store_explicit(&h->installed, true, memory_order_relaxed);
	return rc;
}

void hook_set_notify(struct hook_set *h)
{
	if (atomic_load_explicit(&h->installed, memory_order_relaxed))
		atomic_store_explicit(&h->notified, true, memory_order_relaxed);
}

bool hook_set_rescan_wanted(const struct hook_set *h)
{
	return atomic_load_explicit(&h->notified, memory_order_relaxed) ||
	       (atomic_load_explicit(&h->installed, memory_order_relaxed) &&
		dl_guard_loads() != h->own_loads_seen);
}

uint64_t hook_set_service(struct hook_set *h, uint64_t now_ns)
{
	if (!atomic_load_explicit(&h->installed, memory_order_relaxed))
		return UINT64_MAX;
	if (atomic_exchange_explicit(&h->notified, false, memory_order_relaxed))
		h->rescans_left = HOOK_SET_POLLS;
	/* dl_guard_dlopen returned: those modules are complete. */
	h->own_loads_seen = dl_guard_loads();
	got_patch_apply(h->table, h->n); /* returns at once when nothing changed */
	if (h->rescans_left > 0) {
		h->rescans_left--;
		return now_ns + HOOK_SET_POLL_NS;
	}
	return now_ns + HOOK_SET_PERIOD_NS;
}
