/*
 * libchurn.c - the library dlopen_churn loads and unloads (built -O2
 * -fomit-frame-pointer: only its CFI can unwind it).
 */
#include <time.h>

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static unsigned long churn_inner(unsigned long x)
{
	for (int i = 0; i < 4000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

unsigned long churn_burn(double seconds)
{
	double end = cpu_now() + seconds;
	unsigned long x = 1;
	while (cpu_now() < end)
		x = churn_inner(x);
	return x;
}
