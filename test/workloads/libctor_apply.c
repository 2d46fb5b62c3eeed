/*
 * libctor_apply.c - a library whose constructor calls back into the test that loads
 * it, for test_got_patch: the callback runs while the loader holds its dlopen lock, as
 * a patch does when the preload layer's dlopen hook makes it for a dlopen that a
 * library constructor called. The test passes the callback's address in
 * GOT_PATCH_TEST_CTOR (hexadecimal).
 * Context: the loader, on the test's thread that calls dlopen.
 */
#include <stdint.h>
#include <stdlib.h>

__attribute__((constructor)) static void call_back(void)
{
	const char *s = getenv("GOT_PATCH_TEST_CTOR");
	if (s)
		((void (*)(void))(uintptr_t)strtoull(s, NULL, 16))();
}
