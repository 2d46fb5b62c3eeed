// alloc_cxx.cc - C++ allocations for the allocation and live heap profiles, with the
// truth they measure: operator new and delete as libstdc++ implements them (malloc and
// free through its own GOT), std::vector growth, and objects held then deleted.
//
// usage: alloc_cxx [MiB=256] [hold_seconds=2.5]
//   cxx_new_site     new char[64 KiB] / delete[] until MiB
//   cxx_vector_site  std::vector<uint64_t> grown by push_back to 1 Mi elements, again
//                    until MiB of capacity was allocated (each growth a new block)
//   cxx_hold_site    64 MiB in 64 KiB objects (new char[]) held for hold_seconds,
//                    then deleted, then 1.5 s more before the exit
// Prints "name_bytes N" per site, and the CLOCK_REALTIME ns at which the held objects
// were complete (hold_done_ns), at which their delete began (hold_free_start_ns) and
// ended (hold_freed_ns). Built -O1 with frame pointers: no new/delete pair elided.
// Context: one thread.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <vector>

static volatile char sink;

static uint64_t realtime_ns()
{
	timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

__attribute__((noinline)) static uint64_t cxx_new_site(uint64_t bytes)
{
	const size_t block = 64 << 10;
	uint64_t done = 0;
	while (done < bytes) {
		char *p = new char[block];
		p[block - 1] = 1;
		sink = p[0];
		delete[] p;
		done += block;
	}
	return done;
}

__attribute__((noinline)) static uint64_t cxx_vector_site(uint64_t bytes)
{
	uint64_t done = 0;
	while (done < bytes) {
		std::vector<uint64_t> v;
		size_t cap = v.capacity();
		for (uint64_t i = 0; i < (1u << 20); i++) {
			v.push_back(i);
			if (v.capacity() != cap) {
				cap = v.capacity();
				done += cap * sizeof(uint64_t);
			}
		}
		sink = char(v[v.size() / 2]);
	}
	return done;
}

__attribute__((noinline)) static uint64_t
cxx_hold_site(std::vector<std::unique_ptr<char[]>> &held, uint64_t bytes)
{
	const size_t block = 64 << 10;
	uint64_t done = 0;
	while (done < bytes) {
		held.emplace_back(new char[block]);
		held.back()[0] = 1;
		done += block;
	}
	return done;
}

static void sleep_s(double s)
{
	timespec ts = {time_t(s), long((s - double(time_t(s))) * 1e9)};
	nanosleep(&ts, nullptr);
}

int main(int argc, char **argv)
{
	uint64_t mib = argc > 1 ? strtoull(argv[1], nullptr, 10) : 256;
	double hold = argc > 2 ? atof(argv[2]) : 2.5;
	printf("cxx_new_site_bytes %llu\n", (unsigned long long)cxx_new_site(mib << 20));
	printf("cxx_vector_site_bytes %llu\n", (unsigned long long)cxx_vector_site(mib << 20));
	std::vector<std::unique_ptr<char[]>> held;
	held.reserve(1024);
	printf("cxx_hold_site_bytes %llu\n", (unsigned long long)cxx_hold_site(held, 64 << 20));
	printf("hold_done_ns %llu\n", (unsigned long long)realtime_ns());
	sleep_s(hold);
	printf("hold_free_start_ns %llu\n", (unsigned long long)realtime_ns());
	held.clear();
	printf("hold_freed_ns %llu\n", (unsigned long long)realtime_ns());
	fflush(stdout);
	sleep_s(1.5);
	return 0;
}
