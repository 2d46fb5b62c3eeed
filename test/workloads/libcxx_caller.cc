// libcxx_caller.cc - a C++ library calling operator new and delete, for test_got_patch:
// plain, array, nothrow and aligned (C++17), and sized deletes. libstdc++ implements
// them with malloc, aligned_alloc and free called through its own GOT. Built -O0: no
// new/delete pair elided. Context: the test's threads.
#include <cstddef>
#include <cstdint>
#include <new>

extern "C" int cxx_caller_run(int rounds);

struct alignas(64) Wide {
	char bytes[128];
};

// Each round: four operator new calls (plain, array, nothrow, aligned), four deletes.
// 0 when every object was usable.
extern "C" int cxx_caller_run(int rounds)
{
	for (int i = 0; i < rounds; i++) {
		int *one = new int(i);
		int *many = new int[16];
		int *quiet = new (std::nothrow) int(i + 1);
		Wide *wide = new Wide;
		many[15] = i;
		wide->bytes[127] = 1;
		bool ok = quiet && *one == i && *quiet == i + 1 && many[15] == i &&
			  reinterpret_cast<std::uintptr_t>(wide) % alignof(Wide) == 0;
		delete one;
		delete[] many;
		delete quiet;
		delete wide;
		if (!ok)
			return i + 1;
	}
	return 0;
}
