/*
 * strtab.c - the string interning table (see strtab.h).
 * Context: uploader thread and tests.
 */
#include "common/strtab.h"

#include "common/big_alloc.h"
#include "common/hash.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define STRTAB_MIN_CAP 64

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
	big_free(t->strs);
	big_free(t->slots);
	strtab_init(t);
}

static int strtab_grow(struct strtab *t)
{
	size_t n = t->nslots ? t->nslots * 2 : STRTAB_MIN_CAP;
	uint32_t *slots = big_calloc(n, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i < t->len; i++) {
		size_t j = str_hash(t->strs[i]) & (n - 1);
		while (slots[j])
			j = (j + 1) & (n - 1);
		slots[j] = (uint32_t)i + 1;
	}
	big_free(t->slots);
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
		size_t nc = t->cap_strs ? t->cap_strs * 2 : STRTAB_MIN_CAP;
		char **ns = big_realloc(t->strs, nc * sizeof(*ns));
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
