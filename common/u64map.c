/*
 * u64map.c - the uint64 -> uint64 table (see u64map.h).
 * Context: uploader thread and tests.
 */
#include "common/u64map.h"

#include "common/big_alloc.h"
#include "common/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define U64MAP_MIN_CAP 64

void u64map_init(struct u64map *m)
{
	memset(m, 0, sizeof(*m));
}

void u64map_free(struct u64map *m)
{
	big_free(m->keys);
	big_free(m->vals);
	u64map_init(m);
}

void u64map_clear(struct u64map *m)
{
	if (m->keys)
		memset(m->keys, 0, m->cap * sizeof(m->keys[0]));
	m->len = 0;
}

bool u64map_get(const struct u64map *m, uint64_t key, uint64_t *val)
{
	if (!m->cap)
		return false;
	for (size_t i = hash_mix64(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key) {
			*val = m->vals[i];
			return true;
		}
		if (m->keys[i] == 0)
			return false;
	}
}

static void u64map_insert(uint64_t *keys, uint64_t *vals, size_t cap, uint64_t key, uint64_t val,
			  bool *added)
{
	for (size_t i = hash_mix64(key) & (cap - 1);; i = (i + 1) & (cap - 1)) {
		if (keys[i] == key || keys[i] == 0) {
			*added = keys[i] == 0;
			keys[i] = key;
			vals[i] = val;
			return;
		}
	}
}

int u64map_put(struct u64map *m, uint64_t key, uint64_t val)
{
	if ((m->len + 1) * 2 > m->cap) {
		size_t cap = m->cap ? m->cap * 2 : U64MAP_MIN_CAP;
		uint64_t *k = big_calloc(cap, sizeof(*k)), *v = big_calloc(cap, sizeof(*v));
		if (!k || !v) {
			big_free(k);
			big_free(v);
			return -ENOMEM;
		}
		for (size_t i = 0; i < m->cap; i++) {
			bool added;
			if (m->keys[i])
				u64map_insert(k, v, cap, m->keys[i], m->vals[i], &added);
		}
		big_free(m->keys);
		big_free(m->vals);
		m->keys = k;
		m->vals = v;
		m->cap = cap;
	}
	bool added;
	u64map_insert(m->keys, m->vals, m->cap, key, val, &added);
	m->len += added;
	return 0;
}
