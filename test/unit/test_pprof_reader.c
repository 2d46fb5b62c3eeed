/*
 * test_pprof_reader.c - unit tests of the test-side pprof decoder (test/tools/pprof_reader.c).
 *
 * Owns: hand-encoded profiles (built with common/pb_writer) covering the string table,
 * sample values and labels, packed and unpacked repeated fields, unknown fields, gzip
 * input, cross-reference validation, truncation at every length and random mutations,
 * plus one real profile written by Go's runtime/pprof (embedded below).
 * Context: single-threaded Check suite; run under valgrind with CK_FORK=no.
 */
#include "test/tools/pprof_reader.h"
#include "common/pb.h"

#include <check.h>

#include "test/unit/check_run.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* String-table indexes of the standard test profile. */
/* clang-format off */
enum {
	S_EMPTY, S_CPU_SAMPLES, S_COUNT, S_CPU_TIME, S_NANOSECONDS, S_MAIN, S_FOO, S_BAR, S_APP,
	S_THREAD_ID, S_THREAD_NAME, S_WORKER, S_PROCESS_ID, S_BUILD_ID, S_APP_C, S_COMMENT, S_NUM
};

static const char *const strings[S_NUM] = {
	"", "cpu-samples", "count", "cpu-time", "nanoseconds", "main", "foo", "bar",
	"/usr/bin/app", "thread id", "thread name", "worker", "process_id", "abc123", "app.c",
	"comment",
};
/* clang-format on */

#define TIME_NANOS 1700000000123456789LL
#define ADDR_FOLDED 0xdeadULL

struct build_opts {
	bool unpacked; /* repeated scalars as one field per value */
	bool unknown;  /* sprinkle unknown fields of every wire type */
};

static void add_unknown(struct pb_buf *pb, const struct build_opts *o)
{
	static const uint8_t fixed[8] = {1, 2, 3, 4, 5, 6, 7, 8};

	if (!o->unknown)
		return;
	pb_varint(pb, 100, 12345);
	pb_varint_raw(pb, (101 << 3) | 1);
	pb_raw(pb, fixed, 8);
	pb_bytes(pb, 102, "junk", 4);
	pb_varint_raw(pb, (103 << 3) | 5);
	pb_raw(pb, fixed, 4);
}

/* Appends sub as a nested message (field) of pb and empties sub. */
static void put_msg(struct pb_buf *pb, uint32_t field, struct pb_buf *sub)
{
	pb_bytes(pb, field, sub->data, sub->len);
	pb_clear(sub);
}

static void put_u64s(struct pb_buf *pb, uint32_t field, const uint64_t *v, size_t n,
		     const struct build_opts *o)
{
	if (!o->unpacked) {
		pb_packed_u64(pb, field, v, n);
		return;
	}
	for (size_t i = 0; i < n; i++)
		pb_varint(pb, field, v[i]);
}

static void put_value_type(struct pb_buf *pb, uint32_t field, uint64_t type, uint64_t unit,
			   const struct build_opts *o)
{
	struct pb_buf vt;
	pb_init(&vt);
	add_unknown(&vt, o);
	pb_varint(&vt, 1, type);
	pb_varint(&vt, 2, unit);
	put_msg(pb, field, &vt);
	pb_free(&vt);
}

static void put_label(struct pb_buf *pb, uint64_t key, uint64_t str, int64_t num,
		      const struct build_opts *o)
{
	struct pb_buf l;
	pb_init(&l);
	pb_varint(&l, 1, key);
	if (str)
		pb_varint(&l, 2, str);
	if (num)
		pb_varint(&l, 3, (uint64_t)num);
	add_unknown(&l, o);
	put_msg(pb, 3, &l);
	pb_free(&l);
}

static void put_sample(struct pb_buf *pb, const uint64_t *locs, size_t nlocs, const int64_t *vals,
		       int64_t tid, uint64_t tname, int64_t pid, const struct build_opts *o)
{
	struct pb_buf s;
	pb_init(&s);
	add_unknown(&s, o);
	put_u64s(&s, 1, locs, nlocs, o);
	put_u64s(&s, 2, (const uint64_t *)vals, 2, o);
	put_label(&s, S_THREAD_ID, 0, tid, o);
	if (tname)
		put_label(&s, S_THREAD_NAME, tname, 0, o);
	if (pid)
		put_label(&s, S_PROCESS_ID, 0, pid, o);
	put_msg(pb, 2, &s);
	pb_free(&s);
}

static void put_line(struct pb_buf *loc, uint64_t fid, int64_t line, const struct build_opts *o)
{
	struct pb_buf l;
	pb_init(&l);
	pb_varint(&l, 1, fid);
	pb_varint(&l, 2, (uint64_t)line);
	add_unknown(&l, o);
	put_msg(loc, 4, &l);
	pb_free(&l);
}

static void put_function(struct pb_buf *pb, uint64_t id, uint64_t name, int64_t start,
			 const struct build_opts *o)
{
	struct pb_buf f;
	pb_init(&f);
	pb_varint(&f, 1, id);
	pb_varint(&f, 2, name);
	pb_varint(&f, 3, name);
	pb_varint(&f, 4, S_APP_C);
	pb_varint(&f, 5, (uint64_t)start);
	add_unknown(&f, o);
	put_msg(pb, 5, &f);
	pb_free(&f);
}

/*
 * The standard profile: two sample types, functions main(1) foo(2) bar(3), mapping 1,
 * location 1 = foo, location 2 = bar inlined into main, location 3 = no lines, no mapping.
 * Sample A: [1, 2] values {3, 30000000} thread 42 "worker" pid 1234.
 * Sample B: [3] values {1, -5} thread 43.
 */
static void build_profile(struct pb_buf *pb, const struct build_opts *o)
{
	static const uint64_t locs_a[] = {1, 2}, locs_b[] = {3};
	static const int64_t vals_a[] = {3, 30000000}, vals_b[] = {1, -5};
	struct pb_buf m;

	pb_init(pb);
	pb_init(&m);
	add_unknown(pb, o);
	for (int i = 0; i < S_NUM; i++)
		pb_string(pb, 6, strings[i]);
	put_value_type(pb, 1, S_CPU_SAMPLES, S_COUNT, o);
	put_value_type(pb, 1, S_CPU_TIME, S_NANOSECONDS, o);
	put_sample(pb, locs_a, 2, vals_a, 42, S_WORKER, 1234, o);
	put_sample(pb, locs_b, 1, vals_b, 43, 0, 0, o);

	pb_varint(&m, 1, 1);
	pb_varint(&m, 2, 0x400000);
	pb_varint(&m, 3, 0x500000);
	pb_varint(&m, 4, 0x1000);
	pb_varint(&m, 5, S_APP);
	pb_varint(&m, 6, S_BUILD_ID);
	pb_varint(&m, 7, 1);
	add_unknown(&m, o);
	put_msg(pb, 3, &m);

	pb_varint(&m, 1, 1);
	pb_varint(&m, 2, 1);
	pb_varint(&m, 3, 0x401000);
	put_line(&m, 2, 20, o);
	put_msg(pb, 4, &m);
	pb_varint(&m, 1, 2);
	pb_varint(&m, 2, 1);
	pb_varint(&m, 3, 0x402000);
	put_line(&m, 3, 30, o);
	put_line(&m, 1, 11, o);
	add_unknown(&m, o);
	put_msg(pb, 4, &m);
	pb_varint(&m, 1, 3);
	pb_varint(&m, 3, ADDR_FOLDED);
	pb_varint(&m, 5, 1);
	put_msg(pb, 4, &m);

	put_function(pb, 1, S_MAIN, 10, o);
	put_function(pb, 2, S_FOO, 18, o);
	put_function(pb, 3, S_BAR, 28, o);

	pb_varint(pb, 9, TIME_NANOS);
	pb_varint(pb, 10, 1000000000);
	put_value_type(pb, 11, S_CPU_TIME, S_NANOSECONDS, o);
	pb_varint(pb, 12, 10000000);
	put_u64s(pb, 13, (const uint64_t[]){S_COMMENT, S_APP}, 2, o);
	pb_varint(pb, 14, S_CPU_TIME);
	add_unknown(pb, o);
	pb_free(&m);
	ck_assert(!pb->failed);
}

/* Decodes from an exact-size heap copy so that valgrind sees any over-read. */
static int decode_copy(const uint8_t *data, size_t len, struct pprof_profile *p, char *err,
		       size_t errlen)
{
	uint8_t *copy = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(copy);
	if (len)
		memcpy(copy, data, len);
	int rc = pprof_decode(copy, len, p, err, errlen);
	free(copy);
	return rc;
}

static void check_standard(const struct pprof_profile *p)
{
	ck_assert_uint_eq(p->num_strings, S_NUM);
	for (int i = 0; i < S_NUM; i++)
		ck_assert_str_eq(pprof_str(p, i), strings[i]);
	ck_assert_ptr_null(pprof_str(p, S_NUM));
	ck_assert_ptr_null(pprof_str(p, -1));

	ck_assert_uint_eq(p->num_sample_types, 2);
	ck_assert_str_eq(pprof_str(p, p->sample_types[1].type), "cpu-time");
	ck_assert_str_eq(pprof_str(p, p->sample_types[1].unit), "nanoseconds");
	ck_assert_int_eq(pprof_sample_type_index(p, "cpu-samples"), 0);
	ck_assert_int_eq(pprof_sample_type_index(p, "cpu-time"), 1);
	ck_assert_int_eq(pprof_sample_type_index(p, "wall-time"), -1);
	ck_assert_int_eq(p->time_nanos, TIME_NANOS);
	ck_assert_int_eq(p->duration_nanos, 1000000000);
	ck_assert_int_eq(p->period, 10000000);
	ck_assert_int_eq(p->period_type.type, S_CPU_TIME);
	ck_assert_int_eq(p->period_type.unit, S_NANOSECONDS);
	ck_assert(p->num_comments == 2 && p->comments[0] == S_COMMENT && p->comments[1] == S_APP);
	ck_assert_int_eq(p->default_sample_type, S_CPU_TIME);

	ck_assert_uint_eq(p->num_samples, 2);
	const struct pprof_sample *a = &p->samples[0], *b = &p->samples[1];
	ck_assert(a->num_location_ids == 2 && a->location_ids[0] == 1 && a->location_ids[1] == 2);
	ck_assert(a->num_values == 2 && a->values[0] == 3 && a->values[1] == 30000000);
	ck_assert(b->num_location_ids == 1 && b->location_ids[0] == 3);
	ck_assert(b->num_values == 2 && b->values[0] == 1 && b->values[1] == -5);

	ck_assert_uint_eq(a->num_labels, 3);
	const struct pprof_label *l = pprof_sample_label(a, p, "thread id");
	ck_assert_ptr_nonnull(l);
	ck_assert_int_eq(l->num, 42);
	ck_assert_int_eq(l->str, 0);
	l = pprof_sample_label(a, p, "thread name");
	ck_assert_ptr_nonnull(l);
	ck_assert_str_eq(pprof_str(p, l->str), "worker");
	ck_assert_int_eq(pprof_sample_label(a, p, "process_id")->num, 1234);
	ck_assert_int_eq(pprof_sample_label(b, p, "thread id")->num, 43);
	ck_assert_ptr_null(pprof_sample_label(b, p, "thread name"));
	ck_assert_ptr_null(pprof_sample_label(b, p, "thread"));

	ck_assert_uint_eq(p->num_mappings, 1);
	const struct pprof_mapping *m = pprof_mapping(p, 1);
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->memory_start, 0x400000);
	ck_assert_uint_eq(m->memory_limit, 0x500000);
	ck_assert_uint_eq(m->file_offset, 0x1000);
	ck_assert_str_eq(pprof_str(p, m->filename), "/usr/bin/app");
	ck_assert_str_eq(pprof_str(p, m->build_id), "abc123");
	ck_assert(m->has_functions);
	ck_assert(!m->has_filenames);
	ck_assert_ptr_null(pprof_mapping(p, 2));

	ck_assert_uint_eq(p->num_locations, 3);
	const struct pprof_location *loc = pprof_location(p, 2);
	ck_assert_ptr_nonnull(loc);
	ck_assert_uint_eq(loc->address, 0x402000);
	ck_assert_uint_eq(loc->mapping_id, 1);
	ck_assert_uint_eq(loc->num_lines, 2);
	ck_assert(loc->lines[0].function_id == 3 && loc->lines[0].line == 30);
	ck_assert(loc->lines[1].function_id == 1 && loc->lines[1].line == 11);
	ck_assert(!loc->is_folded);
	loc = pprof_location(p, 3);
	ck_assert_ptr_nonnull(loc);
	ck_assert_uint_eq(loc->address, ADDR_FOLDED);
	ck_assert_uint_eq(loc->mapping_id, 0);
	ck_assert_uint_eq(loc->num_lines, 0);
	ck_assert(loc->is_folded);
	ck_assert_ptr_null(pprof_location(p, 0));
	ck_assert_ptr_null(pprof_location(p, 4));

	ck_assert_uint_eq(p->num_functions, 3);
	const struct pprof_function *f = pprof_function(p, 3);
	ck_assert_ptr_nonnull(f);
	ck_assert_str_eq(pprof_str(p, f->name), "bar");
	ck_assert_str_eq(pprof_str(p, f->system_name), "bar");
	ck_assert_str_eq(pprof_str(p, f->filename), "app.c");
	ck_assert_int_eq(f->start_line, 28);
	ck_assert_str_eq(pprof_str(p, pprof_function(p, 1)->name), "main");
	ck_assert_ptr_null(pprof_function(p, 9));
}

/* Loop 0..3: bit 0 unpacked repeated scalars, bit 1 unknown fields everywhere. */
START_TEST(test_roundtrip)
{
	struct pprof_profile p;
	struct pb_buf pb;
	char err[256];

	build_profile(&pb, &(struct build_opts){.unpacked = _i & 1, .unknown = _i & 2});
	int rc = decode_copy(pb.data, pb.len, &p, err, sizeof(err));
	ck_assert_msg(rc == 0, "decode failed: %d %s", rc, err);
	check_standard(&p);
	pprof_free(&p);
	pb_free(&pb);
}
END_TEST

/* Compresses len bytes of in as one gzip member into a malloc'd buffer. */
static uint8_t *gzip_bytes(const uint8_t *in, size_t len, size_t *outlen)
{
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	ck_assert_int_eq(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
	size_t cap = deflateBound(&zs, len) + 32;
	uint8_t *out = malloc(cap);
	ck_assert_ptr_nonnull(out);
	zs.next_in = (Bytef *)in;
	zs.avail_in = (uInt)len;
	zs.next_out = out;
	zs.avail_out = (uInt)cap;
	ck_assert_int_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
	*outlen = zs.total_out;
	deflateEnd(&zs);
	return out;
}

START_TEST(test_gzip)
{
	struct pprof_profile p;
	struct pb_buf pb;
	char err[256];
	size_t gz_len, gz2_len;

	build_profile(&pb, &(struct build_opts){.unknown = true});
	uint8_t *gz = gzip_bytes(pb.data, pb.len, &gz_len);
	ck_assert_int_eq(decode_copy(gz, gz_len, &p, err, sizeof(err)), 0);
	check_standard(&p);
	pprof_free(&p);

	/* Two concatenated members inflate to the concatenation. */
	size_t half = pb.len / 2;
	uint8_t *gz1 = gzip_bytes(pb.data, half, &gz_len);
	uint8_t *gz2 = gzip_bytes(pb.data + half, pb.len - half, &gz2_len);
	uint8_t *both = malloc(gz_len + gz2_len + 1);
	memcpy(both, gz1, gz_len);
	memcpy(both + gz_len, gz2, gz2_len);
	ck_assert_int_eq(decode_copy(both, gz_len + gz2_len, &p, err, sizeof(err)), 0);
	check_standard(&p);
	pprof_free(&p);

	both[gz_len + gz2_len] = 0;
	ck_assert_int_eq(decode_copy(both, gz_len + gz2_len + 1, &p, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "trailing"));
	ck_assert_int_eq(decode_copy(gz1, gz_len - 3, &p, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "gzip"));
	gz1[gz_len / 2] ^= 0x55; /* corrupt the deflate data or the CRC */
	ck_assert_int_eq(decode_copy(gz1, gz_len, &p, err, sizeof(err)), -EINVAL);
	ck_assert_uint_eq(p.num_samples, 0);
	free(both);
	free(gz2);
	free(gz1);
	free(gz);
	pb_free(&pb);
}
END_TEST

/* Decodes data[0..len) twice: same result, 0 or -EINVAL, *p empty on error. */
static int decode_checked(const uint8_t *data, size_t len)
{
	struct pprof_profile p;
	char err[256];

	int rc = decode_copy(data, len, &p, err, sizeof(err));
	ck_assert_msg(rc == 0 || rc == -EINVAL, "len %zu: rc %d", len, rc);
	if (rc) {
		ck_assert_msg(err[0], "len %zu: no error message", len);
		ck_assert_ptr_null(p.samples);
		ck_assert_ptr_null(p.strings);
		ck_assert_uint_eq(p.num_locations, 0);
	} else {
		/* Validation guarantees every reference resolves. */
		for (size_t i = 0; i < p.num_samples; i++) {
			const struct pprof_sample *s = &p.samples[i];
			ck_assert_uint_eq(s->num_values, p.num_sample_types);
			for (size_t j = 0; j < s->num_location_ids; j++)
				ck_assert_ptr_nonnull(pprof_location(&p, s->location_ids[j]));
			for (size_t j = 0; j < s->num_labels; j++)
				ck_assert_ptr_nonnull(pprof_str(&p, s->labels[j].key));
		}
		for (size_t i = 0; i < p.num_functions; i++)
			ck_assert_ptr_nonnull(pprof_str(&p, p.functions[i].name));
		pprof_free(&p);
	}
	ck_assert_int_eq(decode_copy(data, len, &p, err, sizeof(err)), rc);
	pprof_free(&p);
	return rc;
}

START_TEST(test_truncation)
{
	struct pb_buf pb;
	size_t gz_len, ok = 0;

	build_profile(&pb, &(struct build_opts){.unknown = true, .unpacked = _i});
	for (size_t len = 0; len < pb.len; len++)
		ok += decode_checked(pb.data, len) == 0;
	ck_assert_int_eq(decode_checked(pb.data, pb.len), 0);
	ck_assert_uint_lt(ok, pb.len); /* most prefixes cut a field */

	uint8_t *gz = gzip_bytes(pb.data, pb.len, &gz_len);
	for (size_t len = 0; len < gz_len; len++)
		ck_assert_int_eq(decode_checked(gz, len), -EINVAL);
	free(gz);
	pb_free(&pb);
}
END_TEST

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

START_TEST(test_mutations)
{
	struct pb_buf pb;
	size_t ok = 0;

	build_profile(&pb, &(struct build_opts){.unknown = true});
	uint8_t *buf = malloc(pb.len);
	for (int iter = 0; iter < 3000; iter++) {
		memcpy(buf, pb.data, pb.len);
		int n = 1 + (int)(rng() % 3);
		for (int k = 0; k < n; k++) {
			size_t at = rng() % pb.len;
			switch (rng() % 4) {
			case 0:
				buf[at] ^= (uint8_t)(1u << (rng() % 8));
				break;
			case 1:
				buf[at] = (uint8_t)rng();
				break;
			case 2:
				buf[at] = 0xff;
				break;
			default:
				buf[at] = (uint8_t)(buf[at] + 1);
			}
		}
		ok += decode_checked(buf, pb.len) == 0;
	}
	ck_assert_uint_gt(ok, 0); /* some mutants only change values */
	free(buf);
	pb_free(&pb);
}
END_TEST

struct raw_case {
	const char *what;
	uint8_t bytes[16];
	size_t len;
};

START_TEST(test_malformed_wire)
{
	/* clang-format off */
#define FF9 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
	static const struct raw_case cases[] = {
		{"bad wire type", {0xa3, 0x06}, 2},			/* field 100, wire type 3 */
		{"bad wire type", {0xa7, 0x06}, 2},			/* field 100, wire type 7 */
		{"truncated varint", {0x48, 0x80}, 2},			/* time_nanos */
		{"varint overflow", {0x48, FF9, 0x02}, 11},		/* 10th byte > 1 */
		{"varint overflow", {0x48, FF9, 0xff, 0x01}, 12},	/* 11 bytes */
		{"past end", {0x32, 0x05, 'a'}, 3},			/* 1 of 5 string bytes */
		{"past end", {0x32, FF9, 0x01}, 11},			/* 2^64-1 string bytes */
		{"past end", {0xa9, 0x06, 1, 2, 3}, 5},			/* 3 of 8 fixed64 bytes */
		{"past end", {0xad, 0x06, 1, 2, 3}, 5},			/* 3 of 4 fixed32 bytes */
		{"invalid field number", {0x00}, 1},
		{"expected varint", {0x49, 1, 2, 3, 4, 5, 6, 7, 8}, 9},	/* fixed64 time_nanos */
		{"expected a message", {0x08, 0x01}, 2},		/* varint sample_type */
		{"truncated varint", {0x0a, 0x02, 0x08, 0x80}, 4},	/* inside a ValueType */
		{"past end", {0x12, 0x03, 0x0a, 0x02, 0x01}, 5},	/* packed run past Sample */
		{"truncated varint", {0x12, 0x03, 0x0a, 0x01, 0x81}, 5}, /* inside packed run */
		{"bad wire type", {0x12, 0x02, 0x7e, 0x01}, 4},		/* in a Sample */
		{"gzip", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff}, 12}, /* bad block type */
	};
#undef FF9
	/* clang-format on */
	struct pprof_profile p;
	char err[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = decode_copy(cases[i].bytes, cases[i].len, &p, err, sizeof(err));
		ck_assert_msg(rc == -EINVAL, "case %zu: rc %d", i, rc);
		ck_assert_msg(strstr(err, cases[i].what), "case %zu: '%s' lacks '%s'", i, err,
			      cases[i].what);
	}
	/* A NULL or zero-size error buffer is fine. */
	ck_assert_int_eq(pprof_decode(cases[0].bytes, cases[0].len, &p, NULL, 0), -EINVAL);
	ck_assert_int_eq(pprof_decode(cases[0].bytes, cases[0].len, &p, err, 0), -EINVAL);
}
END_TEST

/* Small profiles that parse but break one cross-reference rule each. */
static const char *build_bad(int which, struct pb_buf *pb)
{
	struct pb_buf m, l;
	pb_init(pb);
	pb_init(&m);
	pb_init(&l);
	if (which == 0) /* no string table at all */
		return "string table is empty";
	pb_string(pb, 6, which == 1 ? "x" : "");
	pb_string(pb, 6, "a");
	pb_varint(&m, 1, which == 2 ? 99 : 1);
	pb_varint(&m, 2, 1);
	put_msg(pb, 1, &m);
	pb_varint(&m, 1, which == 6 ? 5 : 1); /* function */
	pb_varint(&m, 2, 1);
	put_msg(pb, 5, &m);
	pb_varint(&m, 1, 1); /* mapping */
	pb_varint(&m, 5, which == 10 ? 5 : 1);
	put_msg(pb, 3, &m);
	pb_varint(&m, 1, which == 8 ? 0 : 1); /* location */
	pb_varint(&m, 2, which == 7 ? 9 : 1);
	pb_varint(&l, 1, 1);
	put_msg(&m, 4, &l);
	put_msg(pb, 4, &m);
	if (which == 9) {
		pb_varint(&m, 1, 1);
		put_msg(pb, 4, &m);
	}
	pb_varint(&m, 1, which == 5 ? 7 : 1); /* sample */
	pb_varint(&m, 2, 1);
	if (which == 4)
		pb_varint(&m, 2, 2);
	pb_varint(&l, 1, which == 3 ? (uint64_t)-1 : 1);
	put_msg(&m, 3, &l);
	put_msg(pb, 2, &m);
	if (which == 11)
		put_value_type(pb, 11, 1, 3, &(struct build_opts){0});
	pb_free(&m);
	pb_free(&l);
	/* clang-format off */
	static const char *const what[] = {
		[1] = "string_table[0]", [2] = "out of range", [3] = "out of range",
		[4] = "values for", [5] = "location id 7 not found",
		[6] = "function id 1 not found", [7] = "mapping id 9 not found",
		[8] = "has id 0", [9] = "duplicate location id 1", [10] = "out of range",
		[11] = "out of range", [12] = NULL,
	};
	/* clang-format on */
	return what[which];
}

START_TEST(test_malformed_refs)
{
	struct pprof_profile p;
	struct pb_buf pb;
	char err[256];

	for (int which = 0; which <= 12; which++) {
		const char *want = build_bad(which, &pb);
		int rc = decode_copy(pb.data, pb.len, &p, err, sizeof(err));
		if (!want) {
			ck_assert_msg(rc == 0, "control case: %d %s", rc, err);
			ck_assert_uint_eq(p.num_samples, 1);
		} else {
			ck_assert_msg(rc == -EINVAL, "case %d: rc %d", which, rc);
			ck_assert_msg(strstr(err, want), "case %d: '%s' lacks '%s'", which, err,
				      want);
		}
		pprof_free(&p);
		pb_free(&pb);
	}
}
END_TEST

START_TEST(test_large_index)
{
	enum { N = 100000 };
	struct pprof_profile p;
	struct pb_buf pb, m;
	char err[256];

	pb_init(&pb);
	pb_init(&m);
	pb_string(&pb, 6, "");
	for (uint64_t i = 0; i < N; i++) {
		pb_varint(&m, 1, (i + 1) * 2654435761ULL);
		pb_varint(&m, 3, i);
		put_msg(&pb, 4, &m);
	}
	pb_varint(&m, 1, 2654435761ULL * N);
	pb_varint(&m, 1, 2654435761ULL);
	put_msg(&pb, 2, &m);
	ck_assert_int_eq(decode_copy(pb.data, pb.len, &p, err, sizeof(err)), 0);
	ck_assert_uint_eq(p.num_locations, N);
	for (uint64_t i = 0; i < N; i++) {
		const struct pprof_location *loc = pprof_location(&p, (i + 1) * 2654435761ULL);
		ck_assert_ptr_nonnull(loc);
		ck_assert_uint_eq(loc->address, i);
		ck_assert_ptr_null(pprof_location(&p, (i + 1) * 2654435761ULL + 1));
	}
	ck_assert_ptr_null(pprof_function(&p, 1));
	ck_assert_ptr_null(pprof_mapping(&p, 1));
	pprof_free(&p);
	pb_free(&m);
	pb_free(&pb);
}
END_TEST

START_TEST(test_read_file)
{
	char path[] = "/tmp/test_pprof_reader.XXXXXX";
	struct pprof_profile p;
	struct pb_buf pb;
	char err[256];
	size_t gz_len;

	build_profile(&pb, &(struct build_opts){0});
	uint8_t *gz = gzip_bytes(pb.data, pb.len, &gz_len);
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, gz, gz_len), (ssize_t)gz_len);
	close(fd);
	ck_assert_int_eq(pprof_read_file(path, &p, err, sizeof(err)), 0);
	check_standard(&p);
	pprof_free(&p);
	unlink(path);
	ck_assert_int_eq(pprof_read_file(path, &p, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, path));
	ck_assert_uint_eq(p.num_samples, 0);
	free(gz);
	pb_free(&pb);
}
END_TEST

/* pprof.Lookup("goroutine").WriteTo(f, 0) from Go 1.19 (gzip): one sample, 7 frames. */
/* clang-format off */
static const uint8_t go_goroutine_profile[] = {
	0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0xff, 0x7c, 0x8f,
	0x3f, 0x6b, 0x14, 0x41, 0x18, 0xc6, 0x9d, 0xd9, 0x9d, 0xdd, 0xb9, 0xcb,
	0xc5, 0xbc, 0x88, 0xc5, 0x70, 0x08, 0xae, 0xab, 0xc2, 0x19, 0xc9, 0xce,
	0xdd, 0x68, 0x0e, 0xf3, 0x09, 0xb4, 0xb0, 0x10, 0x11, 0x02, 0x86, 0xa0,
	0x77, 0x97, 0xcd, 0xb9, 0xb0, 0x77, 0x73, 0xcc, 0xee, 0x46, 0xed, 0xa6,
	0xb3, 0x90, 0x14, 0x16, 0x62, 0x1b, 0x88, 0x8d, 0xff, 0x3e, 0x80, 0x85,
	0x85, 0x56, 0x9a, 0x42, 0x10, 0xad, 0x44, 0x50, 0xb0, 0x93, 0x74, 0x12,
	0x10, 0x2d, 0x94, 0x99, 0xdd, 0x08, 0x82, 0xdc, 0x16, 0x33, 0x3b, 0xfb,
	0xdb, 0xdf, 0xf3, 0xbc, 0x73, 0xd5, 0xa5, 0x08, 0xf0, 0x75, 0x54, 0xb7,
	0x7b, 0x08, 0x14, 0xb1, 0xfb, 0xdb, 0x77, 0x71, 0x48, 0x28, 0x82, 0x8f,
	0x1e, 0xa0, 0x79, 0x4a, 0x11, 0x38, 0xcc, 0x09, 0xdc, 0x10, 0x28, 0x66,
	0x0f, 0x37, 0x1f, 0xe0, 0x90, 0x50, 0x0c, 0x6f, 0x4b, 0x86, 0x81, 0x30,
	0x62, 0x99, 0xc3, 0x3e, 0xbc, 0x7c, 0x6c, 0x3c, 0x07, 0xde, 0x13, 0xeb,
	0x39, 0xe0, 0x31, 0x2f, 0xf0, 0x43, 0xa0, 0x2e, 0xdb, 0x7d, 0x61, 0x99,
	0x0b, 0x4f, 0x4a, 0xe6, 0x02, 0x65, 0xd4, 0x32, 0xc2, 0x76, 0x3e, 0x3d,
	0x32, 0x1e, 0x81, 0x1d, 0x6c, 0x3d, 0x02, 0x35, 0x56, 0x0b, 0xfc, 0x70,
	0x8e, 0x7a, 0xec, 0xc7, 0xf7, 0xa7, 0x38, 0x74, 0xa9, 0x07, 0xb3, 0x16,
	0x79, 0x50, 0x67, 0xf5, 0x60, 0x26, 0x04, 0xea, 0xb3, 0x7b, 0x5f, 0x37,
	0x8d, 0xe6, 0xc3, 0x4f, 0x64, 0x99, 0x0f, 0x0d, 0xd6, 0x08, 0x66, 0x0f,
	0xcd, 0x00, 0xaa, 0xfb, 0x08, 0x3b, 0x2e, 0xf1, 0xfc, 0x0b, 0xdf, 0x9e,
	0xbf, 0xf9, 0xfc, 0xea, 0xce, 0xf6, 0x1e, 0x6b, 0x02, 0x45, 0xa0, 0xb5,
	0xc6, 0x4c, 0xeb, 0x67, 0xb8, 0x75, 0xf0, 0x1c, 0x6a, 0x1e, 0xa6, 0x18,
	0xf4, 0xd6, 0xbb, 0xbd, 0xd7, 0xbb, 0x47, 0x99, 0xfe, 0x62, 0xf7, 0xd6,
	0x5c, 0xb3, 0x49, 0x1d, 0xd0, 0x5a, 0xff, 0xfa, 0x6d, 0x1e, 0xc4, 0xf4,
	0xd6, 0xfe, 0x6b, 0x0b, 0xc4, 0x01, 0x51, 0x1b, 0x4a, 0x25, 0x8b, 0x3c,
	0x19, 0xc7, 0x82, 0x0c, 0x64, 0x31, 0xce, 0x45, 0xa8, 0x8a, 0x71, 0x9e,
	0x8c, 0xe2, 0xe8, 0x2f, 0xb9, 0xa4, 0xe4, 0x7a, 0x92, 0xc6, 0xcb, 0x49,
	0x7e, 0xe3, 0x62, 0xaf, 0x1f, 0xa7, 0x99, 0x38, 0xc9, 0x8b, 0x4c, 0xf1,
	0x34, 0xe9, 0xf3, 0xa1, 0x5c, 0xe8, 0x44, 0x9d, 0x25, 0x9e, 0xa9, 0x01,
	0x57, 0xa5, 0xc8, 0x47, 0x13, 0x25, 0xd7, 0xa3, 0xa1, 0x14, 0xed, 0x2a,
	0x8a, 0x4f, 0xec, 0x97, 0xea, 0x74, 0x6d, 0x4a, 0xf0, 0xb1, 0xea, 0x9f,
	0xca, 0xb8, 0xa9, 0x92, 0x3c, 0xbe, 0x5c, 0xc6, 0x56, 0x53, 0x88, 0xd3,
	0x53, 0xbb, 0x6d, 0x53, 0xb9, 0x9a, 0x09, 0x8e, 0xfc, 0x27, 0xef, 0xbc,
	0xdc, 0xbf, 0x71, 0xf0, 0x2f, 0x6d, 0xcd, 0x57, 0x1d, 0xa7, 0xa2, 0x65,
	0x53, 0x7c, 0x45, 0x8a, 0xda, 0xa8, 0x97, 0x8c, 0x23, 0xb3, 0x08, 0xe0,
	0xf9, 0x68, 0xc2, 0x87, 0x72, 0xc2, 0xcd, 0xd1, 0x84, 0x37, 0x2a, 0xbd,
	0xe4, 0x27, 0xa6, 0xcf, 0xa5, 0xe4, 0xc0, 0x38, 0xc7, 0xab, 0x94, 0x85,
	0x7e, 0x91, 0xa4, 0x6b, 0x67, 0x96, 0xba, 0x67, 0x17, 0xbb, 0x8b, 0x5d,
	0xde, 0x6f, 0xb7, 0x3b, 0x3c, 0xbe, 0x15, 0xdb, 0x6c, 0xe1, 0xad, 0x6c,
	0xac, 0x65, 0x72, 0x55, 0xd4, 0x57, 0x36, 0xb2, 0xdb, 0xd9, 0xa0, 0x97,
	0xa6, 0xab, 0x7f, 0x02, 0x00, 0x00, 0xff, 0xff, 0x49, 0x43, 0x54, 0x31,
	0xd7, 0x02, 0x00, 0x00,
};
/* clang-format on */

START_TEST(test_go_profile)
{
	static const char *const frames[] = {"runtime.goroutineProfileWithLabels",
					     "runtime/pprof.runtime_goroutineProfileWithLabels",
					     "runtime/pprof.writeRuntimeProfile",
					     "runtime/pprof.writeGoroutine",
					     "runtime/pprof.(*Profile).WriteTo",
					     "main.main",
					     "runtime.main"};

	struct pprof_profile p;
	char err[256];

	int rc =
	    decode_copy(go_goroutine_profile, sizeof(go_goroutine_profile), &p, err, sizeof(err));
	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_uint_eq(p.num_sample_types, 1);
	ck_assert_int_eq(pprof_sample_type_index(&p, "goroutine"), 0);
	ck_assert_str_eq(pprof_str(&p, p.sample_types[0].unit), "count");
	ck_assert_str_eq(pprof_str(&p, p.period_type.type), "goroutine");
	ck_assert_int_eq(p.period, 1);
	ck_assert_int_gt(p.time_nanos, 0);
	ck_assert_uint_eq(p.num_samples, 1);
	ck_assert_int_eq(p.samples[0].values[0], 1);
	ck_assert_uint_eq(p.samples[0].num_location_ids, 7);
	for (size_t i = 0; i < 7; i++) {
		const struct pprof_location *loc = pprof_location(&p, p.samples[0].location_ids[i]);
		ck_assert_ptr_nonnull(loc);
		ck_assert_uint_eq(loc->num_lines, 1);
		const struct pprof_function *f = pprof_function(&p, loc->lines[0].function_id);
		ck_assert_ptr_nonnull(f);
		ck_assert_str_eq(pprof_str(&p, f->name), frames[i]);
		if (i == 5)
			ck_assert_int_eq(loc->lines[0].line, 13);
		const struct pprof_mapping *m = pprof_mapping(&p, loc->mapping_id);
		ck_assert_ptr_nonnull(m);
		ck_assert(m->has_functions);
		ck_assert(loc->address >= m->memory_start && loc->address < m->memory_limit);
	}
	pprof_free(&p);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("pprof_reader");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_roundtrip, 0, 4);
	tcase_add_test(tc, test_gzip);
	tcase_add_loop_test(tc, test_truncation, 0, 2);
	tcase_add_test(tc, test_mutations);
	tcase_add_test(tc, test_malformed_wire);
	tcase_add_test(tc, test_malformed_refs);
	tcase_add_test(tc, test_large_index);
	tcase_add_test(tc, test_read_file);
	tcase_add_test(tc, test_go_profile);
	suite_add_tcase(s, tc);

	return check_run_suite(s);
}
