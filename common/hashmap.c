/*
 * hashmap.c - u64map and strtab (see hashmap.h).
 * Context: uploader thread and tests.
 */
#include "hashmap.h"

#include "common/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HASHMAP_MIN_CAP 64

void u64map_init(struct u64map *m)
{
	memset(m, 0, sizeof(*m));
}

void u64map_free(struct u64map *m)
{
	free(m->keys);
	free(m->vals);
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
		size_t cap = m->cap ? m->cap * 2 : HASHMAP_MIN_CAP;
		uint64_t *k = calloc(cap, sizeof(*k)), *v = calloc(cap, sizeof(*v));
		if (!k || !v) {
			free(k);
			free(v);
			return -ENOMEM;
		}
		for (size_t i = 0; i < m->cap; i++) {
			bool added;
			if (m->keys[i])
				u64map_insert(k, v, cap, m->keys[i], m->vals[i], &added);
		}
		free(m->keys);
		free(m->vals);
		m->keys = k;
		m->vals = v;
		m->cap = cap;
	}
	bool added;
	u64map_insert(m->keys, m->vals, m->cap, key, val, &added);
	m->len += added;
	return 0;
}

static uint64_t str_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
	return hash_mix64(h);
}

void strtab_init(struct strtab *t)
{
	memset(t, 0, sizeof(*t));
}

void strtab_free(struct strtab *t)
{
	for (size_t i = 0; i < t->len; i++)
		free(t->strs[i]);
	free(t->strs);
	free(t->slots);
	strtab_init(t);
}

static int strtab_grow(struct strtab *t)
{
	size_t n = t->nslots ? t->nslots * 2 : HASHMAP_MIN_CAP;
	uint32_t *slots = calloc(n, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i < t->len; i++) {
		size_t j = str_hash(t->strs[i]) & (n - 1);
		while (slots[j])
			j = (j + 1) & (n - 1);
		slots[j] = (uint32_t)i + 1;
	}
	free(t->slots);
	t->slots = slots;
	t->nslots = n;
	return 0;
}

int64_t strtab_intern(struct strtab *t, const char *s)
{
	if ((t->len + 1) * 2 > t->nslots && strtab_grow(t) < 0)
		return -1;
	size_t j = str_hash(s) & (t->nslots - 1);
	while (t->slots[j]) {
		uint32_t idx = t->slots[j] - 1;
		if (strcmp(t->strs[idx], s) == 0)
			return idx;
		j = (j + 1) & (t->nslots - 1);
	}
	if (t->len == t->cap_strs) {
		size_t nc = t->cap_strs ? t->cap_strs * 2 : HASHMAP_MIN_CAP;
		char **ns = realloc(t->strs, nc * sizeof(*ns));
		if (!ns)
			return -1;
		t->strs = ns;
		t->cap_strs = nc;
	}
	char *copy = strdup(s);
	if (!copy)
		return -1;
	t->strs[t->len] = copy;
	t->slots[j] = (uint32_t)t->len + 1;
	t->bytes += strlen(s) + 1;
	return (int64_t)t->len++;
}
