/*
 * hash.h - the 64-bit mixer shared by the stack trie and the hash tables.
 * Context: any, including signal handlers (pure arithmetic, async-signal-safe).
 */
#ifndef DDPROF_COMMON_HASH_H
#define DDPROF_COMMON_HASH_H

#include <stdint.h>

/* async-signal-safe. The finalizer of splitmix64: every input bit flips about half of
 * the output bits. */
static inline uint64_t hash_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

#endif
