/*
 * fork_child.c - the measure of the fork child's data section (see fork_child.h).
 * Context: any.
 */
#include "common/fork_child.h"

/* Bounds of the FORK_CHILD_DATA section, placed by common/fork_child.ld. */
extern char __start_ddprof_fork_data[], __stop_ddprof_fork_data[];

unsigned long fork_child_data_bytes(void)
{
	return (unsigned long)(__stop_ddprof_fork_data - __start_ddprof_fork_data);
}
