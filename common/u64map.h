/*
 * u64map.h - a small open-addressing hash table: uint64 key -> uint64 value (key 0 is
 * reserved as "empty"). Linear probing, power-of-two capacity, grown at 50% load, no
 * deletion.
 * Context: uploader thread and tests (malloc); never a signal handler.
 */
#ifndef DDPROF_COMMON_U64MAP_H
#define DDPROF_COMMON_U64MAP_H

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

#endif
