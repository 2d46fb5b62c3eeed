/*
 * sym_table.h - the function symbols of one module, sorted for address lookups.
 *
 * Owns: a sorted array of (address, size, name) built once per module from its symbol
 * tables (libdwfl's view, which includes separate debug files, or libelf's .symtab and
 * .dynsym), then read with a binary search: O(log n) per lookup, where libdwfl's own
 * dwfl_module_addrinfo scans every symbol (slow on a module with many, such as libc
 * with its debug symbols).
 *  - One name per address. Aliases are resolved much as perf does, so a function has
 *    the name people know: sized symbols before sizeless ones, global and weak (one
 *    rank, unlike perf) before local, then the fewest leading underscores, then the
 *    shortest name, then byte order (deterministic). E.g. glibc's clone3 over
 *    __clone3, clone over __clone, __libc_start_main over __libc_start_main_impl.
 *  - Symbol versions are dropped from names ("pthread_create@@GLIBC_2.34" ->
 *    "pthread_create").
 *  - Not a general symbol table: functions only, no removal, no nesting (a symbol
 *    inside another one's range hides the outer one from the addresses after it).
 * Context: uploader thread only (and unit tests); malloc.
 */
#ifndef DDPROF_AGENT_SYM_TABLE_H
#define DDPROF_AGENT_SYM_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sym_entry {
	uint64_t addr;	/* file virtual address */
	uint64_t size;	/* 0: sizeless (hand-written assembly without .size) */
	uint32_t name;	/* offset into the table's names */
	uint8_t global; /* STB_GLOBAL or STB_WEAK */
};

struct sym_table {
	struct sym_entry *syms;
	size_t nsyms, cap;
	char *names;
	size_t names_len, names_cap;
};

void sym_table_init(struct sym_table *t);
void sym_table_free(struct sym_table *t);

/* Adds one function symbol; its name is copied without the version suffix.
 * 0 or -ENOMEM. Symbols at address 0 or without a name are ignored. */
int sym_table_add(struct sym_table *t, uint64_t addr, uint64_t size, const char *name, bool global);

/* The alias rule between two symbols at one address (names without version suffix,
 * of xlen and ylen bytes): < 0 when x is preferred. */
int sym_table_alias_cmp(uint64_t xsize, bool xglobal, const char *xn, size_t xlen, uint64_t ysize,
			bool yglobal, const char *yn, size_t ylen);

/* Sorts and keeps one symbol per address (see the alias rule above). Call once after
 * the last add and before any lookup. */
void sym_table_finish(struct sym_table *t);

/*
 * The symbol covering vaddr: the last one at or below it, if vaddr is inside its size,
 * or if it is sizeless. NULL otherwise (gaps: PLT stubs, padding, stripped functions).
 */
const struct sym_entry *sym_table_find(const struct sym_table *t, uint64_t vaddr);

static inline const char *sym_table_name(const struct sym_table *t, const struct sym_entry *e)
{
	return t->names + e->name;
}

/* Heap bytes held. */
size_t sym_table_bytes(const struct sym_table *t);

#endif
