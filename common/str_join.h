/*
 * str_join.h - concatenation into a fixed buffer, without snprintf.
 *
 * Owns: str_join(), nothing else. snprintf's code is several pages of libc that a
 * process which never formats would not touch; at start-up each costs a page fault, so
 * the constructor's paths (config, exporters) join strings with this.
 * Context: any (no allocation, no locks).
 */
#ifndef DDPROF_COMMON_STR_JOIN_H
#define DDPROF_COMMON_STR_JOIN_H

#include <stdbool.h>
#include <stddef.h>

/* dst = the parts, in order, NUL-terminated within cap bytes (cap > 0). false when they
 * did not fit: dst then holds what did. */
static inline bool str_join(char *dst, size_t cap, const char *const *parts, size_t n)
{
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		for (const char *c = parts[i]; *c; c++) {
			if (w + 1 >= cap) {
				dst[w] = '\0';
				return false;
			}
			dst[w++] = *c;
		}
	}
	dst[w] = '\0';
	return true;
}

#endif
