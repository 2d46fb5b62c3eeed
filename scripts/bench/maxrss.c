/*
 * maxrss.c - the peak RSS of one program, measured from a small parent.
 *
 * Linux carries a process's peak RSS across exec (the peak of the address space it
 * replaced counts), so a program started straight from the Python runner would report
 * the runner's own peak when its own is smaller. This launcher forks (the child starts
 * with a fresh peak and the launcher's few pages), execs the program there, waits for it
 * and reports the child's ru_maxrss: the program's peak from start to exit, exit
 * handlers included (for a profiler: its final flush).
 *
 * The profiler to measure is passed in BENCH_PRELOAD, not LD_PRELOAD, so that it is
 * loaded into the program only (set as LD_PRELOAD just before the exec), not into this
 * launcher (where it would run, and write a profile of its own at exit).
 *
 * usage: BENCH_PRELOAD=LIB maxrss PROGRAM [ARGS...]
 * The program's stdout passes through; then prints "child_maxrss_kib N". Exit status:
 * the program's, or 128 + the signal that killed it (as a shell reports it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: maxrss PROGRAM [ARGS...]\n");
		return 2;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		const char *preload = getenv("BENCH_PRELOAD");
		if (preload)
			setenv("LD_PRELOAD", preload, 1);
		execvp(argv[1], argv + 1);
		perror("execvp");
		_exit(127);
	}
	int status;
	struct rusage ru;
	if (wait4(pid, &status, 0, &ru) != pid) {
		perror("wait4");
		return 1;
	}
	printf("child_maxrss_kib %ld\n", ru.ru_maxrss);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
