/*
 * alloc_sites.c - the allocation profile's workloads, with the truth they measure.
 *
 * usage:
 *   alloc_sites sites [MiB=2048]  allocates MiB in all at two call sites, site_a on 70%
 *                                 of the calls and site_b on 30%, sizes 16 B .. 1 MiB
 *                                 (log-uniform, a fixed seed), each block touched and
 *                                 freed at once; prints the bytes of each site.
 *   alloc_sites coverage [MiB=64] calls each allocation entry point once per 64 KiB
 *                                 block until MiB, each from a function of its own
 *                                 (cov_malloc, cov_calloc, ...); prints the bytes each.
 *   alloc_sites plugin LIB [MiB=256]  dlopens LIB (liballoc_plugin.so) after start-up,
 *                                 waits 200 ms (its slots are patched by the profiler's
 *                                 thread after the load), then has it allocate MiB in
 *                                 64 KiB blocks (plugin_alloc).
 *   alloc_sites leak [MiB=100] [seconds=3]  leaks MiB at leak_site (sizes 16 B .. 1 MiB),
 *                                 then for seconds churns at churn_site (blocks freed at
 *                                 once, 2 GiB in all), frees the leak, and churns 2.5
 *                                 seconds more; prints the leak's bytes and the
 *                                 CLOCK_REALTIME ns at which it was complete, at which
 *                                 its free began and at which it was freed; with the
 *                                 agent, its live heap diagnostics at the end.
 *   alloc_sites huge              asks malloc, calloc, posix_memalign, aligned_alloc,
 *                                 memalign and valloc for SIZE_MAX bytes (or the largest
 *                                 aligned size), 1000 times each, and prints per call
 *                                 "huge_<call> <failures> <errno of the last>" and the
 *                                 CLOCK_MONOTONIC ns the whole took ("huge_ns N").
 *   alloc_sites few [N=2]         N blocks of 16 MiB allocated and freed at once, in
 *                                 far less CPU than a CPU sample's period.
 *   alloc_sites probe             prints which module the program's malloc and free
 *                                 slots lead to ("malloc_module libc.so.6", "free_module
 *                                 libc.so.6" when nothing hooks them).
 *   alloc_sites stacks [distinct=65536] [seconds=2]  keeps 16 MiB at leak_site (64 KiB
 *                                 blocks), waits 0.4 s, then allocates and frees 256 bytes from
 *                                 each of distinct call stacks (fan_a/fan_b, 16 levels
 *                                 chosen by the bits of a counter), paced over seconds;
 *                                 prints the leak's bytes and the live heap diagnostics.
 *   alloc_sites early [MiB=256]   with liballoc_early.so preloaded: lets its thread
 *                                 (allocating since before libddprof's constructor)
 *                                 run 1 s more, stops it; grows a block with realloc to
 *                                 MiB in 64 KiB steps at early_realloc_site after having
 *                                 the wrapper look its functions up again from inside
 *                                 the next malloc; prints the thread's bytes since main
 *                                 began and in all, the realloc bytes, and the
 *                                 wrapper's counts.
 * Lines are "name value", read by the integration tests.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <sys/mman.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_diag.h"

static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static uint64_t next(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545F4914F6CDD1DULL;
}

/* 16 B .. 1 MiB, log-uniform: 2^(4 + 16 u). */
static size_t next_size(void)
{
	double u = (double)(next() >> 11) / (double)(1ULL << 53);
	double lg = 4.0 + 16.0 * u;
	size_t whole = (size_t)1 << (unsigned)lg;
	return whole + (size_t)((double)whole * (lg - (unsigned)lg));
}

static volatile char sink;
static void *volatile sink_ptr;

__attribute__((noinline)) void site_a(size_t size)
{
	char *p = malloc(size);
	p[0] = 1;
	sink += p[size - 1];
	free(p);
}

__attribute__((noinline)) void site_b(size_t size)
{
	char *p = malloc(size);
	p[0] = 2;
	sink += p[size - 1];
	free(p);
}

static int run_sites(uint64_t total)
{
	uint64_t a = 0, b = 0;
	while (a + b < total) {
		size_t size = next_size();
		if (next() % 10 < 7) {
			site_a(size);
			a += size;
		} else {
			site_b(size);
			b += size;
		}
	}
	printf("site_a_bytes %llu\nsite_b_bytes %llu\n", (unsigned long long)a,
	       (unsigned long long)b);
	return 0;
}

#define COV_BLOCK (64u << 10)

/* Uses the block (a compiler may drop a malloc whose memory is never used) and frees it. */
static void use_and_free(void *p)
{
	if (p)
		((volatile char *)p)[0] = 1;
	free(p);
}

__attribute__((noinline)) void cov_malloc(void)
{
	use_and_free(malloc(COV_BLOCK));
}

__attribute__((noinline)) void cov_calloc(void)
{
	use_and_free(calloc(COV_BLOCK / 16, 16));
}

/* Growth: a realloc to COV_BLOCK from 16 bytes counts COV_BLOCK. */
__attribute__((noinline)) void cov_realloc(void)
{
	void *p = malloc(16);
	use_and_free(realloc(p, COV_BLOCK));
}

__attribute__((noinline)) void cov_reallocarray(void)
{
	use_and_free(reallocarray(NULL, COV_BLOCK / 16, 16));
}

__attribute__((noinline)) void cov_posix_memalign(void)
{
	void *p = NULL;
	if (posix_memalign(&p, 64, COV_BLOCK) == 0)
		use_and_free(p);
}

__attribute__((noinline)) void cov_aligned_alloc(void)
{
	use_and_free(aligned_alloc(64, COV_BLOCK));
}

__attribute__((noinline)) void cov_memalign(void)
{
	use_and_free(memalign(64, COV_BLOCK));
}

__attribute__((noinline)) void cov_valloc(void)
{
	use_and_free(valloc(COV_BLOCK));
}

__attribute__((noinline)) void cov_pvalloc(void)
{
	use_and_free(pvalloc(COV_BLOCK));
}

static int run_coverage(uint64_t total)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} entry[] = {
	    {"cov_malloc", cov_malloc},
	    {"cov_calloc", cov_calloc},
	    {"cov_realloc", cov_realloc},
	    {"cov_reallocarray", cov_reallocarray},
	    {"cov_posix_memalign", cov_posix_memalign},
	    {"cov_aligned_alloc", cov_aligned_alloc},
	    {"cov_memalign", cov_memalign},
	    {"cov_valloc", cov_valloc},
	    {"cov_pvalloc", cov_pvalloc},
	};
	size_t n = sizeof(entry) / sizeof(entry[0]);
	for (size_t i = 0; i < n; i++) {
		uint64_t done = 0;
		for (; done < total; done += COV_BLOCK)
			entry[i].fn();
		printf("%s_bytes %llu\n", entry[i].name, (unsigned long long)done);
	}
	return 0;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static double mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void *leak_site(size_t size)
{
	char *p = malloc(size);
	p[0] = 3;
	return p;
}

__attribute__((noinline)) void churn_site(size_t size)
{
	char *p = malloc(size);
	p[0] = 4;
	sink += p[size - 1];
	free(p);
}

/* Churns bytes at churn_site, spread over seconds. */
static void churn(uint64_t bytes, double seconds)
{
	double t0 = mono_s();
	uint64_t done = 0;
	while (done < bytes) {
		size_t size = next_size();
		churn_site(size);
		done += size;
		double due = seconds * (double)done / (double)bytes;
		while (mono_s() - t0 < due - 0.01) {
			struct timespec ts = {0, 5 * 1000 * 1000};
			nanosleep(&ts, NULL);
		}
	}
}

/* The live heap's counters of ddprof_get_diagnostics, when the agent is there. */
static void print_heap_diagnostics(void)
{
	struct ddprof_diagnostics d;
	if (!agent_diagnostics(&d))
		return;
	printf("diag_alloc_samples %llu\ndiag_heap_live_samples %llu\ndiag_heap_table_bytes "
	       "%llu\ndiag_heap_table_overflows %llu\ndiag_heap_stacks %llu\n"
	       "diag_heap_stacks_refused %llu\ndiag_heap_profiler_bytes %llu\n"
	       "diag_heap_compactions %llu\n",
	       (unsigned long long)d.alloc_samples, (unsigned long long)d.heap_live_samples,
	       (unsigned long long)d.heap_table_bytes, (unsigned long long)d.heap_table_overflows,
	       (unsigned long long)d.heap_stacks, (unsigned long long)d.heap_stacks_refused,
	       (unsigned long long)d.heap_profiler_bytes, (unsigned long long)d.heap_compactions);
}

static int run_leak(uint64_t leak, double seconds)
{
	/* The pointers, in memory no hook sees (not the heap under test). */
	size_t cap = (size_t)(leak / 16) + 1;
	void **blocks = mmap(NULL, cap * sizeof(void *), PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (blocks == MAP_FAILED)
		return 1;
	size_t n = 0;
	uint64_t leaked = 0;
	while (leaked < leak && n < cap) {
		size_t size = next_size();
		blocks[n++] = leak_site(size);
		leaked += size;
	}
	printf("leak_site_bytes %llu\nleak_done_ns %llu\n", (unsigned long long)leaked,
	       (unsigned long long)realtime_ns());
	fflush(stdout);
	churn((uint64_t)2 << 30, seconds);
	printf("leak_free_start_ns %llu\n", (unsigned long long)realtime_ns());
	fflush(stdout);
	for (size_t i = 0; i < n; i++)
		free(blocks[i]);
	printf("leak_freed_ns %llu\n", (unsigned long long)realtime_ns());
	fflush(stdout);
	churn((uint64_t)512 << 20, 2.5);
	print_heap_diagnostics();
	return 0;
}

__attribute__((noinline)) void *fan_leaf(size_t size)
{
	char *p = malloc(size);
	p[0] = 1;
	sink += p[0];
	return p;
}

__attribute__((noinline)) void *fan_b(unsigned bits, int depth, size_t size);

/* One of 2^depth call stacks, by the low depth bits of bits. */
__attribute__((noinline)) void *fan_a(unsigned bits, int depth, size_t size)
{
	void *p = depth == 0   ? fan_leaf(size)
		  : (bits & 1) ? fan_a(bits >> 1, depth - 1, size)
			       : fan_b(bits >> 1, depth - 1, size);
	sink += 1;
	return p;
}

__attribute__((noinline)) void *fan_b(unsigned bits, int depth, size_t size)
{
	void *p = depth == 0   ? fan_leaf(size)
		  : (bits & 1) ? fan_a(bits >> 1, depth - 1, size)
			       : fan_b(bits >> 1, depth - 1, size);
	sink += 2;
	return p;
}

static int run_stacks(unsigned distinct, double seconds)
{
	void *kept[256];
	for (int i = 0; i < 256; i++)
		kept[i] = leak_site(64u << 10);
	printf("leak_site_bytes %llu\n", 256ULL << 16);
	/* The profiler's thread starts at its first need (here the first upload): the
	 * stacks to come need it to map their store's memory. */
	struct timespec settle = {0, 400 * 1000 * 1000};
	nanosleep(&settle, NULL);
	double t0 = mono_s();
	for (unsigned k = 0; k < distinct; k++) {
		free(fan_a(k, 16, 256));
		double due = seconds * (double)(k + 1) / (double)distinct;
		while (mono_s() - t0 < due - 0.005) {
			struct timespec ts = {0, 1000 * 1000};
			nanosleep(&ts, NULL);
		}
	}
	print_heap_diagnostics();
	for (int i = 0; i < 256; i++)
		free(kept[i]);
	return 0;
}

static int run_plugin(const char *lib, uint64_t total)
{
	void *h = dlopen(lib, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
		return 1;
	}
	uint64_t (*fn)(uint64_t, size_t) = (uint64_t(*)(uint64_t, size_t))dlsym(h, "plugin_alloc");
	if (!fn)
		return 1;
	struct timespec ts = {0, 200 * 1000 * 1000};
	nanosleep(&ts, NULL);
	printf("plugin_alloc_bytes %llu\n", (unsigned long long)fn(total, 64u << 10));
	return 0;
}

/* The module that holds fn, by file name ("?" when none). */
static const char *module_of(void *fn)
{
	Dl_info info;
	if (!dladdr(fn, &info) || !info.dli_fname)
		return "?";
	const char *name = strrchr(info.dli_fname, '/');
	return name ? name + 1 : info.dli_fname;
}

/* The addresses of malloc and free as the program's code takes them at run time: from
 * its GOT (GLOB_DAT slots, the ones the profiler points at its hooks when allocation
 * profiling is on), not from pointers initialized in data at load time. */
static int run_probe(void)
{
	void *(*volatile malloc_slot)(size_t) = malloc;
	void (*volatile free_slot)(void *) = free;
	printf("malloc_module %s\n", module_of((void *)malloc_slot));
	printf("free_module %s\n", module_of((void *)free_slot));
	return 0;
}

__attribute__((noinline)) uint64_t early_realloc_site(uint64_t total)
{
	char *p = NULL;
	uint64_t done = 0;
	for (size_t size = 64u << 10; size <= total; size += 64u << 10) {
		char *q = realloc(p, size);
		if (!q)
			break;
		p = q;
		p[size - 1] = 1;
		done += size;
	}
	free(p);
	return done;
}

static int run_early(uint64_t total)
{
	uint64_t (*bytes)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "early_bytes");
	uint64_t (*stop)(void) = (uint64_t(*)(void))dlsym(RTLD_DEFAULT, "early_stop");
	int (*first)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "early_agent_ran_first");
	void (*relookup)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "early_relookup");
	void (*counts)(uint64_t *, uint64_t *, uint64_t *) =
	    (void (*)(uint64_t *, uint64_t *, uint64_t *))dlsym(RTLD_DEFAULT, "early_counts");
	if (!bytes || !stop || !first || !relookup || !counts) {
		fprintf(stderr, "alloc_sites early: liballoc_early.so is not preloaded\n");
		return 1;
	}
	uint64_t at_main = bytes();
	struct timespec ts = {1, 0};
	nanosleep(&ts, NULL);
	uint64_t all = stop();
	uint64_t calls0, lookups0, during0, calls, lookups, during;
	counts(&calls0, &lookups0, &during0);
	relookup();
	uint64_t grown = early_realloc_site(total);
	counts(&calls, &lookups, &during);
	printf("early_agent_ran_first %d\n", first());
	printf("early_after_main_bytes %llu\nearly_all_bytes %llu\n",
	       (unsigned long long)(all - at_main), (unsigned long long)all);
	printf("early_realloc_site_bytes %llu\n", (unsigned long long)grown);
	printf("wrapper_calls %llu\nwrapper_lookups_in_run %llu\nwrapper_lookup_allocs_in_run "
	       "%llu\n",
	       (unsigned long long)calls, (unsigned long long)(lookups - lookups0),
	       (unsigned long long)(during - during0));
	return 0;
}

/* Requests no allocator can satisfy: each must fail at once, with ENOMEM (EINVAL
 * nowhere: the alignments are valid), as it does without a profiler. */
static int run_huge(void)
{
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* Read at run time: the compiler refuses such constants in allocation calls. */
	static volatile size_t most = SIZE_MAX;
	const size_t all = most, big = most & ~(size_t)4095;
	const char *names[] = {"malloc",	"calloc",   "posix_memalign",
			       "aligned_alloc", "memalign", "valloc"};
	for (int c = 0; c < 6; c++) {
		int failures = 0, err = 0;
		for (int i = 0; i < 1000; i++) {
			void *p = NULL;
			errno = 0;
			switch (c) {
			case 0:
				p = malloc(all);
				err = errno;
				break;
			case 1:
				p = calloc(1, all);
				err = errno;
				break;
			case 2:
				err = posix_memalign(&p, 64, big);
				if (err)
					p = NULL;
				break;
			case 3:
				p = aligned_alloc(4096, big);
				err = errno;
				break;
			case 4:
				p = memalign(4096, big);
				err = errno;
				break;
			default:
				p = valloc(big);
				err = errno;
				break;
			}
			if (p)
				free(p);
			else
				failures++;
		}
		printf("huge_%s %d %d\n", names[c], failures, err);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("huge_ns %lld\n",
	       (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
	return 0;
}

/* N blocks of 16 MiB, none touched, each freed at once: N allocation samples (a block
 * that big is sampled once whatever the countdown) in well under a CPU sample's
 * period. */
static int run_few(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		void *p = malloc(16 << 20);
		sink_ptr = p;
		free(p);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "sites";
	uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
	if (strcmp(mode, "sites") == 0)
		return run_sites((mib ? mib : 2048) << 20);
	if (strcmp(mode, "few") == 0)
		return run_few(argc > 2 ? strtoull(argv[2], NULL, 10) : 2);
	if (strcmp(mode, "coverage") == 0)
		return run_coverage((mib ? mib : 64) << 20);
	if (strcmp(mode, "plugin") == 0 && argc > 2)
		return run_plugin(argv[2], (argc > 3 ? strtoull(argv[3], NULL, 10) : 256) << 20);
	if (strcmp(mode, "leak") == 0)
		return run_leak((mib ? mib : 100) << 20, argc > 3 ? atof(argv[3]) : 3.0);
	if (strcmp(mode, "probe") == 0)
		return run_probe();
	if (strcmp(mode, "huge") == 0)
		return run_huge();
	if (strcmp(mode, "stacks") == 0)
		return run_stacks(mib ? (unsigned)mib : 65536, argc > 3 ? atof(argv[3]) : 2.0);
	if (strcmp(mode, "early") == 0)
		return run_early((mib ? mib : 256) << 20);
	fprintf(stderr, "usage: alloc_sites sites|coverage [MiB] | leak [MiB] [s] | plugin LIB "
			"[MiB] | probe | huge | stacks [n] [s] | early [MiB]\n");
	return 2;
}
