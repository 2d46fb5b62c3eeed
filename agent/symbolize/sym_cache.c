/*
 * sym_cache.c - per-module pc -> frame list cache (see sym_cache.h).
 *
 * Context: uploader thread. Frame strings point at the module's interned copies
 * (strtab keeps each copy at a stable address until it is freed), so growing the frame
 * array or the string table never moves a string a caller holds.
 */
#include "agent/symbolize/sym_cache.h"
#include "common/big_alloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SYM_CACHE_COUNT_BITS 8 /* frames per entry < 256 (SYM_MAX_FRAMES is far less) */
#define SYM_CACHE_MIN_FRAMES 256

_Static_assert(SYM_MAX_FRAMES < (1 << SYM_CACHE_COUNT_BITS), "frame count must fit its bits");

void sym_cache_init(struct sym_cache *c)
{
	memset(c, 0, sizeof(*c));
	u64map_init(&c->index);
	strtab_init(&c->strings);
}

void sym_cache_free(struct sym_cache *c)
{
	u64map_free(&c->index);
	strtab_free(&c->strings);
	big_free(c->frames);
	sym_cache_init(c);
}

void sym_cache_clear(struct sym_cache *c)
{
	sym_cache_free(c);
}

bool sym_cache_get(const struct sym_cache *c, uint64_t addr, const struct sym_frame **frames,
		   size_t *n)
{
	uint64_t v;
	if (!u64map_get(&c->index, addr + 1, &v))
		return false;
	*n = (size_t)(v & ((1u << SYM_CACHE_COUNT_BITS) - 1));
	*frames = c->frames + (v >> SYM_CACHE_COUNT_BITS);
	return true;
}

/* The interned copy of s (NULL for NULL); *failed is set on allocation failure. */
static const char *intern(struct sym_cache *c, const char *s, bool *failed)
{
	if (!s)
		return NULL;
	int64_t i = strtab_intern(&c->strings, s);
	if (i < 0) {
		*failed = true;
		return NULL;
	}
	return c->strings.strs[i];
}

int sym_cache_put(struct sym_cache *c, uint64_t addr, const struct sym_frame *frames, size_t n,
		  const struct sym_frame **stored)
{
	if (n >= (1u << SYM_CACHE_COUNT_BITS))
		return -EINVAL;
	if (c->nframes + n > c->cap) {
		size_t nc = c->cap ? c->cap * 2 : SYM_CACHE_MIN_FRAMES;
		while (nc < c->nframes + n)
			nc *= 2;
		struct sym_frame *nf = big_realloc(c->frames, nc * sizeof(*nf));
		if (!nf)
			return -ENOMEM;
		c->frames = nf;
		c->cap = nc;
	}
	bool failed = false;
	/* frames is NULL until a first frame is stored (n may be 0: a pc nothing names),
	 * and NULL + 0 is undefined behaviour in C. */
	struct sym_frame *dst = c->frames ? c->frames + c->nframes : NULL;
	for (size_t i = 0; i < n; i++) {
		dst[i].function = intern(c, frames[i].function, &failed);
		dst[i].file = intern(c, frames[i].file, &failed);
		dst[i].line = frames[i].line;
	}
	uint64_t v = ((uint64_t)c->nframes << SYM_CACHE_COUNT_BITS) | n;
	if (failed || u64map_put(&c->index, addr + 1, v) < 0)
		return -ENOMEM; /* interned strings stay: they are counted and freed with c */
	c->nframes += n;
	if (stored)
		*stored = dst;
	return 0;
}

size_t sym_cache_entries(const struct sym_cache *c)
{
	return c->index.len;
}

size_t sym_cache_bytes(const struct sym_cache *c)
{
	const struct strtab *t = &c->strings;
	return c->index.cap * 2 * sizeof(uint64_t) + c->cap * sizeof(c->frames[0]) + t->bytes +
	       t->cap_strs * sizeof(char *) + t->nslots * sizeof(uint32_t);
}
