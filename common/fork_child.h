/*
 * fork_child.h - where the code and data a fork child runs on are linked.
 *
 * Owns: two section attributes, and the measure of the data section they fill.
 * A fork child pays for each page of ours it touches, so its path is packed on as few
 * pages as possible: see agent/sample/fork_local.h for the fork-local page that goes with it.
 * Context: any.
 */
#ifndef DDPROF_COMMON_FORK_CHILD_H
#define DDPROF_COMMON_FORK_CHILD_H

/*
 * On the definition of every function a fork child runs in its fork handler and at its
 * exit: they are linked next to each other. A child does not inherit the page tables of
 * the parent's code (file-backed, they are faulted in again on first use), so code the
 * child runs costs it a page fault per page touched; spread over the library, that
 * path would touch several pages, grouped it fits on one or two. ".text.hot.*" is
 * placed together, ahead of the rest of .text, by the default linker script.
 */
#define FORK_CHILD_PATH __attribute__((section(".text.hot.ddprof_fork")))

/*
 * On the definition of every variable a fork child writes in its fork handlers (state
 * it must see re-initialized) or reads on its common path (fork handlers, exit: the
 * pointers and settings fixed at start-up): they are linked together on one
 * page-aligned page of their own, the only page of our .data and .bss such a child
 * touches. The first touch of a page by a new process costs a page fault even for a
 * read (dearer under a hypervisor that keeps shadow page tables: it fills in its own
 * too), and a write copies the page on top. Only for what the parent writes rarely
 * (start-up, thread starts, module refreshes, uploads): what it writes at every sample
 * goes on the fork-local page (fork_local_alloc), where the parent never faults. A
 * test checks the section stays within one page, and .bss starts on the next one
 * (test/unit/test_fork_local.c).
 */
#define FORK_CHILD_DATA __attribute__((section("ddprof_fork_data")))

/* Bytes the FORK_CHILD_DATA variables take (at most a page: test_fork_local). */
unsigned long fork_child_data_bytes(void);

#endif
