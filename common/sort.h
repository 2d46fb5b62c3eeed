/*
 * sort.h - an in-place sort with qsort's interface that never allocates.
 *
 * Why: glibc's qsort is a merge sort through a buffer it mallocs when the array is over
 * a few KiB; for an array over its mmap threshold (128 KiB: a table of a large
 * library's unwind chunks, a JIT's perf map, libdw's line tables) that buffer is a
 * mapping of its own, and freeing it raises the process's mmap and trim thresholds for
 * good (common/big_alloc.h): the profiler would change how the application's memory is
 * served. This sort is an introsort (quicksort on a median of three, insertion sort on
 * short runs, heapsort past a depth limit): O(n log n) at worst, no recursion deeper
 * than log2(n), no memory but the stack's. Not stable, as qsort is not promised to be.
 * Context: any thread, normal context (the comparator decides the rest).
 */
#ifndef DDPROF_COMMON_SORT_H
#define DDPROF_COMMON_SORT_H

#include <stddef.h>

/* As qsort(base, n, size, cmp). */
void sort_inplace(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));

#endif
