/*
 * test_pprof.c - the pprof encoder: record samples into a real profile pair, serialize
 * with pprof_build (real symbolizer over this very test binary), decode the gzip
 * output with our own reader, and check what a pprof consumer relies on.
 */
#include <check.h>

#include "test/unit/check_run.h"
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "agent/store/profiles.h"
#include "agent/symbolize/symbolizer.h"
#include "agent/unwind/unwind.h"
#include "test/tools/pprof_reader.h"
#include "agent/sample/thread_names.h"
#include "agent/sample/threads.h"
#include "uploader/pprof.h"

#define PERIOD_NS 1010101
#define CEILING (4u << 20)

/* Global, not static: the symbolizer names them from this program's symbol table. */
int known_leaf_function(int x);
int known_caller_function(int x);
void *pprof_test_return_address(void);
void *inline_host_function(void);
void fake_trampoline(void);

__attribute__((noinline)) int known_leaf_function(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x + 1;
}

__attribute__((noinline)) int known_caller_function(int x)
{
	return known_leaf_function(x) * 2;
}

/* Returns its return address: the pc of the call's line in its caller. */
__attribute__((noinline)) void *pprof_test_return_address(void)
{
	void *ra = __builtin_return_address(0);
	__asm__ volatile("" : "+r"(ra));
	return ra;
}

static int leaf_line, host_line;

static inline __attribute__((always_inline)) void *inlined_into_host(void)
{
	leaf_line = __LINE__ + 1;
	void *pc = pprof_test_return_address();
	__asm__ volatile("" ::: "memory");
	return pc;
}

__attribute__((noinline)) void *inline_host_function(void)
{
	host_line = __LINE__ + 1;
	void *pc = inlined_into_host();
	__asm__ volatile("" ::: "memory");
	return pc;
}

/* Through a volatile pointer: no interprocedural clone renames it. */
static void *(*volatile inline_host_fn)(void) = inline_host_function;

static struct profile_pair pp;
static struct symbolizer *sym;

static void setup(void)
{
	ck_assert_int_eq(profiles_init(&pp, CEILING, 1000), 0);
	sym = symbolizer_new();
	ck_assert_ptr_nonnull(sym);
	ck_assert_int_gt(symbolizer_refresh(sym), 0);
}

static void teardown(void)
{
	symbolizer_free(sym);
	profiles_destroy(&pp);
}

/* The next build's pprof_meta.startup_cpu_ns and startup_tid (then cleared). */
static uint64_t next_startup_ns;
static int32_t next_startup_tid;
/* The next build's pprof_meta.kinds (then cleared: CPU only). */
static uint32_t next_kinds;

/* Serializes the active profile after a swap and decodes it into *out. */
/* Thread names the next build_and_decode hands the encoder (NULL: none). */
static const struct thread_names *next_names;

static void build_and_decode(struct pprof_profile *out, size_t *gz_len)
{
	struct profile *p = profiles_swap(&pp, 5000);
	struct pprof_meta meta = {.start_ns = p->start_ns,
				  .end_ns = 5000,
				  .period_ns = PERIOD_NS,
				  .pid = 4242,
				  .startup_cpu_ns = next_startup_ns,
				  .startup_tid = next_startup_tid,
				  .thread_names = next_names,
				  .kinds = next_kinds};
	next_names = NULL;
	next_kinds = 0;
	next_startup_ns = 0;
	next_startup_tid = 0;
	meta.comments[meta.ncomments++] = "service:unit";
	struct pb_buf gz;
	pb_init(&gz);
	struct pprof_stats st;
	ck_assert_int_eq(pprof_build(p, &meta, sym, &gz, &st), 0);
	ck_assert_msg(gz.len > 18 && gz.data[0] == 0x1f && gz.data[1] == 0x8b,
		      "output is not gzip (len %zu)", gz.len);
	char err[256] = "";
	int rc = pprof_decode(gz.data, gz.len, out, err, sizeof(err));
	ck_assert_msg(rc == 0, "our decoder rejected the output: %s", err);
	if (gz_len)
		*gz_len = gz.len;
	pb_free(&gz);
	profiles_reset(p);
}

static const char *leaf_name(const struct pprof_profile *prof, const struct pprof_sample *s)
{
	const struct pprof_location *l = pprof_location(prof, s->location_ids[0]);
	if (!l || l->num_lines == 0)
		return NULL;
	const struct pprof_function *f = pprof_function(prof, l->lines[0].function_id);
	return f ? pprof_str(prof, f->name) : NULL;
}

static const struct pprof_label *label(const struct pprof_profile *prof,
				       const struct pprof_sample *s, const char *key)
{
	for (size_t i = 0; i < s->num_labels; i++)
		if (strcmp(pprof_str(prof, s->labels[i].key), key) == 0)
			return &s->labels[i];
	return NULL;
}

START_TEST(test_encoded_profile_has_cpu_sample_types_period_and_times)
{
	uintptr_t pcs[] = {(uintptr_t)known_leaf_function + 2};
	profiles_record(&pp, 77, pcs, 1, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	ck_assert_uint_eq(prof.num_sample_types, 2);
	ck_assert_str_eq(pprof_str(&prof, prof.sample_types[0].type), "cpu-samples");
	ck_assert_str_eq(pprof_str(&prof, prof.sample_types[0].unit), "count");
	ck_assert_str_eq(pprof_str(&prof, prof.sample_types[1].type), "cpu-time");
	ck_assert_str_eq(pprof_str(&prof, prof.sample_types[1].unit), "nanoseconds");
	ck_assert_str_eq(pprof_str(&prof, prof.period_type.type), "cpu");
	ck_assert_str_eq(pprof_str(&prof, prof.period_type.unit), "nanoseconds");
	ck_assert_int_eq(prof.period, PERIOD_NS);
	ck_assert_int_eq(prof.time_nanos, 1000);
	ck_assert_int_eq(prof.duration_nanos, 4000);
	ck_assert_str_eq(pprof_str(&prof, 0), "");
	ck_assert_uint_eq(prof.num_comments, 1);
	ck_assert_str_eq(pprof_str(&prof, prof.comments[0]), "service:unit");
	pprof_free(&prof);
}
END_TEST

/* The seam between the agent and the encoder: thread names come from the snapshot the
 * caller took at the swap, never from the live thread registry (empty here: no thread
 * is registered in this suite). A tid the snapshot lacks gets no name label. */
START_TEST(test_thread_names_come_from_the_snapshot_only)
{
	uintptr_t pcs[] = {(uintptr_t)known_leaf_function + 2};
	profiles_record(&pp, 31, pcs, 1, PERIOD_NS);
	profiles_record(&pp, 32, pcs, 1, PERIOD_NS);
	struct thread_name v[] = {{.tid = 31, .live = true, .name = "seam-worker"}};
	struct thread_names names = {v, 1};
	char live[THREAD_NAME_MAX];
	ck_assert(!threads_name(31, live)); /* the registry does not know it */
	next_names = &names;
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	ck_assert_uint_eq(prof.num_samples, 2);
	int named = 0, unnamed = 0;
	for (size_t i = 0; i < prof.num_samples; i++) {
		const struct pprof_sample *s = &prof.samples[i];
		const struct pprof_label *tid = label(&prof, s, "thread id");
		const struct pprof_label *name = label(&prof, s, "thread name");
		ck_assert_ptr_nonnull(tid);
		if (tid->num == 31) {
			ck_assert_ptr_nonnull(name);
			ck_assert_str_eq(pprof_str(&prof, name->str), "seam-worker");
			named++;
		} else {
			ck_assert_int_eq(tid->num, 32);
			ck_assert_ptr_null(name);
			unnamed++;
		}
	}
	ck_assert_int_eq(named, 1);
	ck_assert_int_eq(unnamed, 1);
	pprof_free(&prof);
}
END_TEST

START_TEST(test_samples_keep_counts_weights_and_labels)
{
	uintptr_t a[] = {(uintptr_t)known_leaf_function + 2, (uintptr_t)known_caller_function + 8};
	uintptr_t b[] = {(uintptr_t)known_caller_function + 4};
	for (int i = 0; i < 30; i++)
		profiles_record(&pp, 11, a, 2, PERIOD_NS * 4); /* overrun 3 */
	for (int i = 0; i < 10; i++)
		profiles_record(&pp, 12, b, 1, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	ck_assert_uint_eq(prof.num_samples, 2);
	int64_t total_count = 0, total_ns = 0;
	for (size_t i = 0; i < prof.num_samples; i++) {
		const struct pprof_sample *s = &prof.samples[i];
		const struct pprof_label *tid = label(&prof, s, "thread id");
		const struct pprof_label *pid = label(&prof, s, "process_id");
		ck_assert_ptr_nonnull(tid);
		ck_assert_ptr_nonnull(pid);
		ck_assert_int_eq(pid->num, 4242);
		total_count += s->values[0];
		total_ns += s->values[1];
		if (tid->num == 11) {
			ck_assert_int_eq(s->values[0], 30);
			ck_assert_int_eq(s->values[1], 30LL * 4 * PERIOD_NS);
			ck_assert_uint_eq(s->num_location_ids, 2);
			ck_assert_str_eq(leaf_name(&prof, s), "known_leaf_function");
		} else {
			ck_assert_int_eq(tid->num, 12);
			ck_assert_int_eq(s->values[0], 10);
			ck_assert_str_eq(leaf_name(&prof, s), "known_caller_function");
		}
	}
	ck_assert_int_eq(total_count, 40);
	ck_assert_int_eq(total_ns, 30LL * 4 * PERIOD_NS + 10LL * PERIOD_NS);
	pprof_free(&prof);
}
END_TEST

/* Profile types as data: each kind the profile has gets its columns, CPU's first, and a
 * sample of one kind has zeros in the others'; a kind the profile leaves out (not
 * enabled) adds no column and none of its samples. */
START_TEST(test_each_enabled_kind_has_its_columns_and_others_are_left_out)
{
	uintptr_t a[] = {(uintptr_t)known_leaf_function + 2};
	uintptr_t b[] = {(uintptr_t)known_caller_function + 4};
	const uint64_t alloc[PROFILE_VALUES_MAX] = {1, 3 * 524288};
	const uint64_t heap[PROFILE_VALUES_MAX] = {2, 4096};
	for (int round = 0; round < 2; round++) {
		profiles_record(&pp, 11, a, 1, PERIOD_NS);
		profiles_add(&pp, PROFILE_ALLOC, 11, b, 1, alloc);
		profiles_add(&pp, PROFILE_ALLOC, 11, b, 1, alloc);
		profiles_add(&pp, PROFILE_HEAP, 11, b, 1, heap);
		next_kinds = round == 0 ? PROFILE_KIND_BIT(PROFILE_ALLOC) : 0;
		struct pprof_profile prof;
		build_and_decode(&prof, NULL);
		if (round == 1) {
			/* CPU only: 2 columns, 1 sample (the heap and allocation samples gone). */
			ck_assert_uint_eq(prof.num_sample_types, 2);
			ck_assert_uint_eq(prof.num_samples, 1);
			pprof_free(&prof);
			break;
		}
		ck_assert_uint_eq(prof.num_sample_types, 4);
		const char *want[4][2] = {{"cpu-samples", "count"},
					  {"cpu-time", "nanoseconds"},
					  {"alloc-samples", "count"},
					  {"alloc-space", "bytes"}};
		for (int i = 0; i < 4; i++) {
			ck_assert_str_eq(pprof_str(&prof, prof.sample_types[i].type), want[i][0]);
			ck_assert_str_eq(pprof_str(&prof, prof.sample_types[i].unit), want[i][1]);
		}
		ck_assert_str_eq(pprof_str(&prof, prof.default_sample_type), "cpu-time");
		ck_assert_uint_eq(prof.num_samples, 2);
		for (size_t i = 0; i < prof.num_samples; i++) {
			const int64_t *v = prof.samples[i].values;
			ck_assert_uint_eq(prof.samples[i].num_values, 4);
			if (strcmp(leaf_name(&prof, &prof.samples[i]), "known_leaf_function") ==
			    0) {
				ck_assert(v[0] == 1 && v[1] == PERIOD_NS && v[2] == 0 && v[3] == 0);
			} else {
				ck_assert(v[0] == 0 && v[1] == 0 && v[2] == 2 &&
					  v[3] == 6 * 524288);
			}
		}
		pprof_free(&prof);
	}
}
END_TEST

/* The CPU a thread used after its last sample is added at its end with no sample
 * (profiles_record_n); when a swap came in between, it is alone on its stack in the
 * new profile, and must still be written. */
START_TEST(test_cpu_without_samples_is_kept)
{
	uintptr_t a[] = {(uintptr_t)known_leaf_function + 2};
	ck_assert(profiles_empty(&pp));
	profiles_record_n(&pp, 5, a, 1, 0, 1234567);
	ck_assert(!profiles_empty(&pp));
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	ck_assert_uint_eq(prof.num_samples, 1);
	ck_assert_int_eq(prof.samples[0].values[0], 0);
	ck_assert_int_eq(prof.samples[0].values[1], 1234567);
	ck_assert_str_eq(leaf_name(&prof, &prof.samples[0]), "known_leaf_function");
	pprof_free(&prof);
}
END_TEST

/* The main thread's CPU before the profiler started: one "[start-up]" sample, CPU
 * without a count, under that thread's id, beside the samples. */
START_TEST(test_startup_cpu_is_its_own_sample)
{
	uintptr_t a[] = {(uintptr_t)known_leaf_function + 2};
	profiles_record(&pp, 9, a, 1, PERIOD_NS);
	next_startup_ns = 4200000;
	next_startup_tid = 9;
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	ck_assert_uint_eq(prof.num_samples, 2);
	int found = 0;
	for (size_t i = 0; i < prof.num_samples; i++) {
		const struct pprof_sample *s = &prof.samples[i];
		if (strcmp(leaf_name(&prof, s), "[start-up]") != 0)
			continue;
		found++;
		ck_assert_int_eq(s->values[0], 0);
		ck_assert_int_eq(s->values[1], 4200000);
		ck_assert_uint_eq(s->num_location_ids, 1);
		const struct pprof_label *tid = label(&prof, s, "thread id");
		ck_assert_ptr_nonnull(tid);
		ck_assert_int_eq(tid->num, 9);
	}
	ck_assert_int_eq(found, 1);
	pprof_free(&prof);
}
END_TEST

START_TEST(test_return_address_at_function_end_names_the_caller)
{
	/* A return address one past a function's last byte belongs to that function:
	 * the encoder must look caller frames up at pc - 1. */
	uintptr_t end = (uintptr_t)known_leaf_function; /* a call's return lands here... */
	uintptr_t pcs[] = {(uintptr_t)known_caller_function + 1, end};
	profiles_record(&pp, 1, pcs, 2, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	const struct pprof_location *l = pprof_location(&prof, prof.samples[0].location_ids[1]);
	ck_assert_ptr_nonnull(l);
	ck_assert_uint_eq(l->address, end);
	/* ... and pc - 1 is in whatever precedes known_leaf_function, not in it. */
	if (l->num_lines) {
		const struct pprof_function *f = pprof_function(&prof, l->lines[0].function_id);
		ck_assert_str_ne(pprof_str(&prof, f->name), "known_leaf_function");
	}
	pprof_free(&prof);
}
END_TEST

/* Stands for preload.c's pthread_create trampoline: the serializer leaves the section
 * ddprof_trampoline out of stacks (its bounds are the linker's, in this program too). */
__attribute__((section("ddprof_trampoline"), noinline, used)) void fake_trampoline(void)
{
	__asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop");
}

START_TEST(test_trampoline_frames_are_left_out_leaf_included)
{
	/* A return address into it (a caller frame), and a sample landing in its own
	 * instructions (the leaf): both stacks start at the function around it. */
	uintptr_t tramp = (uintptr_t)fake_trampoline;
	uintptr_t caller = (uintptr_t)known_leaf_function + 1;
	uintptr_t as_caller[] = {(uintptr_t)known_caller_function + 1, tramp + 4, caller};
	uintptr_t as_leaf[] = {tramp + 4, caller};
	profiles_record(&pp, 1, as_caller, 3, PERIOD_NS);
	profiles_record(&pp, 2, as_leaf, 2, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	ck_assert_uint_eq(prof.num_samples, 2);
	for (size_t i = 0; i < prof.num_samples; i++) {
		const struct pprof_sample *smp = &prof.samples[i];
		bool leaf_case = label(&prof, smp, "thread id")->num == 2;
		ck_assert_uint_eq(smp->num_location_ids, leaf_case ? 1 : 2);
		for (size_t j = 0; j < smp->num_location_ids; j++) {
			const struct pprof_location *l =
			    pprof_location(&prof, smp->location_ids[j]);
			ck_assert(l->address < tramp || l->address > tramp + 16);
		}
		ck_assert_str_eq(leaf_name(&prof, smp),
				 leaf_case ? "known_leaf_function" : "known_caller_function");
	}
	pprof_free(&prof);
}
END_TEST

START_TEST(test_locations_carry_the_module_mapping_with_build_id)
{
	uintptr_t pcs[] = {(uintptr_t)known_leaf_function + 2};
	profiles_record(&pp, 1, pcs, 1, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	const struct pprof_location *l = pprof_location(&prof, prof.samples[0].location_ids[0]);
	ck_assert_ptr_nonnull(l);
	ck_assert_uint_eq(l->address, pcs[0]);
	const struct pprof_mapping *m = pprof_mapping(&prof, l->mapping_id);
	ck_assert_ptr_nonnull(m);
	ck_assert(m->memory_start <= pcs[0] && pcs[0] < m->memory_limit);
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	ck_assert_int_gt(n, 0);
	self[n] = 0;
	ck_assert_str_eq(pprof_str(&prof, m->filename), self);
	const char *bid = pprof_str(&prof, m->build_id);
	ck_assert_msg(bid && strlen(bid) == 40, "build id %s, expected 40 hex digits",
		      bid ? bid : "(null)");
	pprof_free(&prof);
}
END_TEST

START_TEST(test_truncated_and_unknown_frames_are_named)
{
	uintptr_t pcs[] = {PC_UNKNOWN, (uintptr_t)known_caller_function + 8, PC_TRUNCATED};
	profiles_record(&pp, 1, pcs, 3, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	ck_assert_uint_eq(prof.samples[0].num_location_ids, 3);
	const char *want[] = {"[unknown]", NULL, "[truncated]"};
	for (int i = 0; i < 3; i += 2) {
		const struct pprof_location *l =
		    pprof_location(&prof, prof.samples[0].location_ids[i]);
		ck_assert_uint_eq(l->num_lines, 1);
		ck_assert_uint_eq(l->mapping_id, 0);
		const struct pprof_function *f = pprof_function(&prof, l->lines[0].function_id);
		ck_assert_str_eq(pprof_str(&prof, f->name), want[i]);
	}
	pprof_free(&prof);
}
END_TEST

START_TEST(test_stacks_past_the_ceiling_appear_as_dropped)
{
	profiles_destroy(&pp);
	ck_assert_int_eq(profiles_init(&pp, 64 << 10, 1000), 0); /* 64 KiB */
	uintptr_t pcs[64];
	uint64_t n_records = 0;
	for (uintptr_t i = 0; i < 5000; i++) {
		for (int d = 0; d < 64; d++)
			pcs[d] = 0x100000 + i * 64 + (uintptr_t)d;
		profiles_record(&pp, 1, pcs, 64, PERIOD_NS);
		n_records++;
	}
	struct profile *active = profiles_active(&pp);
	uint64_t dropped = profiles_dropped(active, PROFILE_CPU, 0);
	ck_assert_uint_gt(dropped, 0);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	int64_t count = 0, dropped_seen = 0;
	for (size_t i = 0; i < prof.num_samples; i++) {
		const struct pprof_sample *s = &prof.samples[i];
		count += s->values[0];
		const char *leaf = leaf_name(&prof, s);
		if (leaf && strcmp(leaf, "[dropped]") == 0)
			dropped_seen += s->values[0];
	}
	ck_assert_int_eq(count, (int64_t)n_records);
	ck_assert_int_eq(dropped_seen, (int64_t)dropped);
	pprof_free(&prof);
}
END_TEST

START_TEST(test_identical_pcs_share_locations_and_functions)
{
	uintptr_t a[] = {(uintptr_t)known_leaf_function + 2, (uintptr_t)known_caller_function + 8};
	for (int tid = 1; tid <= 50; tid++)
		profiles_record(&pp, tid, a, 2, PERIOD_NS);
	struct pprof_profile prof;
	size_t gz_len;
	build_and_decode(&prof, &gz_len);
	ck_assert_uint_eq(prof.num_samples, 50);
	ck_assert_uint_eq(prof.num_locations, 2);
	ck_assert_uint_eq(prof.num_functions, 2);
	ck_assert_uint_eq(prof.num_mappings, 1);
	pprof_free(&prof);
}
END_TEST

static const char *function_name(const struct pprof_profile *prof, const struct pprof_line *l)
{
	const struct pprof_function *f = pprof_function(prof, l->function_id);
	ck_assert_ptr_nonnull(f);
	return pprof_str(prof, f->name);
}

static const char *function_file(const struct pprof_profile *prof, const struct pprof_line *l)
{
	return pprof_str(prof, pprof_function(prof, l->function_id)->filename);
}

START_TEST(test_inlined_function_is_a_line_of_its_own_location)
{
	/* The return address is a caller frame (index 1): looked up at pc - 1, the call. */
	uintptr_t pcs[] = {(uintptr_t)known_leaf_function + 2, (uintptr_t)inline_host_fn()};
	profiles_record(&pp, 1, pcs, 2, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	const struct pprof_location *l = pprof_location(&prof, prof.samples[0].location_ids[1]);
	ck_assert_ptr_nonnull(l);
	ck_assert_uint_eq(l->address, pcs[1]);
	ck_assert_msg(l->num_lines == 2, "%zu lines, expected the inlined function and its caller",
		      l->num_lines);
	ck_assert_str_eq(function_name(&prof, &l->lines[0]), "inlined_into_host");
	ck_assert_int_eq(l->lines[0].line, leaf_line);
	ck_assert_str_eq(function_name(&prof, &l->lines[1]), "inline_host_function");
	ck_assert_int_eq(l->lines[1].line, host_line);
	for (size_t i = 0; i < 2; i++) {
		const char *file = function_file(&prof, &l->lines[i]);
		ck_assert_msg(file && strstr(file, "test_pprof.c"), "function file %s", file);
	}
	const struct pprof_mapping *m = pprof_mapping(&prof, l->mapping_id);
	ck_assert(m->has_functions && m->has_filenames && m->has_line_numbers &&
		  m->has_inline_frames);
	pprof_free(&prof);
}
END_TEST

START_TEST(test_pcs_of_one_function_share_it)
{
	uintptr_t a[] = {(uintptr_t)known_leaf_function + 1};
	uintptr_t b[] = {(uintptr_t)known_leaf_function + 4};
	profiles_record(&pp, 1, a, 1, PERIOD_NS);
	profiles_record(&pp, 1, b, 1, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	ck_assert_uint_eq(prof.num_locations, 2);
	ck_assert_uint_eq(prof.num_functions, 1);
	ck_assert_str_eq(pprof_str(&prof, prof.functions[0].name), "known_leaf_function");
	ck_assert_ptr_nonnull(strstr(pprof_str(&prof, prof.functions[0].filename), "test_pprof.c"));
	pprof_free(&prof);
}
END_TEST

START_TEST(test_incomplete_frame_is_named)
{
	uintptr_t pcs[] = {(uintptr_t)known_leaf_function + 2, PC_INCOMPLETE};
	profiles_record(&pp, 1, pcs, 2, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	const struct pprof_location *l = pprof_location(&prof, prof.samples[0].location_ids[1]);
	ck_assert_uint_eq(l->num_lines, 1);
	ck_assert_uint_eq(l->mapping_id, 0);
	ck_assert_str_eq(function_name(&prof, &l->lines[0]), "[incomplete]");
	pprof_free(&prof);
}
END_TEST

START_TEST(test_unnamed_pc_keeps_mapping_and_address)
{
	/* The vdso's ELF header: executable memory no function covers. */
	uintptr_t vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
	if (!vdso)
		return;
	uintptr_t pcs[] = {vdso + 0x10};
	profiles_record(&pp, 1, pcs, 1, PERIOD_NS);
	struct pprof_profile prof;
	build_and_decode(&prof, NULL);
	const struct pprof_location *l = pprof_location(&prof, prof.samples[0].location_ids[0]);
	ck_assert_uint_eq(l->num_lines, 0);
	ck_assert_uint_eq(l->address, pcs[0]);
	const struct pprof_mapping *m = pprof_mapping(&prof, l->mapping_id);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(pprof_str(&prof, m->filename), "[vdso]");
	/* Nothing named in it: a consumer may try (pprof re-reads such mappings only). */
	ck_assert(!m->has_functions && !m->has_filenames && !m->has_line_numbers &&
		  !m->has_inline_frames);
	pprof_free(&prof);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("pprof");
	TCase *tc = tcase_create("encode");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_encoded_profile_has_cpu_sample_types_period_and_times);
	tcase_add_test(tc, test_thread_names_come_from_the_snapshot_only);
	tcase_add_test(tc, test_samples_keep_counts_weights_and_labels);
	tcase_add_test(tc, test_each_enabled_kind_has_its_columns_and_others_are_left_out);
	tcase_add_test(tc, test_return_address_at_function_end_names_the_caller);
	tcase_add_test(tc, test_trampoline_frames_are_left_out_leaf_included);
	tcase_add_test(tc, test_locations_carry_the_module_mapping_with_build_id);
	tcase_add_test(tc, test_truncated_and_unknown_frames_are_named);
	tcase_add_test(tc, test_stacks_past_the_ceiling_appear_as_dropped);
	tcase_add_test(tc, test_identical_pcs_share_locations_and_functions);
	tcase_add_test(tc, test_inlined_function_is_a_line_of_its_own_location);
	tcase_add_test(tc, test_pcs_of_one_function_share_it);
	tcase_add_test(tc, test_incomplete_frame_is_named);
	tcase_add_test(tc, test_cpu_without_samples_is_kept);
	tcase_add_test(tc, test_startup_cpu_is_its_own_sample);
	tcase_add_test(tc, test_unnamed_pc_keeps_mapping_and_address);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
