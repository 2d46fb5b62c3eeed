/*
 * sym_table.c - sorted function symbols with perf's alias preference (see sym_table.h).
 *
 * Context: uploader thread. Names live in one growing buffer and entries refer to them
 * by offset, so growing the buffer never invalidates an entry.
 */
#include "agent/symbolize/sym_table.h"
#include "common/big_alloc.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SYM_TABLE_MIN_CAP 256 /* entries; a small library has about this many */
#define SYM_NAMES_MIN_CAP 4096

void sym_table_init(struct sym_table *t)
{
	memset(t, 0, sizeof(*t));
}

void sym_table_free(struct sym_table *t)
{
	big_free(t->syms);
	big_free(t->names);
	sym_table_init(t);
}

int sym_table_add(struct sym_table *t, uint64_t addr, uint64_t size, const char *name, bool global)
{
	if (addr == 0 || !name || !name[0])
		return 0;
	size_t len = strcspn(name, "@"); /* version suffix dropped */
	if (len == 0)
		return 0;
	if (t->nsyms == t->cap) {
		size_t nc = t->cap ? t->cap * 2 : SYM_TABLE_MIN_CAP;
		struct sym_entry *ns = big_realloc(t->syms, nc * sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		t->syms = ns;
		t->cap = nc;
	}
	if (t->names_len + len + 1 > t->names_cap) {
		size_t nc = t->names_cap ? t->names_cap * 2 : SYM_NAMES_MIN_CAP;
		while (nc < t->names_len + len + 1)
			nc *= 2;
		if (nc > UINT32_MAX)
			return -ENOMEM; /* offsets are 32-bit: 4 GiB of names is not a real module
					 */
		char *nn = big_realloc(t->names, nc);
		if (!nn)
			return -ENOMEM;
		t->names = nn;
		t->names_cap = nc;
	}
	memcpy(t->names + t->names_len, name, len);
	t->names[t->names_len + len] = '\0';
	t->syms[t->nsyms++] = (struct sym_entry){
	    .addr = addr,
	    .size = size,
	    .name = (uint32_t)t->names_len,
	    .global = global,
	};
	t->names_len += len + 1;
	return 0;
}

static size_t leading_underscores(const char *s)
{
	size_t n = 0;
	while (s[n] == '_')
		n++;
	return n;
}

/* Address order; at one address the preferred alias first (see sym_table.h). */
int sym_table_alias_cmp(uint64_t xsize, bool xglobal, const char *xn, size_t xlen, uint64_t ysize,
			bool yglobal, const char *yn, size_t ylen)
{
	if ((xsize != 0) != (ysize != 0))
		return xsize != 0 ? -1 : 1;
	if (xglobal != yglobal)
		return xglobal ? -1 : 1;
	size_t xu = leading_underscores(xn), yu = leading_underscores(yn);
	if (xu != yu)
		return xu < yu ? -1 : 1;
	if (xlen != ylen)
		return xlen < ylen ? -1 : 1;
	int c = strncmp(xn, yn, xlen);
	if (c != 0)
		return c;
	return (xsize > ysize) ? -1 : (xsize < ysize);
}

static int sym_cmp(const void *a, const void *b, void *names_arg)
{
	const struct sym_entry *x = a, *y = b;
	const char *names = names_arg;
	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	const char *xn = names + x->name, *yn = names + y->name;
	return sym_table_alias_cmp(x->size, x->global, xn, strlen(xn), y->size, y->global, yn,
				   strlen(yn));
}

static inline void swap_entries(struct sym_entry *a, struct sym_entry *b)
{
	struct sym_entry t = *a;
	*a = *b;
	*b = t;
}

static void insertion_sort(struct sym_entry *s, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		struct sym_entry x = s[i];
		size_t j = i;
		for (; j > 0 && s[j - 1].addr > x.addr; j--)
			s[j] = s[j - 1];
		s[j] = x;
	}
}

static void sift_down(struct sym_entry *s, size_t root, size_t n)
{
	for (size_t child; (child = 2 * root + 1) < n; root = child) {
		if (child + 1 < n && s[child + 1].addr > s[child].addr)
			child++;
		if (s[root].addr >= s[child].addr)
			return;
		swap_entries(&s[root], &s[child]);
	}
}

static void heap_sort(struct sym_entry *s, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift_down(s, i, n);
	for (size_t end = n; end-- > 1;) {
		swap_entries(&s[0], &s[end]);
		sift_down(s, 0, end);
	}
}

/* Address order only. An introsort: quicksort (median of three, Hoare's partition, which
 * splits runs of equal addresses evenly), heapsort past `depth` levels, so that a crafted
 * symbol table cannot make it quadratic, insertion sort below 16 entries. */
static void sort_by_addr(struct sym_entry *s, size_t n, unsigned depth)
{
	while (n > 16) {
		if (depth-- == 0) {
			heap_sort(s, n);
			return;
		}
		size_t mid = n / 2;
		if (s[mid].addr < s[0].addr)
			swap_entries(&s[mid], &s[0]);
		if (s[n - 1].addr < s[0].addr)
			swap_entries(&s[n - 1], &s[0]);
		if (s[n - 1].addr < s[mid].addr)
			swap_entries(&s[n - 1], &s[mid]);
		uint64_t pivot = s[mid].addr;
		/* s[0] <= pivot <= s[n - 1] bound both scans; the split lands in [1, n - 1]. */
		ptrdiff_t i = -1, j = (ptrdiff_t)n;
		for (;;) {
			do
				i++;
			while (s[i].addr < pivot);
			do
				j--;
			while (s[j].addr > pivot);
			if (i >= j)
				break;
			swap_entries(&s[i], &s[j]);
		}
		size_t left = (size_t)j + 1; /* [0, left) <= pivot <= [left, n) */
		if (left < n - left) {
			sort_by_addr(s, left, depth);
			s += left;
			n -= left;
		} else {
			sort_by_addr(s + left, n - left, depth);
			n = left;
		}
	}
	insertion_sort(s, n);
}

/* Sorted by address, then one entry per address: the alias sym_cmp prefers. Not qsort_r
 * on sym_cmp: glibc's merge sort moves the entries through an indirect comparator and a
 * malloc'd buffer, slow on a table as large as libc's with its debug file installed, a
 * cost paid again by the exit flush of every short-lived process that was sampled. */
void sym_table_finish(struct sym_table *t)
{
	if (t->nsyms == 0)
		return;
	unsigned depth = 0;
	for (size_t n = t->nsyms; n > 1; n >>= 1)
		depth += 2;
	sort_by_addr(t->syms, t->nsyms, depth);
	size_t w = 0;
	for (size_t i = 0; i < t->nsyms;) {
		size_t best = i, k = i + 1;
		for (; k < t->nsyms && t->syms[k].addr == t->syms[i].addr; k++)
			if (sym_cmp(&t->syms[k], &t->syms[best], t->names) < 0)
				best = k;
		t->syms[w++] = t->syms[best];
		i = k;
	}
	t->nsyms = w;
}

const struct sym_entry *sym_table_find(const struct sym_table *t, uint64_t vaddr)
{
	size_t lo = 0, hi = t->nsyms;
	while (lo < hi) { /* first symbol above vaddr */
		size_t mid = lo + (hi - lo) / 2;
		if (t->syms[mid].addr <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct sym_entry *e = &t->syms[lo - 1];
	if (e->size != 0 && vaddr - e->addr >= e->size)
		return NULL;
	return e;
}

size_t sym_table_bytes(const struct sym_table *t)
{
	return t->cap * sizeof(t->syms[0]) + t->names_cap;
}
