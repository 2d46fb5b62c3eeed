/*
 * stop_at_exit.c - built as libstop_at_exit.so. Preloaded AFTER libddprof.so, its
 * constructor runs before the agent's, so its destructor runs after the agent's: a fork
 * child whose parent set STOP_CHILD_AT_EXIT stops itself there (SIGSTOP), once the
 * agent's fork handlers and exit path have run, for its parent to read its
 * /proc/PID/smaps (what the child touched), then goes on exiting on SIGCONT.
 */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static pid_t first_pid;

__attribute__((constructor)) static void note_pid(void)
{
	first_pid = getpid();
}

__attribute__((destructor)) static void stop_child(void)
{
	if (getpid() != first_pid && getenv("STOP_CHILD_AT_EXIT"))
		raise(SIGSTOP);
}
