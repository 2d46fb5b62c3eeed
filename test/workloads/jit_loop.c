/*
 * jit_loop.c - a JIT of our own: x86-64 machine code written at run time into anonymous
 * memory, named in /tmp/perf-<pid>.map, and run in a hot loop.
 *
 * Two generated functions, both with frame-pointer prologues (push rbp; mov rbp, rsp):
 *   jit_outer(a, b): a turns of a countdown loop, then calls jit_inner(b)
 *   jit_inner(b):    b turns of the same loop
 * run_jit (C) calls jit_outer(OUTER_TURNS, INNER_TURNS) until the CPU time is spent, so
 * 25% of the CPU is jit_outer's own and 75% jit_inner's, and every JIT stack is
 * jit_inner <- jit_outer <- run_jit <- main.
 * The memory is mapped read-write, written, then made read-execute (W^X, as JITs do).
 *
 * usage: jit_loop SECONDS [MODE]
 *   good     (default) the map written with both names, mode 0600
 *   late     also, after half the time, a third function (jit_late, a copy of
 *            jit_inner that jit_outer calls from then on) appended to the map: the
 *            profiler must read the map's growth (a thread is created and joined at the
 *            start, so that the profiler's thread starts then and uploads each period)
 *   reuse    after half the time, the code at jit_inner's address is written again and
 *            named jit_reused in a line appended to the map (a JIT that frees a
 *            function and puts another at its address): samples before are jit_inner's,
 *            after jit_reused's. Prints "reuse_at X" and "run_from Y" (CPU seconds).
 *            A thread is created and joined at the start (the profiler's thread runs).
 *   unlink   the map with both names, removed once the loop is done, before the exit
 *            (a JIT that cleans up after itself; the exit's profile is the only one:
 *            a thread is created and joined at the start, so that the profiler's
 *            thread runs while the map is there)
 *   garbage  the map is random bytes
 *   huge     the map with both names, then made sparse past the 64 MiB cap
 *   foreign  the map with both names, owned by nobody (needs root)
 *   groupw   the map with both names, writable by its group
 * The map is left behind but in unlink mode (the profiler reads it at the exit's
 * profile): the caller removes it. Prints "pid N" and "cpu_seconds X".
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define OUTER_TURNS 100000 /* jit_outer's own loop: 1 part */
#define INNER_TURNS 300000 /* jit_inner's loop: 3 parts (~0.1 ms a call) */
#define CODE_BYTES 4096
/* Offsets of the functions in the code page: each one's loop (dec rax; jnz) starts on a
 * 16-byte boundary, so that the loop costs the same in both functions (jit_outer's
 * crossed one when it started at 128). */
#define INNER_AT 9   /* its loop at 16 */
#define LATE_AT 73   /* at 80 */
#define OUTER_AT 129 /* at 144 */
#define NOBODY_UID 65534
#define HUGE_BYTES ((off_t)65 << 20) /* past the profiler's 64 MiB cap */
#define GARBAGE_BYTES 65536

typedef void (*outer_fn)(uint64_t a, uint64_t b);

/* clang-format off */
/* jit_inner(b), and jit_late, its copy. */
static const uint8_t inner_code[] = {
	0x55,			/*  0: push rbp */
	0x48, 0x89, 0xe5,	/*  1: mov rbp, rsp */
	0x48, 0x89, 0xf8,	/*  4: mov rax, rdi */
	0x48, 0xff, 0xc8,	/*  7: dec rax */
	0x75, 0xfb,		/* 10: jnz 7 */
	0x5d,			/* 12: pop rbp */
	0xc3,			/* 13: ret */
};
/* jit_outer(a, b). */
static const uint8_t outer_code[] = {
	0x55,			/*  0: push rbp */
	0x48, 0x89, 0xe5,	/*  1: mov rbp, rsp */
	0x53,			/*  4: push rbx */
	0x48, 0x83, 0xec, 0x08,	/*  5: sub rsp, 8 (the call's stack 16-byte aligned) */
	0x48, 0x89, 0xf3,	/*  9: mov rbx, rsi */
	0x48, 0x89, 0xf8,	/* 12: mov rax, rdi */
	0x48, 0xff, 0xc8,	/* 15: dec rax */
	0x75, 0xfb,		/* 18: jnz 15 */
	0x48, 0x89, 0xdf,	/* 20: mov rdi, rbx */
	0xe8, 0, 0, 0, 0,	/* 23: call rel32 (set_callee) */
	0x48, 0x83, 0xc4, 0x08,	/* 28: add rsp, 8 */
	0x5b,			/* 32: pop rbx */
	0x5d,			/* 33: pop rbp */
	0xc3,			/* 34: ret */
};
/* clang-format on */
#define CALL_AT 23 /* the call instruction's offset in outer_code */

static uint8_t *code;
static char map_path[64];

static double cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Points jit_outer's call at the function at offset target. */
static void set_callee(size_t target)
{
	int32_t rel = (int32_t)((int64_t)target - (int64_t)(OUTER_AT + CALL_AT + 5));
	memcpy(code + OUTER_AT + CALL_AT + 1, &rel, sizeof(rel));
}

static void protect(int prot)
{
	if (mprotect(code, CODE_BYTES, prot) != 0) {
		perror("mprotect");
		exit(1);
	}
}

static void write_map(const char *text, int flags)
{
	int fd = open(map_path, O_WRONLY | O_CREAT | flags | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		perror(map_path);
		exit(1);
	}
	close(fd);
}

static void write_names(const char *mode)
{
	char text[256];
	if (strcmp(mode, "garbage") == 0) {
		static char junk[GARBAGE_BYTES];
		srand((unsigned)getpid());
		for (size_t i = 0; i < sizeof(junk); i++)
			junk[i] = (char)rand();
		int fd = open(map_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, junk, sizeof(junk)) != (ssize_t)sizeof(junk))
			exit(1);
		close(fd);
		return;
	}
	snprintf(text, sizeof(text), "%lx %zx jit_inner\n%lx %zx jit_outer\n",
		 (unsigned long)(code + INNER_AT), sizeof(inner_code),
		 (unsigned long)(code + OUTER_AT), sizeof(outer_code));
	write_map(text, O_TRUNC);
	int rc = 0;
	if (strcmp(mode, "huge") == 0)
		rc = truncate(map_path, HUGE_BYTES);
	else if (strcmp(mode, "foreign") == 0)
		rc = chown(map_path, NOBODY_UID, NOBODY_UID);
	else if (strcmp(mode, "groupw") == 0)
		rc = chmod(map_path, 0660);
	if (rc != 0) {
		perror(mode);
		exit(1);
	}
}

/* The C caller of the JIT code. */
static double run_from, reuse_at;

__attribute__((noinline)) static void run_jit(double seconds, int late, int reuse)
{
	outer_fn outer = (outer_fn)(void *)(code + OUTER_AT);
	double t0 = cpu_seconds(), half = t0 + seconds / 2;
	run_from = t0;
	while (cpu_seconds() - t0 < seconds) {
		for (int i = 0; i < 16; i++)
			outer(OUTER_TURNS, INNER_TURNS);
		if (reuse && cpu_seconds() >= half) {
			reuse = 0;
			protect(PROT_READ | PROT_WRITE);
			memset(code + INNER_AT, 0xcc, sizeof(inner_code));
			memcpy(code + INNER_AT, inner_code, sizeof(inner_code));
			protect(PROT_READ | PROT_EXEC);
			char text[64];
			snprintf(text, sizeof(text), "%lx %zx jit_reused\n",
				 (unsigned long)(code + INNER_AT), sizeof(inner_code));
			write_map(text, O_APPEND);
			reuse_at = cpu_seconds();
		}
		if (late && cpu_seconds() >= half) {
			late = 0;
			protect(PROT_READ | PROT_WRITE);
			set_callee(LATE_AT);
			protect(PROT_READ | PROT_EXEC);
			char text[64];
			snprintf(text, sizeof(text), "%lx %zx jit_late\n",
				 (unsigned long)(code + LATE_AT), sizeof(inner_code));
			write_map(text, O_APPEND);
		}
	}
	__asm__ volatile("" ::: "memory"); /* keep the caller's frame: no tail call */
}

static void *nothing(void *arg)
{
	return arg;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	const char *mode = argc > 2 ? argv[2] : "good";
	snprintf(map_path, sizeof(map_path), "/tmp/perf-%d.map", (int)getpid());
	code = mmap(NULL, CODE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memset(code, 0xcc, CODE_BYTES); /* int3 between the functions */
	memcpy(code + INNER_AT, inner_code, sizeof(inner_code));
	memcpy(code + LATE_AT, inner_code, sizeof(inner_code));
	memcpy(code + OUTER_AT, outer_code, sizeof(outer_code));
	set_callee(INNER_AT);
	protect(PROT_READ | PROT_EXEC);
	write_names(mode);
	bool own_thread =
	    strcmp(mode, "late") == 0 || strcmp(mode, "unlink") == 0 || strcmp(mode, "reuse") == 0;
	if (own_thread) { /* the profiler's thread starts at a pthread_create */
		pthread_t t;
		if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0)
			return 1;
	}
	run_jit(seconds, strcmp(mode, "late") == 0, strcmp(mode, "reuse") == 0);
	if (reuse_at > 0)
		printf("run_from %.3f\nreuse_at %.3f\n", run_from, reuse_at);
	if (strcmp(mode, "unlink") == 0 && unlink(map_path) != 0) {
		perror(map_path);
		return 1;
	}
	printf("pid %d\ncpu_seconds %.3f\n", (int)getpid(), cpu_seconds());
	return 0;
}
