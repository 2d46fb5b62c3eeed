/*
 * sort.c - introsort without allocation (see sort.h).
 * Context: any thread, normal context.
 */
#include "common/sort.h"

#include <stdint.h>
#include <string.h>

typedef int (*cmp_fn)(const void *, const void *);

/* Runs this short are finished by insertion sort. */
#define INSERTION_MAX 12

static inline char *at(char *base, size_t i, size_t size)
{
	return base + i * size;
}

static void swap(char *a, char *b, size_t size)
{
	if (a == b)
		return;
	/* Word by word when the elements allow it (pointers, most structs). */
	if (size % sizeof(uint64_t) == 0 && ((uintptr_t)a | (uintptr_t)b) % sizeof(uint64_t) == 0) {
		for (size_t i = 0; i < size; i += sizeof(uint64_t)) {
			uint64_t t;
			memcpy(&t, a + i, sizeof(t));
			memcpy(a + i, b + i, sizeof(t));
			memcpy(b + i, &t, sizeof(t));
		}
		return;
	}
	while (size > 0) {
		char t[64];
		size_t k = size < sizeof(t) ? size : sizeof(t);
		memcpy(t, a, k);
		memcpy(a, b, k);
		memcpy(b, t, k);
		a += k;
		b += k;
		size -= k;
	}
}

static void insertion_sort(char *base, size_t n, size_t size, cmp_fn cmp)
{
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && cmp(at(base, j - 1, size), at(base, j, size)) > 0; j--)
			swap(at(base, j - 1, size), at(base, j, size), size);
}

static void sift_down(char *base, size_t root, size_t n, size_t size, cmp_fn cmp)
{
	for (;;) {
		size_t child = 2 * root + 1;
		if (child >= n)
			return;
		if (child + 1 < n && cmp(at(base, child, size), at(base, child + 1, size)) < 0)
			child++;
		if (cmp(at(base, root, size), at(base, child, size)) >= 0)
			return;
		swap(at(base, root, size), at(base, child, size), size);
		root = child;
	}
}

static void heap_sort(char *base, size_t n, size_t size, cmp_fn cmp)
{
	for (size_t i = n / 2; i-- > 0;)
		sift_down(base, i, n, size, cmp);
	for (size_t end = n; end-- > 1;) {
		swap(base, at(base, end, size), size);
		sift_down(base, 0, end, size, cmp);
	}
}

static void intro_sort(char *base, size_t n, size_t size, cmp_fn cmp, unsigned depth)
{
	while (n > INSERTION_MAX) {
		if (depth-- == 0) {
			heap_sort(base, n, size, cmp);
			return;
		}
		/* Median of three into place 0 <= mid <= n - 1, the pivot moved to the front;
		 * the scans below stop at the pivot's equals, which spreads runs of equal
		 * elements over both sides. */
		char *lo = base, *mid = at(base, n / 2, size), *hi = at(base, n - 1, size);
		if (cmp(mid, lo) < 0)
			swap(mid, lo, size);
		if (cmp(hi, lo) < 0)
			swap(hi, lo, size);
		if (cmp(hi, mid) < 0)
			swap(hi, mid, size);
		swap(lo, mid, size); /* pivot at 0; hi >= pivot bounds the left scan */
		size_t i = 0, j = n;
		for (;;) {
			do
				i++;
			while (i < n && cmp(at(base, i, size), base) < 0);
			do
				j--;
			while (cmp(at(base, j, size), base) > 0);
			if (i >= j)
				break;
			swap(at(base, i, size), at(base, j, size), size);
		}
		swap(base, at(base, j, size), size); /* pivot at j: [0, j) <= it <= (j, n) */
		size_t left = j, right = n - j - 1;
		/* The smaller side by recursion (at most log2(n) deep), the larger by the loop. */
		if (left < right) {
			intro_sort(base, left, size, cmp, depth);
			base = at(base, j + 1, size);
			n = right;
		} else {
			intro_sort(at(base, j + 1, size), right, size, cmp, depth);
			n = left;
		}
	}
	insertion_sort(base, n, size, cmp);
}

void sort_inplace(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
	if (n < 2 || size == 0)
		return;
	unsigned depth = 0;
	for (size_t k = n; k > 1; k >>= 1)
		depth += 2;
	intro_sort(base, n, size, cmp, depth);
}
