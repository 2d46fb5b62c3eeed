/*
 * entry_points.h - libc's blocking calls, interposed (see entry_points.c).
 * Context: entry_points_init from the constructor.
 */
#ifndef DDPROF_PRELOAD_ENTRY_POINTS_H
#define DDPROF_PRELOAD_ENTRY_POINTS_H

/* Resolves the next definition of every interposed call. Normal context, once. */
void entry_points_init(void);

#endif
