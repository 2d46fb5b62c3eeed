/*
 * strtab.h - interns strings, giving each a dense index 0, 1, 2... in first-seen order
 * (exactly what a pprof string table needs: intern "" first to get index 0). An
 * open-addressing table of indexes, linear probing, grown at 50% load, no deletion.
 * Context: uploader thread and tests (malloc); never a signal handler.
 */
#ifndef DDPROF_COMMON_STRTAB_H
#define DDPROF_COMMON_STRTAB_H

#include <stddef.h>
#include <stdint.h>

struct strtab {
	char **strs; /* owned copies, in index order */
	size_t len, cap_strs;
	uint32_t *slots; /* index + 1, 0 = empty */
	size_t nslots;
	size_t bytes;
};

void strtab_init(struct strtab *t);
void strtab_free(struct strtab *t);
/* Index of s, interning it if new; -1 on allocation failure. */
int64_t strtab_intern(struct strtab *t, const char *s);

#endif
