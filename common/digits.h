/*
 * digits.h - the decimal number at the start of a string, without strtol.
 *
 * Owns: one inline helper for the constructor's few number reads (/proc fields, the
 * kernel and glibc versions, thread ids). strtol/atoi read glibc's locale tables:
 * pages that a process which never parses a number would not touch, each a page fault
 * at start-up.
 * Context: any, including async-signal context (no state, no calls).
 */
#ifndef DDPROF_COMMON_DIGITS_H
#define DDPROF_COMMON_DIGITS_H

/* Skips blanks (space, tab), then reads decimal digits; *end (if end) is the first
 * character after them. Values past 10^9 stop growing (no caller reads such numbers). */
static inline unsigned digits_value(const char *s, const char **end)
{
	while (*s == ' ' || *s == '\t')
		s++;
	unsigned v = 0;
	for (; *s >= '0' && *s <= '9'; s++)
		if (v < 100000000u)
			v = v * 10 + (unsigned)(*s - '0');
	if (end)
		*end = s;
	return v;
}

#endif
