/*
 * liballoc_caller.c - a library calling every allocation function through its own GOT,
 * for test_got_patch. Built three times: with lazy binding (partial RELRO: its PLT slots
 * writable, its GLOB_DAT slot on a read-only page), with full RELRO (every slot
 * read-only after relocation), and a second full-RELRO copy the test loads after its
 * first patch. Calls go through the PLT (R_X86_64_JUMP_SLOT), and malloc once more
 * through a pointer the code loads from the GOT (R_X86_64_GLOB_DAT); then the linker
 * sends malloc's PLT calls through that GOT slot too (one slot per symbol). The late
 * copy is built with ALLOC_CALLER_PLT_ONLY, without that pointer: its malloc calls use
 * a JUMP_SLOT of their own.
 * Built with -fno-optimize-sibling-calls: a tail call would return to the test rather
 * than here, and the test counts calls by their return address.
 * Context: the test's threads.
 */
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int alloc_caller_run(int rounds);
#ifndef ALLOC_CALLER_PLT_ONLY
int alloc_caller_via_pointer(int calls);
#endif

#define ALIGN 64

static int aligned(const void *p, uintptr_t a)
{
	return p && (uintptr_t)p % a == 0;
}

/* One round: each of the ten functions once, free eight times. 0 when every result was
 * usable memory with the promised alignment and realloc kept the contents. */
static int round_ok(int i)
{
	int ok = 1;
	unsigned char *p = malloc(64);
	unsigned char *q = calloc(4, 16);
	ok &= p && q;
	if (ok) {
		memset(p, i & 0xff, 64);
		for (int k = 0; k < 64; k++)
			ok &= q[k] == 0;
		memset(q, 0x5a, 64);
	}
	unsigned char *q2 = realloc(q, 4096);
	ok &= q2 != NULL;
	if (q2) {
		q = q2;
		for (int k = 0; k < 64; k++)
			ok &= q[k] == 0x5a;
		q[4095] = 1;
	}
	unsigned char *r = reallocarray(NULL, 8, 16);
	void *a = NULL;
	ok &= r != NULL && posix_memalign(&a, ALIGN, 128) == 0 && aligned(a, ALIGN);
	void *b = aligned_alloc(ALIGN, 128);
	void *c = memalign(ALIGN, 128);
	void *v = valloc(100);
	void *pv = pvalloc(100);
	ok &= aligned(b, ALIGN) && aligned(c, ALIGN) && aligned(v, 4096) && aligned(pv, 4096);
	if (ok) {
		memset(r, 1, 128);
		memset(a, 2, 128);
		memset(b, 3, 128);
		memset(c, 4, 128);
		memset(v, 5, 100);
		memset(pv, 6, 4096);
		ok &= p[63] == (i & 0xff);
	}
	free(p);
	free(q);
	free(r);
	free(a);
	free(b);
	free(c);
	free(v);
	free(pv);
	return ok;
}

int alloc_caller_run(int rounds)
{
	for (int i = 0; i < rounds; i++)
		if (!round_ok(i))
			return i + 1;
	return 0;
}

#ifndef ALLOC_CALLER_PLT_ONLY
int alloc_caller_via_pointer(int calls)
{
	/* volatile: the pointer is read from the GOT here, not folded into a PLT call. */
	void *(*volatile fn)(size_t) = malloc;
	for (int i = 0; i < calls; i++) {
		char *p = fn(32);
		if (!p)
			return i + 1;
		p[31] = 1;
		free(p);
	}
	return 0;
}
#endif
