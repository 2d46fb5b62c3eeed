/*
 * inline_hot.c - the inlined-frame workload: the hot loop is an always_inline function
 * (spin_inlined) inside a noinline one (inline_caller), built -O2 -g. Its samples'
 * leaf pcs belong to inline_caller's code, yet DWARF says they are spin_inlined's, so
 * a profile should show spin_inlined as a frame of its own, on its loop's line, called
 * from inline_caller on the call's line. The lines are marked "LINE:" for the tests,
 * which find them by grepping this file.
 *
 * usage: inline_hot [cpu seconds=1.0]
 * Prints the process CPU time (user + system) it used, as seen by the kernel.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#define ROUND_ITERS 2000000 /* ~2 ms a call: the CPU clock is read rarely */

static volatile uint64_t sink;

/* One line holds the whole loop, so every sample inside has this line. */
/* clang-format off */
static inline __attribute__((always_inline)) uint64_t spin_inlined(uint64_t x, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) { x = x * 6364136223846793005ULL + 1442695040888963407ULL; __asm__ volatile("" : "+r"(x)); } /* LINE:spin */
	return x;
}
/* clang-format on */

/* A call after the loop keeps a frame (GCC 12 ignores -mno-omit-leaf-frame-pointer). */
__attribute__((noinline)) void round_done(void)
{
	__asm__ volatile("");
}

__attribute__((noinline)) void inline_caller(uint64_t n)
{
	sink = spin_inlined(sink, n); /* LINE:call */
	round_done();
}

static double cpu_seconds(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	double target = argc > 1 ? atof(argv[1]) : 1.0;
	while (cpu_seconds() < target)
		inline_caller(ROUND_ITERS);
	printf("cpu_seconds %.6f\n", cpu_seconds());
	return 0;
}
