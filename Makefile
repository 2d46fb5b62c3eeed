# libddprof build. `make` builds build/libddprof.so; `make check` installs what is
# missing, builds, and runs every test; `make demo` profiles a bundled workload.

CC ?= cc
BUILD := build
VERSION := $(shell cat VERSION)

WARN := -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes
BASE_CFLAGS := -std=gnu11 -O2 -g -pthread -fPIC $(WARN) -fno-omit-frame-pointer \
	-D_GNU_SOURCE -DDDPROF_VERSION=\"$(VERSION)\" -I.
# Only the interposed libc functions and the public API (DDPROF_EXPORT) are exported.
LIB_CFLAGS := $(BASE_CFLAGS) -fvisibility=hidden -fno-plt
LIB_LDLIBS := -ldl -lrt -pthread
# libelf and zlib are not linked into the library (libdw and libz are dlopen'd by the
# uploader); the tests' own tools (the pprof reader, ELF checks) link them.
TEST_LDLIBS := $(LIB_LDLIBS) -lelf -lz
# FORK_CHILD_DATA on a page of its own (common/fork_child.ld), in the library and in the
# unit tests that check it.
FORK_LD := -Wl,-T,common/fork_child.ld

LIB_SRCS := $(wildcard common/*.c) $(wildcard agent/*.c) $(wildcard agent/*/*.c) \
	$(wildcard uploader/*.c) $(wildcard preload/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
# Everything but the interposition layer, for unit tests.
CORE_OBJS := $(filter-out $(BUILD)/obj/preload/%,$(LIB_OBJS))

UNIT_SRCS := $(wildcard test/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:test/unit/%.c=$(BUILD)/test/%)
TOOL_LIB_SRCS := $(filter-out test/tools/pprof_dump.c,$(wildcard test/tools/*.c))
TOOL_LIB_OBJS := $(TOOL_LIB_SRCS:%.c=$(BUILD)/obj/%.o)
# Built with their own flags below: shared objects, and code without frame pointers.
WORKLOAD_SPECIAL := test/workloads/early_thread.c test/workloads/libchurn.c \
	test/workloads/omitfp_threads.c test/workloads/stop_at_exit.c \
	test/workloads/libwrapcreate.c test/workloads/wrap_create.c \
	test/workloads/liballoc_caller.c test/workloads/liballoc_slowreloc.c \
	test/workloads/libctor_apply.c test/workloads/alloc_nopie.c test/workloads/got_patch_shim.c \
	test/workloads/liballoc_plugin.c test/workloads/liballoc_early.c
WORKLOAD_SRCS := $(filter-out $(WORKLOAD_SPECIAL),$(wildcard test/workloads/*.c))
WORKLOAD_BINS := $(WORKLOAD_SRCS:test/workloads/%.c=$(BUILD)/workloads/%) \
	$(BUILD)/workloads/omitfp_threads $(BUILD)/workloads/libchurn.so \
	$(BUILD)/workloads/wrap_create $(BUILD)/workloads/liballoc_plugin.so \
	$(BUILD)/workloads/alloc_cxx $(BUILD)/workloads/liballoc_early.so

# cgo Go programs (test/workloads/go, standard library only): built when go is installed
# (golang-go, which scripts/install-deps installs for `go tool pprof`). Go 1.19 ships
# the standard library compiled: from an empty cache the two take about 2 s of CPU
# (2-4 s wall on a loaded 2-core VM, next to 16-17 s for the rest of a fresh `make`),
# from a warm one 0.1 s. The caches stay under build/ so that rebuilds and CI reuse them.
GO := $(shell command -v go 2>/dev/null)
GO_WORKLOADS := $(if $(GO),$(BUILD)/workloads/go-spin $(BUILD)/workloads/go-pprof)

CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lm -lrt)

.PHONY: all deps check unit tsan integration demo clean format guards bench
all: $(BUILD)/libddprof.so $(BUILD)/pprof-dump $(WORKLOAD_BINS) $(BUILD)/workloads/libearly_thread.so \
	$(BUILD)/workloads/libstop_at_exit.so $(GO_WORKLOADS)

deps:
	@bash scripts/install-deps

# Header dependencies come from the compiler (-MMD: one .d beside each object).
DEPFLAGS := -MMD -MP

$(BUILD)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(LIB_CFLAGS) $(DEPFLAGS) -c $< -o $@

# -z noseparate-code: headers, dynamic symbols and code in one mapping. A fork child
# of a preloaded process looks every symbol it binds lazily (exit, at the least) up in
# our hash table first; in the code's mapping, the fault that maps our fork handler's
# code maps the table's page too (fault-around): one page fault less per child.
# -z nodelete: a dlclose never unmaps us (timers and handlers run our code, and the
# handler reads our CFI from memory before tables exist: agent/unwind/boot_cfi.h).
$(BUILD)/libddprof.so: $(LIB_OBJS) common/fork_child.ld
	@echo "  LD      $@"
	@$(CC) -shared -o $@ $(LIB_OBJS) $(FORK_LD) -Wl,-z,now -Wl,-z,noseparate-code -Wl,-z,nodelete \
		-Wl,--no-undefined -Wl,-z,start-stop-visibility=hidden -Wl,-fini=preload_dt_fini \
		$(LIB_LDLIBS)

$(BUILD)/libddprof_core.a: $(CORE_OBJS)
	@rm -f $@
	@ar rcs $@ $^

$(BUILD)/test/%: test/unit/%.c $(BUILD)/libddprof_core.a $(TOOL_LIB_OBJS) common/fork_child.ld
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(BASE_CFLAGS) $(DEPFLAGS) $< $(TOOL_LIB_OBJS) $(BUILD)/libddprof_core.a -o $@ $(FORK_LD) \
		$(CHECK_LIBS) $(TEST_LDLIBS)

# The symbolizer suite links a C++ object (demangling) and loads fixtures: a -g
# library (noted after dlclose), its stripped twin, a stripped program (the _start rule).
# Fixtures are -O0: no IPA clones renaming their functions.
SYMFIX_DIR := $(BUILD)/test/symfix
SYMFIX := $(SYMFIX_DIR)/libsymfix.so $(SYMFIX_DIR)/libsymfix_stripped.so \
	$(SYMFIX_DIR)/symfix_stripped_exe $(SYMFIX_DIR)/libsymfix_linked.so \
	$(SYMFIX_DIR)/libsymfix_crc.so $(SYMFIX_DIR)/libsymfix_gz.so
$(BUILD)/test/test_symbolizer: test/unit/test_symbolizer.c $(SYMFIX_DIR)/symfix_cxx.o $(SYMFIX) \
		$(BUILD)/libddprof_core.a $(TOOL_LIB_OBJS)
	@echo "  CC      $@"
	@$(CC) $(BASE_CFLAGS) $< $(SYMFIX_DIR)/symfix_cxx.o $(TOOL_LIB_OBJS) \
		$(BUILD)/libddprof_core.a -o $@ $(CHECK_LIBS) $(TEST_LDLIBS)

$(SYMFIX_DIR)/symfix_cxx.o: test/unit/fixtures/symfix_cxx.cc
	@mkdir -p $(dir $@)
	@echo "  CXX     $@"
	@$(CXX) -O2 -g -fno-exceptions -fno-rtti -Wall -Werror -c $< -o $@

$(SYMFIX_DIR)/libsymfix.so: test/unit/fixtures/symfix.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O0 -g -fvisibility=hidden -Wall -Werror $< -o $@

# Its DWARF compressed (zlib): small enough for the decompression budget.
$(SYMFIX_DIR)/libsymfix_gz.so: test/unit/fixtures/symfix.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O0 -g -gz=zlib -fvisibility=hidden -Wall -Werror $< -o $@

$(SYMFIX_DIR)/libsymfix_stripped.so: $(SYMFIX_DIR)/libsymfix.so
	@strip --strip-all -o $@ $<

# Debug info only in a separate file named by .gnu_debuglink, matched by build id (the
# first) or by the link's CRC (the second, built without build ids).
$(SYMFIX_DIR)/libsymfix_linked.so: $(SYMFIX_DIR)/libsymfix.so
	@cd $(SYMFIX_DIR) && objcopy --only-keep-debug libsymfix.so libsymfix_linked.debug && \
		objcopy --strip-debug --add-gnu-debuglink=libsymfix_linked.debug libsymfix.so \
		libsymfix_linked.so

$(SYMFIX_DIR)/libsymfix_crc.so: test/unit/fixtures/symfix.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O0 -g -fvisibility=hidden -Wl,--build-id=none -Wall -Werror $< \
		-o $(SYMFIX_DIR)/libsymfix_nobid.so
	@cd $(SYMFIX_DIR) && objcopy --only-keep-debug libsymfix_nobid.so libsymfix_crc.debug && \
		objcopy --strip-debug --add-gnu-debuglink=libsymfix_crc.debug libsymfix_nobid.so \
		libsymfix_crc.so

$(SYMFIX_DIR)/symfix_stripped_exe: test/unit/fixtures/symfix.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -O0 -s -DSYMFIX_MAIN -Wall -Werror $< -o $@

$(BUILD)/pprof-dump: test/tools/pprof_dump.c $(TOOL_LIB_OBJS)
	@echo "  CC      $@"
	@$(CC) $(BASE_CFLAGS) $^ -o $@ -lz

# Workloads keep frame pointers so the frame-pointer unwinder sees whole stacks.
$(BUILD)/workloads/%: test/workloads/%.c preload/ddprof.h test/workloads/agent_diag.h
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -O2 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-shrink-wrap -fno-optimize-sibling-calls -pthread -Wall -Werror $(DEPFLAGS) $< -o $@ -lm

# What most distribution binaries look like: no frame pointers, CFI only.
$(BUILD)/workloads/omitfp_threads: test/workloads/omitfp_threads.c preload/ddprof.h
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -O2 -g -fomit-frame-pointer -pthread -Wall -Werror $< -o $@ -ldl

$(BUILD)/workloads/liballoc_plugin.so: test/workloads/liballoc_plugin.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -Wall -Werror $< -o $@

# C++ allocations (operator new/delete through libstdc++); -O1: no new/delete pair elided.
$(BUILD)/workloads/alloc_cxx: test/workloads/alloc_cxx.cc
	@mkdir -p $(dir $@)
	@echo "  CXX     $@"
	@$(CXX) -O1 -g -fno-omit-frame-pointer -std=c++17 -Wall -Werror $< -o $@

# A library whose constructor starts an allocating thread before libddprof's runs.
$(BUILD)/workloads/liballoc_early.so: test/workloads/liballoc_early.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -fno-builtin -pthread -Wall -Werror $< -o $@ -ldl

$(BUILD)/workloads/libchurn.so: test/workloads/libchurn.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O2 -g -fomit-frame-pointer -Wall -Werror $< -o $@

# A library that wraps pthread_create under its own mutex, and its program.
$(BUILD)/workloads/libwrapcreate.so: test/workloads/libwrapcreate.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O2 -g -pthread -Wall -Werror $< -o $@ -ldl

$(BUILD)/workloads/wrap_create: test/workloads/wrap_create.c $(BUILD)/workloads/libwrapcreate.so
	@echo "  CC      $@"
	@$(CC) -O2 -g -fno-omit-frame-pointer -pthread -Wall -Werror $< -o $@ \
		-L$(BUILD)/workloads -lwrapcreate -Wl,-rpath,'$$ORIGIN'

$(BUILD)/workloads/libearly_thread.so: test/workloads/early_thread.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O2 -g -fno-omit-frame-pointer -pthread -Wall -Werror $< -o $@

$(BUILD)/workloads/libstop_at_exit.so: test/workloads/stop_at_exit.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O2 -g -Wall -Werror $< -o $@

# `import "C"`: cgo binaries, linked against libc (LD_PRELOAD applies, the runtime sets
# its signal handlers through libc's sigaction). No network: GOPROXY=off, no VCS stamp.
$(BUILD)/workloads/go-%: test/workloads/go/%/main.go test/workloads/go/go.mod
	@mkdir -p $(dir $@)
	@echo "  GO      $@"
	@cd test/workloads/go && CGO_ENABLED=1 CC="$(CC)" GOFLAGS=-buildvcs=false GOPROXY=off \
		GO111MODULE=on GOCACHE=$(abspath $(BUILD))/go-cache GOPATH=$(abspath $(BUILD))/go-path \
		go build -o $(abspath $@) ./$*

unit: $(UNIT_BINS)
	@bash scripts/run-unit $(UNIT_BINS)

# ThreadSanitizer build of the lock-free structures and their stress tests.
TSAN_TESTS := test_bg_host test_live_table test_live_table_signals test_live_table_stress test_live_heap_stress test_trie test_profile_swap test_region test_region_stress test_modules test_thread_start \
	test_app_signals \
	test_threads test_lock_sample test_wall_clock test_wall_threads
TSAN_CORE := common/log.c common/bg_host.c common/process_start.c common/mem_populate.c common/own_thread.c agent/store/region.c \
	agent/store/trie.c agent/store/profiles.c agent/store/profile_types.c agent/alloc/live_table.c agent/alloc/live_heap.c \
	agent/alloc/alloc_sample.c agent/lock/lock_sample.c agent/wall/wall_clock.c agent/wall/wall_threads.c
# The module map's publication and grace period (plus what modules.c and
# modules_service.c call).
TSAN_MODULES := agent/unwind/modules.c agent/unwind/modules_service.c agent/unwind/module_map.c agent/store/grace.c agent/unwind/cfi_table.c agent/unwind/cfi_roots.c \
	agent/unwind/cfi_parse.c agent/sample/fork_local.c agent/unwind/elf_image.c \
	agent/sample/sampler.c agent/unwind/stack_bounds.c agent/unwind/stack_ranges.c \
	agent/unwind/unwind_dwarf.c agent/sample/thread_start.c agent/sample/threads.c agent/sample/thread_names.c common/u64map.c common/big_alloc.c \
	agent/unwind/cfi_cache.c agent/unwind/cfi_cache_file.c common/fs.c agent/unwind/boot_cfi.c agent/unwind/cfi_lookup.c \
	agent/unwind/cfi_decode.c agent/sample/app_signals.c agent/sample/sandbox.c common/identity.c \
	common/sort.c
# The sources are compiled once and linked into every suite (each suite compiled them
# all again before: most of the stage's time).
TSAN_CFLAGS := -std=gnu11 -O1 -g -fsanitize=thread -pthread -D_GNU_SOURCE -I. -DDDPROF_TSAN=1
TSAN_OBJS := $(patsubst %.c,$(BUILD)/tsan/obj/%.o,$(TSAN_CORE) $(TSAN_MODULES))
TSAN_BINS := $(addprefix $(BUILD)/tsan/,$(TSAN_TESTS))
.SECONDARY: $(TSAN_OBJS)

$(BUILD)/tsan/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	@echo "  TSAN-CC $<"
	@clang $(TSAN_CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/tsan/test_%: test/unit/test_%.c $(TSAN_OBJS)
	@mkdir -p $(dir $@)
	@echo "  TSAN-LD $@"
	@clang $(TSAN_CFLAGS) $(DEPFLAGS) $< $(TSAN_OBJS) -o $@ $(CHECK_LIBS) -lelf -ldl

tsan: $(BUILD)/workloads/libchurn.so $(TSAN_BINS)
	@bash scripts/run-unit --tsan $(TSAN_BINS)

# ---------------------------------------------------------------- sanitizer builds
# One block for `make asan` and `make fuzz` (both stages of `make check`).
# make asan: the library's sources and every unit suite built with AddressSanitizer and
# UndefinedBehaviorSanitizer (any UB report is fatal), the suites run; then the
# library itself, build/asan/libddprof.so, preloaded after the ASan runtime into a set
# of integration tests (scripts/run-asan). clang, as for tsan and fuzz: its shared
# runtime (-shared-libasan), which programs built without ASan can preload, holds UBSan
# too, so that both write their reports where log_path says (gcc's separate libubsan
# writes to stderr whatever the options say).
# make fuzz: every test/fuzz/fuzz_*.c, built with libFuzzer against the library's
# sources but preload/ (a static library: the linker takes what a target needs), run
# FUZZ_SECONDS each from a copy of its seed corpus test/fuzz/corpus/<name>/
# (scripts/run-fuzz). Longer runs: make fuzz FUZZ_SECONDS=300.
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
ASAN_CC := clang
ASAN_DIR := $(BUILD)/asan
# -gdwarf-aranges: the symbolizer suites name their own code, and libdw 0.188 (Debian
# 12) finds a pc's compile unit only through .debug_aranges, which clang emits only
# when asked (gcc always does).
ASAN_CFLAGS := $(LIB_CFLAGS) -O1 -gdwarf-aranges $(SAN_FLAGS)
ASAN_LIB_OBJS := $(LIB_SRCS:%.c=$(ASAN_DIR)/obj/%.o)
ASAN_CORE_OBJS := $(filter-out $(ASAN_DIR)/obj/preload/%,$(ASAN_LIB_OBJS))
ASAN_TOOL_OBJS := $(TOOL_LIB_SRCS:%.c=$(ASAN_DIR)/obj/%.o)
ASAN_UNIT_BINS := $(UNIT_SRCS:test/unit/%.c=$(ASAN_DIR)/test/%)
ASAN_RUNTIME = $(shell $(ASAN_CC) -print-file-name=libclang_rt.asan-x86_64.so)
# The suites use the shared runtime too, as the preloaded library does in the
# integration tests: with the static one the executable itself defines malloc.
ASAN_SUITE_LDFLAGS = -shared-libasan -Wl,-rpath,$(dir $(ASAN_RUNTIME))
FUZZ_DIR := $(BUILD)/fuzz
FUZZ_SRCS := $(wildcard test/fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:test/fuzz/%.c=$(FUZZ_DIR)/%)
FUZZ_OBJS := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(filter-out preload/%,$(LIB_SRCS)))
FUZZ_SECONDS ?= 20
FUZZ_CC := clang

.PHONY: asan fuzz

$(ASAN_DIR)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	@echo "  ASAN-CC $<"
	@$(ASAN_CC) $(ASAN_CFLAGS) $(DEPFLAGS) -c $< -o $@

$(ASAN_DIR)/libddprof.so: $(ASAN_LIB_OBJS) common/fork_child.ld
	@echo "  LD      $@"
	@$(ASAN_CC) -shared -shared-libasan $(SAN_FLAGS) -o $@ $(ASAN_LIB_OBJS) $(FORK_LD) \
		-Wl,-z,now -Wl,-z,noseparate-code -Wl,-z,nodelete -Wl,--no-undefined \
		-Wl,-z,start-stop-visibility=hidden -Wl,-fini=preload_dt_fini $(LIB_LDLIBS)

$(ASAN_DIR)/libddprof_core.a: $(ASAN_CORE_OBJS)
	@rm -f $@
	@ar rcs $@ $^

$(ASAN_DIR)/test/%: test/unit/%.c $(ASAN_DIR)/libddprof_core.a $(ASAN_TOOL_OBJS) common/fork_child.ld
	@mkdir -p $(dir $@)
	@echo "  ASAN-CC $@"
	@$(ASAN_CC) $(ASAN_CFLAGS) $(ASAN_SUITE_LDFLAGS) $< $(ASAN_TOOL_OBJS) \
		$(ASAN_DIR)/libddprof_core.a -o $@ $(FORK_LD) $(CHECK_LIBS) $(TEST_LDLIBS)

# As $(BUILD)/test/test_symbolizer: its C++ object and fixtures are those of the
# normal build (the fixtures are the inputs it reads, not code under test; the suite
# looks for them in symfix/ next to itself).
$(ASAN_DIR)/test/test_symbolizer: test/unit/test_symbolizer.c $(SYMFIX_DIR)/symfix_cxx.o \
		$(SYMFIX) $(ASAN_DIR)/libddprof_core.a $(ASAN_TOOL_OBJS)
	@mkdir -p $(dir $@)
	@rm -rf $(ASAN_DIR)/test/symfix && cp -a $(SYMFIX_DIR) $(ASAN_DIR)/test/symfix
	@echo "  ASAN-CC $@"
	@$(ASAN_CC) $(ASAN_CFLAGS) $(ASAN_SUITE_LDFLAGS) $< $(SYMFIX_DIR)/symfix_cxx.o \
		$(ASAN_TOOL_OBJS) $(ASAN_DIR)/libddprof_core.a -o $@ $(CHECK_LIBS) $(TEST_LDLIBS) \
		-lstdc++

asan: all $(ASAN_UNIT_BINS) $(ASAN_DIR)/libddprof.so
	@bash scripts/run-asan $(ASAN_RUNTIME) $(ASAN_UNIT_BINS)

$(FUZZ_DIR)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	@echo "  FUZZ-CC $<"
	@$(FUZZ_CC) $(LIB_CFLAGS) -O1 -fsanitize=fuzzer-no-link $(SAN_FLAGS) $(DEPFLAGS) -c $< -o $@

$(FUZZ_DIR)/libddprof_fuzz.a: $(FUZZ_OBJS)
	@rm -f $@
	@ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: test/fuzz/fuzz_%.c $(FUZZ_DIR)/libddprof_fuzz.a
	@mkdir -p $(dir $@)
	@echo "  FUZZ-CC $@"
	@$(FUZZ_CC) -std=gnu11 -g -O1 -pthread -D_GNU_SOURCE -I. $(WARN) -fsanitize=fuzzer \
		$(SAN_FLAGS) $< $(FUZZ_DIR)/libddprof_fuzz.a -o $@ $(TEST_LDLIBS)

fuzz: $(FUZZ_BINS)
	@bash scripts/run-fuzz $(FUZZ_SECONDS) $(FUZZ_BINS)

# ---------------------------------------------------------------- end of sanitizer builds

# test_got_patch's libraries (both builds of the suite load them from build/workloads):
# the allocation functions called through the library's own GOT, with lazy binding,
# with full RELRO, and with full RELRO again, malloc through a JUMP_SLOT (loaded after a
# first patch); operator new and delete from C++ (-O0: no new/delete pair elided); a
# library the loader takes long to relocate (4096 PLT slots after malloc's; -O0 -g0:
# the fastest build of its 4096 functions, which the test does not time); a library
# whose constructor calls back into the test (which patches from there); a non-PIE
# program with a canonical PLT entry for malloc, patched through got_patch.c built into
# a library of its own (the patcher skips its own module).
# -fno-optimize-sibling-calls: the suite counts calls by their return address.
GOTFIX_CFLAGS := -shared -fPIC -O2 -g -fno-optimize-sibling-calls -Wall -Werror
GOTFIX := $(BUILD)/workloads/liballoc_lazy.so $(BUILD)/workloads/liballoc_now.so \
	$(BUILD)/workloads/liballoc_late.so $(BUILD)/workloads/libcxx_caller.so \
	$(BUILD)/workloads/liballoc_slowreloc.so $(BUILD)/workloads/libctor_apply.so \
	$(BUILD)/workloads/alloc_nopie
GOT_SHIM_SRCS := test/workloads/got_patch_shim.c agent/alloc/got_patch.c agent/alloc/got_image.c agent/alloc/got_write.c \
	common/dl_guard.c
$(BUILD)/workloads/libgot_patch_shim.so: $(GOT_SHIM_SRCS) $(wildcard agent/alloc/*.h common/*.h)
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(LIB_CFLAGS) -shared $(GOT_SHIM_SRCS) -o $@ $(LIB_LDLIBS)
$(BUILD)/workloads/alloc_nopie: test/workloads/alloc_nopie.c $(BUILD)/workloads/libgot_patch_shim.so
	@echo "  CC      $@"
	@$(CC) -O2 -g -fno-builtin -no-pie -fno-pie -Wall -Werror -I. $< -o $@ \
		-L$(BUILD)/workloads -lgot_patch_shim -Wl,-rpath,'$$ORIGIN'
$(BUILD)/workloads/libctor_apply.so: test/workloads/libctor_apply.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(GOTFIX_CFLAGS) $< -o $@
$(BUILD)/workloads/liballoc_lazy.so: test/workloads/liballoc_caller.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(GOTFIX_CFLAGS) -Wl,-z,lazy -Wl,-z,relro $< -o $@
$(BUILD)/workloads/liballoc_now.so: test/workloads/liballoc_caller.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(GOTFIX_CFLAGS) -Wl,-z,now -Wl,-z,relro $< -o $@
$(BUILD)/workloads/liballoc_late.so: test/workloads/liballoc_caller.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(GOTFIX_CFLAGS) -DALLOC_CALLER_PLT_ONLY -Wl,-z,now -Wl,-z,relro $< -o $@
$(BUILD)/workloads/liballoc_slowreloc.so: test/workloads/liballoc_slowreloc.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -shared -fPIC -O0 -g0 -Wall -Werror -Wl,-z,now -Wl,-z,relro $< -o $@
$(BUILD)/workloads/libcxx_caller.so: test/workloads/libcxx_caller.cc
	@mkdir -p $(dir $@)
	@echo "  CXX     $@"
	@$(CXX) -shared -fPIC -O0 -g -std=c++17 -Wall -Werror $< -o $@
$(BUILD)/test/test_got_patch $(ASAN_DIR)/test/test_got_patch $(BUILD)/test/test_got_patch_threads $(ASAN_DIR)/test/test_got_patch_threads: $(GOTFIX) test/unit/got_patch_fixture.h

integration: all
	@/usr/bin/python3 test/integration/run.py

# The benchmarks' programs are built too (never run): code they share with the library
# must not rot between two make bench runs.
check: deps
	@$(MAKE) --no-print-directory all $(UNIT_BINS) $(BENCH_BINS)
	@bash scripts/check-summary

demo: deps
	@$(MAKE) --no-print-directory all
	@bash scripts/demo

$(BUILD)/bench/bench_handler: scripts/bench/bench_handler.c $(BUILD)/libddprof_core.a
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(BASE_CFLAGS) $(DEPFLAGS) $< $(BUILD)/libddprof_core.a -o $@ $(LIB_LDLIBS)

# Benchmarks linking the core library (trie throughput, pprof serialization, the live
# heap's table: the last one is run by hand, scripts/bench/run does not).
$(BUILD)/bench/bench_trie $(BUILD)/bench/bench_serialize $(BUILD)/bench/bench_live_table: \
		$(BUILD)/bench/%: scripts/bench/%.c $(BUILD)/libddprof_core.a
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(BASE_CFLAGS) $< $(BUILD)/libddprof_core.a -o $@ $(LIB_LDLIBS)

# Programs run under LD_PRELOAD (no agent code inside), built like the workloads.
$(BUILD)/bench/fixed_work $(BUILD)/bench/bench_spawn $(BUILD)/bench/many_stacks \
		$(BUILD)/bench/maxrss $(BUILD)/bench/alloc_churn $(BUILD)/bench/lock_pair: \
		$(BUILD)/bench/%: scripts/bench/%.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) -O2 -g -fno-omit-frame-pointer -fno-optimize-sibling-calls -pthread -Wall \
		-Werror $< -o $@

BENCH_BINS := $(BUILD)/bench/bench_handler $(BUILD)/bench/bench_trie \
	$(BUILD)/bench/bench_serialize $(BUILD)/bench/bench_live_table $(BUILD)/bench/fixed_work $(BUILD)/bench/bench_spawn \
	$(BUILD)/bench/many_stacks $(BUILD)/bench/maxrss $(BUILD)/bench/alloc_churn \
	$(BUILD)/bench/lock_pair

# Beside the current build, libddprof at BENCH_BASE_REV (the "before" column; its default
# and the build are in scripts/bench/run): make bench BENCH_BASE_REV=<rev> compares with
# another revision, BENCH_BASE_REV= with none.
bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BINS)
	@bash scripts/bench/run

# What clang-format keeps in shape (make format rewrites, make guards checks).
FORMAT_FILES := $(LIB_SRCS) $(wildcard */*.h agent/*/*.h) $(UNIT_SRCS) $(wildcard test/unit/*.h) \
	$(WORKLOAD_SRCS) $(WORKLOAD_SPECIAL) $(wildcard test/workloads/*.h test/fuzz/*.c test/tools/*.c \
	scripts/bench/*.c)

format:
	clang-format -i $(FORMAT_FILES)

# make check's first stage: the format, the layers (ARCHITECTURE.md), and the guards'
# own test on planted violations.
guards: all
	@bash scripts/check-format $(FORMAT_FILES)
	@/usr/bin/python3 scripts/check-layers
	@bash scripts/check-generated
	@bash scripts/test-guards

clean:
	rm -rf $(BUILD)

# The header dependencies of every object built so far (-MMD), but those of the bench's
# before build (another revision's tree under $(BUILD)/bench/base, scripts/bench/build-base).
-include $(shell find $(BUILD) -path $(BUILD)/bench/base -prune -o -name '*.d' -print 2>/dev/null)
