/*
 * hashmap.h - two small open-addressing hash tables for serialization.
 *
 *  - u64map: uint64 key -> uint64 value (key 0 is reserved as "empty").
 *  - strtab: interns strings, giving each a dense index 0, 1, 2... in first-seen order
 *    (exactly what a pprof string table needs: intern "" first to get index 0).
 * Linear probing, power-of-two capacity, grown at 50% load. No deletion.
 * Context: uploader thread and tests (malloc); never a signal handler.
 */
#ifndef DDPROF_COMMON_HASHMAP_H
#define DDPROF_COMMON_HASHMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct u64map {
	uint64_t *keys;
	uint64_t *vals;
	size_t cap, len;
};

void u64map_init(struct u64map *m);
void u64map_free(struct u64map *m);
void u64map_clear(struct u64map *m);
/* Value of key, or false when absent. key must not be 0. */
bool u64map_get(const struct u64map *m, uint64_t key, uint64_t *val);
/* Sets key to val. 0 or -ENOMEM. key must not be 0. */
int u64map_put(struct u64map *m, uint64_t key, uint64_t val);

struct strtab {
	char **strs; /* owned copies, in index order */
	size_t len, cap_strs;
	uint32_t *slots; /* index + 1, 0 = empty */
	size_t nslots;
	size_t bytes;
};

void strtab_init(struct strtab *t);
void strtab_free(struct strtab *t);
/* Index of s, interning it if new; -1 on allocation failure. */
int64_t strtab_intern(struct strtab *t, const char *s);

#endif
