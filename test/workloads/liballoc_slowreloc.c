/*
 * liballoc_slowreloc.c - a library the loader takes long to relocate, for
 * test_got_patch: 4096 exported functions, each called through the PLT (calls to an
 * interposable function of one's own go through it), so with -z now the loader looks
 * up 4096 symbols after writing malloc's GLOB_DAT slot and before it makes the GOT
 * read-only (PT_GNU_RELRO): those JUMP_SLOT slots share malloc's page. A GOT patcher
 * that wrote malloc's slot in that window and made the page read-only again would
 * crash the loader on its next store there; the suite loads and unloads this library
 * in a loop while it patches.
 * Context: the test's threads.
 */
#include <stdlib.h>

int alloc_caller_run(int rounds);
int slow_call_all(void);

/* 16^3 names: X4096(M, ) expands M(000) ... M(fff). */
#define X16(M, p)                                                                                  \
	M(p##0)                                                                                    \
	M(p##1)                                                                                    \
	M(p##2)                                                                                    \
	M(p##3)                                                                                    \
	M(p##4)                                                                                    \
	M(p##5)                                                                                    \
	M(p##6)                                                                                    \
	M(p##7)                                                                                    \
	M(p##8)                                                                                    \
	M(p##9)                                                                                    \
	M(p##a)                                                                                    \
	M(p##b)                                                                                    \
	M(p##c)                                                                                    \
	M(p##d)                                                                                    \
	M(p##e)                                                                                    \
	M(p##f)
#define X256(M, p)                                                                                 \
	X16(M, p##0)                                                                               \
	X16(M, p##1)                                                                               \
	X16(M, p##2)                                                                               \
	X16(M, p##3)                                                                               \
	X16(M, p##4)                                                                               \
	X16(M, p##5)                                                                               \
	X16(M, p##6)                                                                               \
	X16(M, p##7)                                                                               \
	X16(M, p##8)                                                                               \
	X16(M, p##9)                                                                               \
	X16(M, p##a)                                                                               \
	X16(M, p##b)                                                                               \
	X16(M, p##c)                                                                               \
	X16(M, p##d)                                                                               \
	X16(M, p##e)                                                                               \
	X16(M, p##f)
#define X4096(M)                                                                                   \
	X256(M, 0)                                                                                 \
	X256(M, 1)                                                                                 \
	X256(M, 2)                                                                                 \
	X256(M, 3)                                                                                 \
	X256(M, 4)                                                                                 \
	X256(M, 5)                                                                                 \
	X256(M, 6)                                                                                 \
	X256(M, 7)                                                                                 \
	X256(M, 8)                                                                                 \
	X256(M, 9)                                                                                 \
	X256(M, a)                                                                                 \
	X256(M, b)                                                                                 \
	X256(M, c)                                                                                 \
	X256(M, d)                                                                                 \
	X256(M, e)                                                                                 \
	X256(M, f)

#define DEFINE(n)                                                                                  \
	int slow_f##n(void);                                                                       \
	__attribute__((noinline)) int slow_f##n(void)                                              \
	{                                                                                          \
		return 0x##n;                                                                      \
	}
#define CALL(n) +slow_f##n()

X4096(DEFINE)

/* The sum of 0 .. 4095. */
int slow_call_all(void)
{
	return 0 X4096(CALL);
}

int alloc_caller_run(int rounds)
{
	/* volatile: malloc's address read from the GOT (its GLOB_DAT slot). */
	void *(*volatile fn)(size_t) = malloc;
	for (int i = 0; i < rounds; i++) {
		char *p = fn(32);
		if (!p)
			return i + 1;
		p[31] = 1;
		free(p);
	}
	return slow_call_all() == 4096 * 4095 / 2 ? 0 : -1;
}
