/*
 * liballoc_plugin.c - a library alloc_sites loads with dlopen after start-up: its
 * allocations must be profiled like the program's. Frame pointers kept (the stack
 * through it is checked), no sibling calls (plugin_alloc stays on the stack).
 * Context: the workload's main thread.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

uint64_t plugin_alloc(uint64_t total, size_t block);

static volatile char sink;

uint64_t plugin_alloc(uint64_t total, size_t block)
{
	uint64_t done = 0;
	for (; done < total; done += block) {
		char *p = malloc(block);
		p[0] = 1;
		sink += p[block - 1];
		free(p);
	}
	return done;
}
