/*
 * malloc_policy.c - watches glibc's malloc policy from inside the application: whether
 * its large allocations are still served by mappings of their own (its mmap threshold
 * unchanged), while a profiler runs beside it.
 *
 * glibc serves a request above its mmap threshold (128 KiB unless changed) with its own
 * mapping and marks the chunk IS_MMAPPED (bit 1 of the size word before the block).
 * Freeing such a chunk raises the threshold to its size for the whole process, so a
 * profiler whose own buffers are freed by glibc would silently change how the
 * application's memory is served. Every STEP_MS for SECONDS, this program allocates
 * blocks of 256 KiB, 1 MiB and 4 MiB (never freed: freeing one would raise the threshold
 * itself), touches them, and counts those glibc served from its heap instead; between
 * rounds it burns CPU through a few hundred call paths, as a second thread does all the
 * time, so that a profiler has threads to track and stacks to symbolize and encode.
 *
 * usage: malloc_policy SECONDS [raise]   ("raise": first frees a 300 KiB block itself,
 * which must show as heap-served blocks: the check can fail)
 * Prints "blocks N heap_served M".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STEP_MS 20
#define IS_MMAPPED 0x2

static volatile uint64_t sink;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static __attribute__((noinline)) uint64_t burn(unsigned depth, unsigned path, uint64_t x)
{
	if (depth == 0) {
		for (int i = 0; i < 20000; i++)
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		return x;
	}
	/* Two call sites a level: 2^depth paths. */
	if (path & 1)
		return burn(depth - 1, path >> 1, x + 1) + 1;
	return burn(depth - 1, path >> 1, x ^ 3) ^ 1;
}

static double end;

static void *burner(void *arg)
{
	(void)arg;
	unsigned path = 0;
	while (now_s() < end)
		sink += burn(8, path++, sink);
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	if (argc > 2 && strcmp(argv[2], "raise") == 0)
		free(malloc(300 << 10));
	static const size_t sizes[] = {256 << 10, 1 << 20, 4 << 20};
	unsigned blocks = 0, heap_served = 0, path = 0;
	unsigned served_by_size[3] = {0, 0, 0};
	double start = now_s(), first_served = -1;
	end = start + seconds;
	pthread_t t;
	if (pthread_create(&t, NULL, burner, NULL) != 0)
		return 2;
	while (now_s() < end) {
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			uint8_t *p = malloc(sizes[i]);
			if (!p)
				return 2;
			p[0] = 1;
			/* The chunk's size word, just before the block (glibc's layout). */
			uint64_t size_word;
			memcpy(&size_word, (const void *)((uintptr_t)p - 8), sizeof(size_word));
			blocks++;
			if (!(size_word & IS_MMAPPED)) {
				heap_served++;
				served_by_size[i]++;
				if (first_served < 0)
					first_served = now_s() - start;
			}
		}
		double step_end = now_s() + STEP_MS / 1e3;
		while (now_s() < step_end)
			sink += burn(8, path++, sink);
	}
	pthread_join(t, NULL);
	/* Which sizes and from when: a raised threshold serves every block up to the size
	 * freed from then on; a free chunk left in the heap serves one block once. */
	printf("blocks %u heap_served %u (256K %u, 1M %u, 4M %u; first at %.2f s)\n", blocks,
	       heap_served, served_by_size[0], served_by_size[1], served_by_size[2], first_served);
	return 0;
}
