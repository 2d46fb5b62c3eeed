/*
 * page_size.h - the system's page size, without a call into libc.
 *
 * Owns: page_size(), nothing else. On x86-64 Linux base pages are 4 KiB, fixed by the
 * architecture; libc's sysconf sits on code and data pages of its own, and at start-up
 * each page touched costs a process a page fault. Elsewhere: sysconf.
 * Context: any, including signal handlers (a constant; sysconf(_SC_PAGESIZE) reads
 * a value fixed at start-up).
 */
#ifndef DDPROF_COMMON_PAGE_SIZE_H
#define DDPROF_COMMON_PAGE_SIZE_H

#include <stddef.h>
#include <unistd.h>

/* async-signal-safe */
static inline size_t page_size(void)
{
#if defined(__x86_64__)
	return 4096;
#else
	return (size_t)sysconf(_SC_PAGESIZE);
#endif
}

#endif
