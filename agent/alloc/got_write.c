/*
 * got_write.c - GOT slot stores around RELRO (see got_write.h).
 * Context: normal context, any thread.
 */
#include "agent/alloc/got_write.h"

#include <stdatomic.h>
#include <sys/mman.h>

#include "common/page_size.h"

static uintptr_t page_down(uintptr_t a)
{
	return a & ~(uintptr_t)(page_size() - 1);
}

/* A slot is plain memory the loader wrote; viewed as _Atomic it is read and written
 * with one 8-byte access (aligned: got_image_find_slots checks), as the loader's own
 * store was. */
uintptr_t got_write_load(uintptr_t addr)
{
	return atomic_load_explicit((_Atomic uintptr_t *)addr, memory_order_relaxed);
}

/* Release: what the new target reads (a hook's pointer to the function it calls) is
 * stored before; a thread that calls through the slot and then reads it must see it
 * set. The calling side is the PLT's indirect jump (or a `call *slot`), a plain load
 * followed by a dependent one: x86-64 does not reorder loads with older loads, and
 * orders a release store after earlier stores. */
static void store_slot(uintptr_t addr, uintptr_t value)
{
	atomic_store_explicit((_Atomic uintptr_t *)addr, value, memory_order_release);
}

size_t got_write_slots(const struct got_image *d, struct got_write *w, size_t n,
		       uint64_t *mprotect_failures)
{
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	for (size_t i = 0; i < n; i++) {
		if (got_image_in_relro(d, w[i].addr)) {
			uintptr_t page = page_down(w[i].addr);
			lo = page < lo ? page : lo;
			hi = page + page_size() > hi ? page + page_size() : hi;
		}
	}
	bool opened = lo < hi && mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) == 0;
	size_t written = 0;
	for (size_t i = 0; i < n; i++) {
		w[i].done = false;
		if (got_image_in_relro(d, w[i].addr) && !opened) {
			(*mprotect_failures)++;
			continue;
		}
		store_slot(w[i].addr, w[i].value);
		w[i].done = true;
		written++;
	}
	/* Failing, the pages stay writable: the slots work, the module loses its RELRO
	 * hardening only (counted). */
	if (opened && mprotect((void *)lo, hi - lo, PROT_READ) != 0)
		(*mprotect_failures)++;
	return written;
}
