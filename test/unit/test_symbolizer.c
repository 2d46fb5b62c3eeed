/*
 * test_symbolizer.c - the symbolizer against real code: functions of this test binary
 * (built -g; the expected lines are __LINE__ markers next to the calls), fixtures built
 * by the Makefile under build/test/symfix (a -g library symbolized after dlclose, its
 * stripped twin, a stripped program, a C++ object, copies whose DWARF is in a file named
 * by .gnu_debuglink), and libc with Debian's libc6-dbg.
 * Every pc used is a return address taken with __builtin_return_address, so the line
 * expected is the line of the call.
 */
#include <check.h>

#include "test/unit/check_run.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/symbolize/dw_api.h"
#include "agent/symbolize/sym_demangle.h"
#include "agent/symbolize/sym_elf.h"
#include "agent/symbolize/symbolizer.h"

/* Far from the executable, the heap and the mmap area: free for noted mappings. */
#define FAKE_BASE ((uintptr_t)0x100000000000)
#define MISSING_LIBDW "libdw-does-not-exist.so.0"
#define THIS_FILE "test_symbolizer.c"
#define CXX_NAME "ddprof_test::Widget::spin(void*)"
#define CXX_MANGLED "_ZN11ddprof_test6Widget4spinEPv"

static struct symbolizer *sym;

/* Global, not static: the symbolizer names them from this program's symbol table. */
void *symfix_test_return_address(void);
void *sym_plain_target(void);
void *sym_inline_host(void);

/* Returns its own return address: the pc of the call in its caller. Called by the C++
 * fixture too. */
__attribute__((noinline)) void *symfix_test_return_address(void)
{
	void *ra = __builtin_return_address(0);
	__asm__ volatile("" : "+r"(ra));
	return ra;
}

void *symfix_cxx_pc(void); /* test/unit/fixtures/symfix_cxx.cc */

static int plain_line, leaf_line, host_line;

/* The barriers keep each call a real call (no tail call) on its own line. */
__attribute__((noinline)) void *sym_plain_target(void)
{
	plain_line = __LINE__ + 1;
	void *pc = symfix_test_return_address();
	__asm__ volatile("" ::: "memory");
	return pc;
}

static inline __attribute__((always_inline)) void *sym_inlined_leaf(void)
{
	leaf_line = __LINE__ + 1;
	void *pc = symfix_test_return_address();
	__asm__ volatile("" ::: "memory");
	return pc;
}

__attribute__((noinline)) void *sym_inline_host(void)
{
	host_line = __LINE__ + 1;
	void *pc = sym_inlined_leaf();
	__asm__ volatile("" ::: "memory");
	return pc;
}

/* Called through volatile pointers: no interprocedural clone can rename them. */
static void *(*volatile plain_fn)(void) = sym_plain_target;
static void *(*volatile host_fn)(void) = sym_inline_host;

static void setup(void)
{
	dw_api_test_reset(NULL);
	sym = symbolizer_new();
	ck_assert_ptr_nonnull(sym);
	ck_assert_int_gt(symbolizer_refresh(sym), 0);
}

static void teardown(void)
{
	symbolizer_free(sym);
	dw_api_test_reset(NULL);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = s ? strlen(s) : 0, m = strlen(suffix);
	return s && n >= m && strcmp(s + n - m, suffix) == 0;
}

/* build/test/symfix/<name>, next to this binary. */
static void fixture_path(const char *name, char *out, size_t size)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	ck_assert_int_gt(n, 0);
	exe[n] = 0;
	snprintf(out, size, "%s/symfix/%s", dirname(exe), name);
	ck_assert_msg(access(out, R_OK) == 0, "fixture %s missing (built by make)", out);
}

static size_t frames_of(uintptr_t pc, bool is_return, struct sym_frame *fr)
{
	return symbolizer_frames(sym, pc, is_return, fr, SYM_MAX_FRAMES);
}

static void assert_frame(const struct sym_frame *f, const char *function, const char *file,
			 int line)
{
	ck_assert_msg(f->function && strcmp(f->function, function) == 0, "function %s, expected %s",
		      f->function ? f->function : "(null)", function);
	ck_assert_msg(ends_with(f->file, file), "%s: file %s, expected ...%s", function,
		      f->file ? f->file : "(null)", file);
	ck_assert_msg(f->line == line, "%s: line %d, expected %d", function, f->line, line);
}

START_TEST(test_function_file_and_line_of_this_binary)
{
	uintptr_t pc = (uintptr_t)plain_fn();
	struct sym_frame fr[SYM_MAX_FRAMES];
	size_t n = frames_of(pc, true, fr);
	ck_assert_msg(n == 1, "%zu frames for a function without inlining, expected 1", n);
	assert_frame(&fr[0], "sym_plain_target", THIS_FILE, plain_line);
	ck_assert_str_eq(symbolizer_function(sym, pc, true), "sym_plain_target");
	int idx = symbolizer_find_mapping(sym, pc);
	ck_assert_int_ge(idx, 0);
	ck_assert_int_eq(symbolizer_mapping_debug_info(sym, idx), 1);
	ck_assert_uint_eq(strlen(symbolizer_mapping(sym, idx)->build_id), 40);
}
END_TEST

START_TEST(test_always_inline_function_is_a_frame_of_its_own)
{
	uintptr_t pc = (uintptr_t)host_fn();
	struct sym_frame fr[SYM_MAX_FRAMES];
	size_t n = frames_of(pc, true, fr);
	ck_assert_msg(n == 2, "%zu frames, expected the inlined function and its caller", n);
	assert_frame(&fr[0], "sym_inlined_leaf", THIS_FILE, leaf_line);
	assert_frame(&fr[1], "sym_inline_host", THIS_FILE, host_line);
	/* The old one-name view is the function holding the code. */
	ck_assert_str_eq(symbolizer_function(sym, pc, true), "sym_inline_host");
	/* A short buffer keeps the innermost frame and the function holding the code. */
	struct sym_frame one;
	ck_assert_uint_eq(symbolizer_frames(sym, pc, true, &one, 1), 1);
	ck_assert_str_eq(one.function, "sym_inline_host");
}
END_TEST

START_TEST(test_cxx_names_are_demangled)
{
	char *d = sym_demangle(CXX_MANGLED);
	ck_assert_ptr_nonnull(d);
	ck_assert_str_eq(d, CXX_NAME);
	free(d);
	ck_assert_ptr_null(sym_demangle("main"));
	ck_assert_ptr_null(sym_demangle("_Z"));
	ck_assert_ptr_null(sym_demangle("_Z$not-a-mangled-name"));

	uintptr_t pc = (uintptr_t)symfix_cxx_pc();
	struct sym_frame fr[SYM_MAX_FRAMES];
	size_t n = frames_of(pc, true, fr);
	ck_assert_uint_ge(n, 1);
	ck_assert_msg(strcmp(fr[n - 1].function, CXX_NAME) == 0, "C++ function named %s",
		      fr[n - 1].function);
	ck_assert(ends_with(fr[n - 1].file, "symfix_cxx.cc"));
}
END_TEST

START_TEST(test_stripped_library_pc_keeps_module_and_offset)
{
	char stripped[PATH_MAX], full[PATH_MAX];
	fixture_path("libsymfix_stripped.so", stripped, sizeof(stripped));
	fixture_path("libsymfix.so", full, sizeof(full));
	void *hs = dlopen(stripped, RTLD_NOW | RTLD_LOCAL);
	void *hf = dlopen(full, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(hs && hf, "dlopen: %s", dlerror());
	uintptr_t (*addr_s)(void) = (uintptr_t(*)(void))dlsym(hs, "symfix_hidden_addr");
	uintptr_t (*addr_f)(void) = (uintptr_t(*)(void))dlsym(hf, "symfix_hidden_addr");
	ck_assert(addr_s && addr_f);
	uintptr_t pc_s = addr_s() + 1, pc_f = addr_f() + 1;
	ck_assert_int_gt(symbolizer_refresh(sym), 0);

	struct sym_frame fr[SYM_MAX_FRAMES];
	ck_assert_msg(frames_of(pc_s, false, fr) == 0,
		      "a function of a stripped library was named %s", fr[0].function);
	int idx = symbolizer_find_mapping(sym, pc_s);
	ck_assert_int_ge(idx, 0);
	const struct sym_mapping *m = symbolizer_mapping(sym, idx);
	ck_assert_str_eq(m->path, stripped);
	ck_assert_uint_eq(strlen(m->build_id), 40);
	/* Module + offset: the same offset in the unstripped twin is hidden_work. */
	int idx_f = symbolizer_find_mapping(sym, pc_f);
	ck_assert_int_ge(idx_f, 0);
	const struct sym_mapping *mf = symbolizer_mapping(sym, idx_f);
	ck_assert_uint_eq(pc_s - m->start + m->offset, pc_f - mf->start + mf->offset);
	ck_assert_uint_eq(frames_of(pc_f, false, fr), 1);
	ck_assert_str_eq(fr[0].function, "hidden_work");
	ck_assert(ends_with(fr[0].file, "symfix.c"));
	dlclose(hs);
	dlclose(hf);
}
END_TEST

START_TEST(test_second_lookup_of_a_pc_does_no_dwarf_work)
{
	uintptr_t pc = (uintptr_t)host_fn();
	struct sym_frame a[SYM_MAX_FRAMES], b[SYM_MAX_FRAMES];
	struct symbolizer_stats s0, s1, s2;
	symbolizer_get_stats(sym, &s0);
	size_t n = frames_of(pc, true, a);
	symbolizer_get_stats(sym, &s1);
	ck_assert(s1.libdw);
	ck_assert_uint_eq(s1.dwarf_lookups, s0.dwarf_lookups + 1);
	ck_assert_uint_eq(s1.cache_hits, s0.cache_hits);
	size_t bytes_before = s1.cache_bytes;
	ck_assert_uint_gt(bytes_before, 0);
	ck_assert_uint_ge(symbolizer_bytes(sym), bytes_before);

	/* Across a refresh (the next upload) too. */
	ck_assert_int_gt(symbolizer_refresh(sym), 0);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(frames_of(pc, true, b), n);
	symbolizer_get_stats(sym, &s2);
	ck_assert_msg(s2.dwarf_lookups == s1.dwarf_lookups, "%llu DWARF lookups for cached pcs",
		      (unsigned long long)(s2.dwarf_lookups - s1.dwarf_lookups));
	ck_assert_uint_eq(s2.cache_hits, s1.cache_hits + 100);
	ck_assert_uint_eq(s2.cache_bytes, bytes_before);
	for (size_t i = 0; i < n; i++) {
		ck_assert_str_eq(a[i].function, b[i].function);
		ck_assert_int_eq(a[i].line, b[i].line);
	}
}
END_TEST

START_TEST(test_cache_over_budget_is_cleared_at_refresh)
{
	uintptr_t pcs[] = {(uintptr_t)host_fn(), (uintptr_t)plain_fn()};
	struct sym_frame fr[SYM_MAX_FRAMES];
	for (size_t i = 0; i < 2; i++)
		frames_of(pcs[i], true, fr);
	struct symbolizer_stats s;
	symbolizer_get_stats(sym, &s);
	ck_assert_uint_eq(s.cache_entries, 2);
	symbolizer_set_cache_limit(sym, 1);
	ck_assert_int_gt(symbolizer_refresh(sym), 0);
	symbolizer_get_stats(sym, &s);
	ck_assert_uint_eq(s.cache_flushes, 1);
	ck_assert_uint_eq(s.cache_entries, 0);
	ck_assert_uint_eq(s.cache_bytes, 0);
	uint64_t dwarf = s.dwarf_lookups;
	ck_assert_uint_eq(frames_of(pcs[0], true, fr), 2); /* resolved again */
	assert_frame(&fr[0], "sym_inlined_leaf", THIS_FILE, leaf_line);
	symbolizer_get_stats(sym, &s);
	ck_assert_uint_eq(s.dwarf_lookups, dwarf + 1);
}
END_TEST

/* The r-xp line of /proc/self/maps holding pc. */
static bool exec_mapping_of(uintptr_t pc, uintptr_t *start, uintptr_t *end, uintptr_t *off)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[PATH_MAX + 128];
	bool found = false;
	while (!found && f && fgets(line, sizeof(line), f)) {
		char perms[5];
		if (sscanf(line, "%lx-%lx %4s %lx", start, end, perms, off) == 4 &&
		    perms[2] == 'x' && *start <= pc && pc < *end)
			found = true;
	}
	if (f)
		fclose(f);
	return found;
}

START_TEST(test_noted_module_symbolizes_a_dlclosed_library)
{
	char path[PATH_MAX];
	fixture_path("libsymfix.so", path, sizeof(path));
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h != NULL, "dlopen: %s", dlerror());
	void *(*work_pc)(void) = (void *(*)(void))dlsym(h, "symfix_work_pc");
	int *line = dlsym(h, "symfix_work_line");
	ck_assert(work_pc && line);
	uintptr_t pc = (uintptr_t)work_pc(), start, end, off;
	int expected_line = *line;
	ck_assert(exec_mapping_of(pc, &start, &end, &off));
	ck_assert_int_eq(dlclose(h), 0);

	ck_assert_int_gt(symbolizer_refresh(sym), 0);
	ck_assert_msg(symbolizer_find_mapping(sym, pc) < 0, "the library is still mapped");
	struct sym_frame fr[SYM_MAX_FRAMES];
	ck_assert_uint_eq(frames_of(pc, true, fr), 0);

	int idx = symbolizer_note_module(sym, path, start, end, off);
	ck_assert_int_ge(idx, 0);
	ck_assert_int_eq(symbolizer_find_mapping(sym, pc), idx);
	ck_assert_str_eq(symbolizer_mapping(sym, idx)->path, path);
	ck_assert_uint_eq(strlen(symbolizer_mapping(sym, idx)->build_id), 40);
	/* Noting it again is harmless. */
	ck_assert_int_eq(symbolizer_note_module(sym, path, start, end, off), idx);
	ck_assert_uint_eq(frames_of(pc, true, fr), 1);
	assert_frame(&fr[0], "hidden_work", "symfix.c", expected_line);
	/* Mappings stay sorted: every other pc still finds its own mapping. */
	uintptr_t own = (uintptr_t)plain_fn();
	ck_assert_int_ge(symbolizer_find_mapping(sym, own), 0);
	ck_assert_str_eq(symbolizer_function(sym, own, true), "sym_plain_target");

	/* Until the next refresh only. */
	ck_assert_int_gt(symbolizer_refresh(sym), 0);
	ck_assert_int_lt(symbolizer_find_mapping(sym, pc), 0);
}
END_TEST

START_TEST(test_note_module_refuses_bad_and_overlapping_ranges)
{
	char path[PATH_MAX];
	fixture_path("libsymfix.so", path, sizeof(path));
	uintptr_t own = (uintptr_t)plain_fn();
	ck_assert_int_eq(symbolizer_note_module(sym, "relative.so", FAKE_BASE, FAKE_BASE + 4096, 0),
			 -EINVAL);
	ck_assert_int_eq(symbolizer_note_module(sym, path, FAKE_BASE, FAKE_BASE, 0), -EINVAL);
	ck_assert_int_eq(symbolizer_note_module(sym, NULL, FAKE_BASE, FAKE_BASE + 4096, 0),
			 -EINVAL);
	ck_assert_int_eq(symbolizer_note_module(sym, path, own - 16, own + 16, 0), -EEXIST);
	/* A file that is gone keeps module and offset. */
	int idx =
	    symbolizer_note_module(sym, "/nonexistent/libgone.so", FAKE_BASE, FAKE_BASE + 4096, 0);
	ck_assert_int_ge(idx, 0);
	struct sym_frame fr[SYM_MAX_FRAMES];
	ck_assert_uint_eq(frames_of(FAKE_BASE + 16, false, fr), 0);
	ck_assert_int_eq(symbolizer_find_mapping(sym, FAKE_BASE + 16), idx);
	ck_assert_str_eq(symbolizer_mapping(sym, idx)->path, "/nonexistent/libgone.so");
}
END_TEST

START_TEST(test_vdso_functions_are_named_from_memory)
{
	uintptr_t vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
	if (!vdso)
		return; /* no vdso (some sandboxes): nothing to name */
	int idx = symbolizer_find_mapping(sym, vdso);
	ck_assert_int_ge(idx, 0);
	const struct sym_mapping *m = symbolizer_mapping(sym, idx);
	ck_assert_str_eq(m->path, "[vdso]");
	ck_assert_uint_gt(strlen(m->build_id), 0);
	bool clock_gettime_seen = false;
	for (uintptr_t pc = m->start; pc < m->end; pc += 2) {
		struct sym_frame fr[SYM_MAX_FRAMES];
		size_t n = frames_of(pc, false, fr);
		if (n && strstr(fr[n - 1].function, "clock_gettime"))
			clock_gettime_seen = true;
	}
	ck_assert_msg(clock_gettime_seen, "no vdso pc named *clock_gettime*");
}
END_TEST

/* A fixture library whose function must be named with its file and line: DWARF in the
 * file its .gnu_debuglink names, or compressed in the library. */
static void check_fixture_lines(const char *lib)
{
	char path[PATH_MAX];
	fixture_path(lib, path, sizeof(path));
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h != NULL, "dlopen: %s", dlerror());
	void *(*work_pc)(void) = (void *(*)(void))dlsym(h, "symfix_work_pc");
	int *line = dlsym(h, "symfix_work_line");
	ck_assert(work_pc && line);
	uintptr_t pc = (uintptr_t)work_pc();
	ck_assert_int_gt(symbolizer_refresh(sym), 0);
	struct sym_frame fr[SYM_MAX_FRAMES];
	ck_assert_uint_eq(frames_of(pc, true, fr), 1);
	assert_frame(&fr[0], "hidden_work", "symfix.c", *line);
	ck_assert_int_eq(symbolizer_mapping_debug_info(sym, symbolizer_find_mapping(sym, pc)), 1);
	dlclose(h);
}

START_TEST(test_small_compressed_dwarf_gives_lines)
{
	/* Under the decompression budget (agent/symbolize/sym_dwarf.c). */
	check_fixture_lines("libsymfix_gz.so");
}
END_TEST

START_TEST(test_debug_file_found_through_gnu_debuglink_by_build_id)
{
	check_fixture_lines("libsymfix_linked.so");
}
END_TEST

START_TEST(test_debug_file_found_through_gnu_debuglink_by_crc)
{
	check_fixture_lines("libsymfix_crc.so"); /* neither file has a build id */
}
END_TEST

START_TEST(test_debuginfod_is_never_asked)
{
	/* A debuginfod "server" on loopback: a module without local debug info must not
	 * make the symbolizer connect to it (downloads inside the profiled process). */
	int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(l, 8), 0);
	ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &alen), 0);
	char url[64], cache[] = "/tmp/symfix-debuginfodXXXXXX";
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(a.sin_port));
	ck_assert_ptr_nonnull(mkdtemp(cache));
	setenv("DEBUGINFOD_URLS", url, 1);
	setenv("DEBUGINFOD_CACHE_PATH", cache, 1);
	setenv("DEBUGINFOD_TIMEOUT", "2", 1);

	char path[PATH_MAX];
	fixture_path("libsymfix_stripped.so", path, sizeof(path));
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h != NULL, "dlopen: %s", dlerror());
	uintptr_t (*addr)(void) = (uintptr_t(*)(void))dlsym(h, "symfix_hidden_addr");
	ck_assert_int_gt(symbolizer_refresh(sym), 0);
	struct sym_frame fr[SYM_MAX_FRAMES];
	ck_assert_uint_eq(frames_of(addr() + 1, false, fr), 0);
	int c = accept(l, NULL, NULL);
	ck_assert_msg(c < 0, "the symbolizer connected to the debuginfod server %s", url);
	unsetenv("DEBUGINFOD_URLS");
	unsetenv("DEBUGINFOD_CACHE_PATH");
	unsetenv("DEBUGINFOD_TIMEOUT");
	close(l);
	rmdir(cache);
	dlclose(h);
}
END_TEST

struct bt {
	void *pcs[32];
	int n;
};

static void *bt_thread(void *arg)
{
	struct bt *b = arg;
	b->n = backtrace(b->pcs, 32);
	return NULL;
}

/* /usr/lib/debug/.build-id/xx/yyyy.debug of a build id, when it exists. */
static bool debug_file_exists(const char *build_id)
{
	char path[PATH_MAX];
	if (strlen(build_id) < 3)
		return false;
	snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%.2s/%s.debug", build_id,
		 build_id + 2);
	return access(path, R_OK) == 0;
}

START_TEST(test_libc_thread_roots_are_named_with_libc6_dbg)
{
	/* libc's own pthread_create, not an interposer (a sanitizer's, ours). */
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(libc);
	void *libc_fn = dlsym(libc, "pthread_create");
	dlclose(libc);
	int idx = symbolizer_find_mapping(sym, (uintptr_t)libc_fn);
	ck_assert_int_ge(idx, 0);
	const char *bid = symbolizer_mapping(sym, idx)->build_id;
	if (!debug_file_exists(bid)) {
		fprintf(stderr,
			"test_symbolizer: libc6-dbg not installed (no debug file for "
			"build id %s): libc-internal names not checked\n",
			bid);
		return;
	}
	struct bt b = {.n = 0};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, bt_thread, &b), 0);
	pthread_join(t, NULL);
	ck_assert_int_ge(b.n, 3);
	bool start_thread = false, clone3 = false;
	for (int i = 0; i < b.n; i++) {
		struct sym_frame fr[SYM_MAX_FRAMES];
		size_t n = frames_of((uintptr_t)b.pcs[i], true, fr);
		if (n == 0)
			continue;
		const struct sym_frame *f = &fr[n - 1];
		if (strcmp(f->function, "start_thread") == 0) {
			start_thread = true;
			/* libc6-dbg's DWARF is ~10 MB once decompressed, over the budget
			 * (agent/symbolize/sym_dwarf.c): names from its symbol table, no lines. */
			ck_assert_ptr_null(f->file);
			ck_assert_int_eq(f->line, 0);
		}
		clone3 |= strcmp(f->function, "clone3") == 0;
	}
	ck_assert_msg(start_thread && clone3, "thread roots named: start_thread %d, clone3 %d",
		      start_thread, clone3);
	ck_assert_int_eq(symbolizer_mapping_debug_info(sym, idx), 0);
}
END_TEST

START_TEST(test_names_only_mode_names_without_lines)
{
	symbolizer_set_names_only(sym, true);
	uintptr_t pc = (uintptr_t)host_fn();
	struct sym_frame fr[SYM_MAX_FRAMES];
	size_t n = frames_of(pc, true, fr);
	ck_assert_msg(n == 1, "%zu frames in names-only mode, expected the function alone", n);
	ck_assert_str_eq(fr[0].function, "sym_inline_host");
	ck_assert_ptr_null(fr[0].file);
	ck_assert_int_eq(fr[0].line, 0);
	struct symbolizer_stats st;
	symbolizer_get_stats(sym, &st);
	ck_assert_uint_eq(st.dwarf_lookups, 0);
	/* libc-internal names still come from the debug file's symbol table. */
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *libc_fn = dlsym(libc, "pthread_create");
	dlclose(libc);
	int idx = symbolizer_find_mapping(sym, (uintptr_t)libc_fn);
	ck_assert_int_ge(idx, 0);
	if (!debug_file_exists(symbolizer_mapping(sym, idx)->build_id))
		return;
	struct bt b = {.n = 0};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, bt_thread, &b), 0);
	pthread_join(t, NULL);
	bool start_thread = false;
	for (int i = 0; i < b.n; i++) {
		n = frames_of((uintptr_t)b.pcs[i], true, fr);
		start_thread |=
		    n == 1 && strcmp(fr[0].function, "start_thread") == 0 && !fr[0].file;
	}
	ck_assert_msg(start_thread, "start_thread not named in names-only mode");
}
END_TEST

START_TEST(test_warm_reads_a_table_once_then_lookups_read_none)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *libc_fn = dlsym(libc, "pthread_create");
	dlclose(libc);
	struct symbolizer_stats st0, st;
	symbolizer_get_stats(sym, &st0);
	ck_assert_int_eq(symbolizer_warm(sym, (uintptr_t)libc_fn), 1);
	symbolizer_get_stats(sym, &st);
	ck_assert_uint_eq(st.tables_read, st0.tables_read + 1);
	/* Nothing looked up or cached: only the table. */
	ck_assert_uint_eq(st.lookups, st0.lookups);
	ck_assert_uint_eq(st.cache_entries, st0.cache_entries);
	ck_assert_int_eq(symbolizer_warm(sym, (uintptr_t)libc_fn + 16), 0);
	void *heap = malloc(64);
	ck_assert_int_eq(symbolizer_warm(sym, (uintptr_t)heap), -ENOENT);
	free(heap);
	/* A names-only miss in the warmed module (a fork child's exit) reads no table. */
	symbolizer_set_names_only(sym, true);
	struct sym_frame fr[SYM_MAX_FRAMES];
	size_t n = frames_of((uintptr_t)libc_fn, false, fr);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(fr[0].function, "pthread_create");
	symbolizer_get_stats(sym, &st);
	ck_assert_uint_eq(st.tables_read, st0.tables_read + 1);
	ck_assert_uint_eq(st.lookups, st0.lookups + 1);
}
END_TEST

/* Whether libdw is mapped (the probe's own reference is dropped again). */
static bool libdw_loaded(void)
{
	void *h = dlopen("libdw.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (h)
		dlclose(h);
	return h != NULL;
}

START_TEST(test_release_unloads_libdw_and_a_miss_loads_it_again)
{
	struct sym_frame fr[SYM_MAX_FRAMES];
	uintptr_t plain = (uintptr_t)plain_fn();
	ck_assert_uint_eq(frames_of(plain, true, fr), 1);
	ck_assert(libdw_loaded());
	symbolizer_release_dwarf(sym);
	ck_assert_msg(!libdw_loaded(), "libdw still loaded after the release");
	/* The cache answers what was named; a new pc loads libdw again, lines included. */
	ck_assert_uint_eq(frames_of(plain, true, fr), 1);
	assert_frame(&fr[0], "sym_plain_target", THIS_FILE, plain_line);
	ck_assert_msg(!libdw_loaded(), "a cached pc loaded libdw");
	uintptr_t pc = (uintptr_t)host_fn();
	ck_assert_uint_eq(frames_of(pc, true, fr), 2);
	assert_frame(&fr[0], "sym_inlined_leaf", THIS_FILE, leaf_line);
	ck_assert(libdw_loaded());
}
END_TEST

/* Replaces the fixture's symbolizer by one that cannot load libdw. */
static void use_symbolizer_without_libdw(void)
{
	symbolizer_free(sym);
	dw_api_test_reset(MISSING_LIBDW);
	sym = symbolizer_new();
	ck_assert_ptr_nonnull(sym);
	ck_assert_int_gt(symbolizer_refresh(sym), 0);
}

START_TEST(test_without_libdw_names_come_from_elf_symbol_tables)
{
	use_symbolizer_without_libdw();
	struct sym_frame fr[SYM_MAX_FRAMES];
	uintptr_t plain = (uintptr_t)plain_fn(), host = (uintptr_t)host_fn();
	ck_assert_uint_eq(frames_of(plain, true, fr), 1);
	ck_assert_str_eq(fr[0].function, "sym_plain_target");
	ck_assert_ptr_null(fr[0].file);
	ck_assert_int_eq(fr[0].line, 0);
	/* No DWARF, no inlined frame: the function holding the code. */
	ck_assert_uint_eq(frames_of(host, true, fr), 1);
	ck_assert_str_eq(fr[0].function, "sym_inline_host");
	ck_assert_uint_eq(frames_of((uintptr_t)symfix_cxx_pc(), true, fr), 1);
	ck_assert_str_eq(fr[0].function, CXX_NAME);
	struct symbolizer_stats s;
	symbolizer_get_stats(sym, &s);
	ck_assert(!s.libdw);
	ck_assert_uint_eq(s.dwarf_lookups, 0);
	ck_assert_uint_eq(s.elf_lookups, 3);
	ck_assert_int_eq(symbolizer_mapping_debug_info(sym, symbolizer_find_mapping(sym, plain)),
			 0);
}
END_TEST

/* A pc at entry + delta of the stripped fixture program, noted at FAKE_BASE. */
static uintptr_t note_stripped_program(uint64_t delta)
{
	char path[PATH_MAX];
	fixture_path("symfix_stripped_exe", path, sizeof(path));
	struct sym_elf_info info;
	ck_assert_int_eq(sym_elf_read_info(path, &info), 0);
	ck_assert(info.is_program);
	for (size_t i = 0; i < info.nloads; i++) {
		const struct sym_elf_load *l = &info.loads[i];
		if (info.entry < l->vaddr || info.entry >= l->vaddr + l->filesz)
			continue;
		uintptr_t file_off = l->offset & ~(uint64_t)0xfff;
		ck_assert_int_ge(symbolizer_note_module(sym, path, FAKE_BASE,
							FAKE_BASE + (l->filesz + 0x2000), file_off),
				 0);
		return FAKE_BASE + (info.entry + delta - l->vaddr) + (l->offset - file_off);
	}
	ck_abort_msg("no segment holds the entry point of %s", path);
	return 0;
}

static void check_entry_rule(void)
{
	struct sym_frame fr[SYM_MAX_FRAMES];
	/* _start calls __libc_start_main ~30 bytes in: a return address there. */
	uintptr_t pc = note_stripped_program(30);
	ck_assert_uint_eq(frames_of(pc, true, fr), 1);
	ck_assert_str_eq(fr[0].function, "_start");
	ck_assert_uint_eq(frames_of(pc - 30, false, fr), 1);
	ck_assert_str_eq(fr[0].function, "_start");
	/* Past the window (64 bytes) it is not _start any more. */
	size_t n = frames_of(pc - 30 + 64, false, fr);
	ck_assert_msg(n == 0 || strcmp(fr[0].function, "_start") != 0, "entry + 64 named _start");
}

/* A fork child whose parent's profiler thread may have been inside libdw never calls it
 * (a lock or a one-time initialization may be held by a thread that is not there): it
 * names from ELF symbol tables. */
START_TEST(test_forbidden_libdw_names_from_symbol_tables)
{
	symbolizer_free(sym);
	dw_api_test_reset(NULL);
	dw_api_forbid_after_fork();
	ck_assert_ptr_null(dw_api_get());
	sym = symbolizer_new();
	ck_assert_ptr_nonnull(sym);
	ck_assert_int_gt(symbolizer_refresh(sym), 0);
	struct sym_frame fr[SYM_MAX_FRAMES];
	ck_assert_uint_eq(frames_of((uintptr_t)plain_fn(), true, fr), 1);
	ck_assert_str_eq(fr[0].function, "sym_plain_target");
	ck_assert_ptr_null(fr[0].file);
	struct symbolizer_stats st;
	symbolizer_get_stats(sym, &st);
	ck_assert(!st.libdw);
	ck_assert_uint_eq(st.dwarf_lookups, 0);
}
END_TEST

START_TEST(test_entry_code_of_a_stripped_program_is_start)
{
	check_entry_rule();
}
END_TEST

START_TEST(test_entry_rule_without_libdw)
{
	use_symbolizer_without_libdw();
	check_entry_rule();
}
END_TEST

/* Writes len bytes of data (or of src's start when data is NULL) to a temp file. */
static void write_temp(char *path, const void *data, size_t len, const char *src)
{
	char buf[4096];
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	if (!data) {
		int in = open(src, O_RDONLY);
		ck_assert_int_ge(in, 0);
		ck_assert_int_eq(read(in, buf, len), (ssize_t)len);
		close(in);
		data = buf;
	}
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
}

START_TEST(test_malformed_files_do_not_crash)
{
	char lib[PATH_MAX], garbage[] = "/tmp/symfix-garbageXXXXXX",
			    truncated[] = "/tmp/symfix-truncatedXXXXXX";
	fixture_path("libsymfix.so", lib, sizeof(lib));
	unsigned char junk[2048];
	memcpy(junk, "\177ELF\2\1\1", 7);
	for (size_t i = 7; i < sizeof(junk); i++)
		junk[i] = (unsigned char)(i * 131 + 7);
	write_temp(garbage, junk, sizeof(junk), NULL);
	write_temp(truncated, NULL, 1024, lib); /* headers, then nothing */
	const char *files[] = {garbage, truncated};
	struct symbolizer_stats s0, s1;
	symbolizer_get_stats(sym, &s0);
	for (size_t i = 0; i < 2; i++) {
		uintptr_t base = FAKE_BASE + i * 0x100000;
		ck_assert_int_ge(symbolizer_note_module(sym, files[i], base, base + 0x10000, 0), 0);
		for (uintptr_t pc = base; pc < base + 0x10000; pc += 0x101) {
			struct sym_frame fr[SYM_MAX_FRAMES];
			ck_assert_uint_eq(frames_of(pc, true, fr), 0);
		}
	}
	symbolizer_get_stats(sym, &s1);
	ck_assert_uint_gt(s1.errors, s0.errors);
	unlink(garbage);
	unlink(truncated);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("symbolizer");
	TCase *tc = tcase_create("symbolize");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_function_file_and_line_of_this_binary);
	tcase_add_test(tc, test_always_inline_function_is_a_frame_of_its_own);
	tcase_add_test(tc, test_cxx_names_are_demangled);
	tcase_add_test(tc, test_stripped_library_pc_keeps_module_and_offset);
	tcase_add_test(tc, test_second_lookup_of_a_pc_does_no_dwarf_work);
	tcase_add_test(tc, test_cache_over_budget_is_cleared_at_refresh);
	tcase_add_test(tc, test_noted_module_symbolizes_a_dlclosed_library);
	tcase_add_test(tc, test_note_module_refuses_bad_and_overlapping_ranges);
	tcase_add_test(tc, test_libc_thread_roots_are_named_with_libc6_dbg);
	tcase_add_test(tc, test_debug_file_found_through_gnu_debuglink_by_build_id);
	tcase_add_test(tc, test_debug_file_found_through_gnu_debuglink_by_crc);
	tcase_add_test(tc, test_debuginfod_is_never_asked);
	tcase_add_test(tc, test_vdso_functions_are_named_from_memory);
	tcase_add_test(tc, test_without_libdw_names_come_from_elf_symbol_tables);
	tcase_add_test(tc, test_forbidden_libdw_names_from_symbol_tables);
	tcase_add_test(tc, test_entry_code_of_a_stripped_program_is_start);
	tcase_add_test(tc, test_entry_rule_without_libdw);
	tcase_add_test(tc, test_malformed_files_do_not_crash);
	tcase_add_test(tc, test_names_only_mode_names_without_lines);
	tcase_add_test(tc, test_warm_reads_a_table_once_then_lookups_read_none);
	tcase_add_test(tc, test_small_compressed_dwarf_gives_lines);
	tcase_add_test(tc, test_release_unloads_libdw_and_a_miss_loads_it_again);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
