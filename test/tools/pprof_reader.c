/*
 * pprof_reader.c - decoder of gzip-compressed pprof profiles (see pprof_reader.h).
 *
 * Owns: a bounds-checked protobuf wire reader, the Profile message schema, gzip inflation,
 * post-decode validation and the id indexes.
 * Context: unit tests and test tools only, not linked into the library. Every read is
 * checked against the end of its enclosing message, so truncated or hostile input fails
 * with -EINVAL instead of reading out of bounds; it is meant to be fuzzed.
 */
#include "test/tools/pprof_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define WIRE_VARINT 0
#define WIRE_I64 1
#define WIRE_LEN 2
#define WIRE_I32 5
#define VARINT_MAX_BYTES 10
#define MAX_INFLATED ((size_t)1 << 30)
#define MAX_ITEMS ((size_t)UINT32_MAX - 1) /* the id indexes store uint32_t slots */

struct rd {
	const uint8_t *p;
	const uint8_t *end;
};

struct span {
	const uint8_t *p;
	size_t len;
};

/* Decoding state: the profile being filled, string-table spans and the error sink. */
struct dec {
	struct pprof_profile *prof;
	const uint8_t *base; /* for offsets in messages */
	char *err;
	size_t errlen;
	bool failed;
	struct span *strs;
	size_t num_strs;
};

__attribute__((format(printf, 3, 4))) static int fail_rc(struct dec *d, int rc, const char *fmt,
							 ...)
{
	if (!d->failed && d->err && d->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(d->err, d->errlen, fmt, ap);
		va_end(ap);
	}
	d->failed = true;
	return rc;
}

#define fail(d, ...) fail_rc((d), -EINVAL, __VA_ARGS__)
#define nomem(d) fail_rc((d), -ENOMEM, "out of memory")

static size_t off(const struct dec *d, const uint8_t *p)
{
	return (size_t)(p - d->base);
}

/*
 * Returns arr with room for element n, or NULL. The capacity is implicit: arrays grow
 * to 8 and then double whenever n reaches a power of two, so no capacity is stored.
 */
static void *grow_array(void *arr, size_t n, size_t elsize)
{
	if (n != 0 && (n < 8 || (n & (n - 1))))
		return arr;
	size_t ncap = n ? 2 * n : 8;
	if (ncap > MAX_ITEMS || ncap > SIZE_MAX / elsize)
		return NULL;
	return realloc(arr, ncap * elsize);
}

/* Makes room for arr[n]; returns -ENOMEM from the calling function on failure. */
#define RESERVE(d, arr, n)                                                                         \
	do {                                                                                       \
		void *na_ = grow_array((arr), (n), sizeof(*(arr)));                                \
		if (!na_)                                                                          \
			return nomem(d);                                                           \
		(arr) = na_;                                                                       \
	} while (0)

static int rd_varint(struct dec *d, struct rd *r, uint64_t *v)
{
	const uint8_t *start = r->p;
	uint64_t x = 0;

	for (unsigned i = 0; i < VARINT_MAX_BYTES; i++) {
		if (r->p >= r->end)
			return fail(d, "truncated varint at offset %zu", off(d, start));
		uint8_t b = *r->p++;
		if (i == VARINT_MAX_BYTES - 1 && b > 1)
			break;
		x |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return fail(d, "varint overflow at offset %zu", off(d, start));
}

static int rd_tag(struct dec *d, struct rd *r, uint32_t *field, unsigned *wire)
{
	const uint8_t *start = r->p;
	uint64_t v;
	int rc = rd_varint(d, r, &v);
	if (rc)
		return rc;
	if (v >> 3 == 0 || v >> 3 > 0x1fffffff)
		return fail(d, "invalid field number %llu at offset %zu",
			    (unsigned long long)(v >> 3), off(d, start));
	*field = (uint32_t)(v >> 3);
	*wire = (unsigned)(v & 7);
	return 0;
}

/* Reads a length prefix and the bytes it covers into sub. */
static int rd_len(struct dec *d, struct rd *r, struct rd *sub)
{
	const uint8_t *start = r->p;
	uint64_t len;
	int rc = rd_varint(d, r, &len);
	if (rc)
		return rc;
	if (len > (uint64_t)(r->end - r->p))
		return fail(d, "length %llu past end of message at offset %zu",
			    (unsigned long long)len, off(d, start));
	sub->p = r->p;
	sub->end = r->p + len;
	r->p += len;
	return 0;
}

static int rd_skip(struct dec *d, struct rd *r, uint32_t field, unsigned wire)
{
	size_t fixed = wire == WIRE_I64 ? 8 : 4;
	struct rd sub;
	uint64_t v;

	if (wire == WIRE_VARINT)
		return rd_varint(d, r, &v);
	if (wire == WIRE_LEN)
		return rd_len(d, r, &sub);
	if (wire != WIRE_I64 && wire != WIRE_I32)
		return fail(d, "field %u: bad wire type %u at offset %zu", field, wire,
			    off(d, r->p));
	if ((size_t)(r->end - r->p) < fixed)
		return fail(d, "%zu bytes past end of message at offset %zu", fixed, off(d, r->p));
	r->p += fixed;
	return 0;
}

static int rd_u64(struct dec *d, struct rd *r, uint32_t field, unsigned wire, uint64_t *v)
{
	if (wire != WIRE_VARINT)
		return fail(d, "field %u: wire type %u, expected varint, at offset %zu", field,
			    wire, off(d, r->p));
	return rd_varint(d, r, v);
}

static int rd_msg(struct dec *d, struct rd *r, uint32_t field, unsigned wire, struct rd *sub)
{
	if (wire != WIRE_LEN)
		return fail(d, "field %u: wire type %u, expected a message, at offset %zu", field,
			    wire, off(d, r->p));
	return rd_len(d, r, sub);
}

/* The varints of a repeated scalar field: one (unpacked) or a packed run. */
static int rd_scalars(struct dec *d, struct rd *r, uint32_t field, unsigned wire, struct rd *vals)
{
	if (wire == WIRE_LEN)
		return rd_len(d, r, vals);
	vals->p = r->p;
	uint64_t v;
	int rc = rd_u64(d, r, field, wire, &v);
	vals->end = r->p;
	return rc;
}

/* Appends the values of a repeated int64/uint64 field (packed or not) to arr[0..n). */
#define RETURN_REPEATED(d, r, field, wire, arr, n)                                                 \
	do {                                                                                       \
		struct rd vals_;                                                                   \
		uint64_t v_;                                                                       \
		int rc_ = rd_scalars((d), (r), (field), (wire), &vals_);                           \
		while (!rc_ && vals_.p < vals_.end && !(rc_ = rd_varint((d), &vals_, &v_))) {      \
			RESERVE((d), (arr), (n));                                                  \
			(arr)[(n)++] = (__typeof__((arr)[0]))v_;                                   \
		}                                                                                  \
		return rc_;                                                                        \
	} while (0)

/* A scalar field of a message, stored at offset in the decoded struct. */
enum kind { K_U64, K_I64, K_BOOL };

struct field_desc {
	uint32_t field;
	enum kind kind;
	size_t offset;
};

/* Decodes fields that are not in the scalar table; returns 0 or an error. */
typedef int (*other_field_fn)(struct dec *d, struct rd *r, uint32_t field, unsigned wire,
			      void *obj);

static int decode_msg(struct dec *d, struct rd *r, const struct field_desc *fds, void *obj,
		      other_field_fn other)
{
	uint32_t field = 0;
	unsigned wire = 0;
	uint64_t v = 0;
	int rc = 0;

	while (!rc && r->p < r->end && !(rc = rd_tag(d, r, &field, &wire))) {
		const struct field_desc *fd = fds;
		while (fd->field && fd->field != field)
			fd++;
		if (!fd->field) {
			rc = other ? other(d, r, field, wire, obj) : rd_skip(d, r, field, wire);
			continue;
		}
		rc = rd_u64(d, r, field, wire, &v);
		if (rc)
			break;
		char *at = (char *)obj + fd->offset;
		if (fd->kind == K_BOOL)
			*(bool *)at = v != 0;
		else if (fd->kind == K_I64)
			*(int64_t *)at = (int64_t)v;
		else
			*(uint64_t *)at = v;
	}
	return rc;
}

/* clang-format off */
#define FD(num, kind, type, member) {num, kind, offsetof(struct type, member)}

static const struct field_desc value_type_fields[] = {
	FD(1, K_I64, pprof_value_type, type), FD(2, K_I64, pprof_value_type, unit), {0},
};
static const struct field_desc label_fields[] = {
	FD(1, K_I64, pprof_label, key), FD(2, K_I64, pprof_label, str),
	FD(3, K_I64, pprof_label, num), FD(4, K_I64, pprof_label, num_unit), {0},
};
static const struct field_desc mapping_fields[] = {
	FD(1, K_U64, pprof_mapping, id), FD(2, K_U64, pprof_mapping, memory_start),
	FD(3, K_U64, pprof_mapping, memory_limit), FD(4, K_U64, pprof_mapping, file_offset),
	FD(5, K_I64, pprof_mapping, filename), FD(6, K_I64, pprof_mapping, build_id),
	FD(7, K_BOOL, pprof_mapping, has_functions), FD(8, K_BOOL, pprof_mapping, has_filenames),
	FD(9, K_BOOL, pprof_mapping, has_line_numbers),
	FD(10, K_BOOL, pprof_mapping, has_inline_frames), {0},
};
static const struct field_desc line_fields[] = {
	FD(1, K_U64, pprof_line, function_id), FD(2, K_I64, pprof_line, line),
	FD(3, K_I64, pprof_line, column), {0},
};
/* Field 4 (line) is decoded by location_field. */
static const struct field_desc location_fields[] = {
	FD(1, K_U64, pprof_location, id), FD(2, K_U64, pprof_location, mapping_id),
	FD(3, K_U64, pprof_location, address), FD(5, K_BOOL, pprof_location, is_folded), {0},
};
static const struct field_desc function_fields[] = {
	FD(1, K_U64, pprof_function, id), FD(2, K_I64, pprof_function, name),
	FD(3, K_I64, pprof_function, system_name), FD(4, K_I64, pprof_function, filename),
	FD(5, K_I64, pprof_function, start_line), {0},
};
/* All fields of Sample are repeated: decoded by sample_field. */
static const struct field_desc sample_fields[] = {{0}};
/* Repeated and nested fields are decoded by profile_field. */
static const struct field_desc profile_fields[] = {
	FD(7, K_I64, pprof_profile, drop_frames), FD(8, K_I64, pprof_profile, keep_frames),
	FD(9, K_I64, pprof_profile, time_nanos), FD(10, K_I64, pprof_profile, duration_nanos),
	FD(12, K_I64, pprof_profile, period), FD(14, K_I64, pprof_profile, default_sample_type),
	{0},
};
/* clang-format on */

/* Appends a zeroed element to arr[0..n) and decodes the nested message into it. */
#define RETURN_DECODE_CHILD(d, r, field, wire, arr, n, fds, other)                                 \
	do {                                                                                       \
		struct rd sub_;                                                                    \
		int rc_ = rd_msg((d), (r), (field), (wire), &sub_);                                \
		if (rc_)                                                                           \
			return rc_;                                                                \
		RESERVE((d), (arr), (n));                                                          \
		memset(&(arr)[(n)], 0, sizeof((arr)[0]));                                          \
		return decode_msg((d), &sub_, (fds), &(arr)[(n)++], (other));                      \
	} while (0)

static int sample_field(struct dec *d, struct rd *r, uint32_t field, unsigned wire, void *obj)
{
	struct pprof_sample *s = obj;

	if (field == 1)
		RETURN_REPEATED(d, r, field, wire, s->location_ids, s->num_location_ids);
	if (field == 2)
		RETURN_REPEATED(d, r, field, wire, s->values, s->num_values);
	if (field == 3)
		RETURN_DECODE_CHILD(d, r, field, wire, s->labels, s->num_labels, label_fields,
				    NULL);
	return rd_skip(d, r, field, wire);
}

static int location_field(struct dec *d, struct rd *r, uint32_t field, unsigned wire, void *obj)
{
	struct pprof_location *loc = obj;

	if (field == 4)
		RETURN_DECODE_CHILD(d, r, field, wire, loc->lines, loc->num_lines, line_fields,
				    NULL);
	return rd_skip(d, r, field, wire);
}

static int profile_field(struct dec *d, struct rd *r, uint32_t field, unsigned wire, void *obj)
{
	struct pprof_profile *p = obj;
	struct rd sub;
	int rc;

	switch (field) {
	case 1:
		RETURN_DECODE_CHILD(d, r, field, wire, p->sample_types, p->num_sample_types,
				    value_type_fields, NULL);
	case 2:
		RETURN_DECODE_CHILD(d, r, field, wire, p->samples, p->num_samples, sample_fields,
				    sample_field);
	case 3:
		RETURN_DECODE_CHILD(d, r, field, wire, p->mappings, p->num_mappings, mapping_fields,
				    NULL);
	case 4:
		RETURN_DECODE_CHILD(d, r, field, wire, p->locations, p->num_locations,
				    location_fields, location_field);
	case 5:
		RETURN_DECODE_CHILD(d, r, field, wire, p->functions, p->num_functions,
				    function_fields, NULL);
	case 6:
		rc = rd_msg(d, r, field, wire, &sub);
		if (rc)
			return rc;
		RESERVE(d, d->strs, d->num_strs);
		d->strs[d->num_strs].p = sub.p;
		d->strs[d->num_strs++].len = (size_t)(sub.end - sub.p);
		return 0;
	case 11:
		rc = rd_msg(d, r, field, wire, &sub);
		return rc ? rc : decode_msg(d, &sub, value_type_fields, &p->period_type, NULL);
	case 13:
		RETURN_REPEATED(d, r, field, wire, p->comments, p->num_comments);
	default:
		return rd_skip(d, r, field, wire);
	}
}

/* Copies the string table out of the input buffer, NUL-terminating each string. */
static int build_strings(struct dec *d)
{
	struct pprof_profile *p = d->prof;
	size_t total = 0;

	for (size_t i = 0; i < d->num_strs; i++)
		total += d->strs[i].len + 1;
	p->string_data = malloc(total ? total : 1);
	p->strings = calloc(d->num_strs ? d->num_strs : 1, sizeof(*p->strings));
	p->string_lens = calloc(d->num_strs ? d->num_strs : 1, sizeof(*p->string_lens));
	if (!p->string_data || !p->strings || !p->string_lens)
		return nomem(d);
	char *s = p->string_data;
	for (size_t i = 0; i < d->num_strs; i++) {
		if (d->strs[i].len)
			memcpy(s, d->strs[i].p, d->strs[i].len);
		s[d->strs[i].len] = '\0';
		p->strings[i] = s;
		p->string_lens[i] = d->strs[i].len;
		s += d->strs[i].len + 1;
	}
	p->num_strings = d->num_strs;
	return 0;
}

static size_t id_hash(uint64_t id, size_t mask)
{
	id *= 0x9e3779b97f4a7c15ULL;
	return (size_t)(id ^ (id >> 29)) & mask;
}

static int index_init(struct dec *d, struct pprof_id_index *ix, size_t n)
{
	size_t cap = 8;
	while (cap < 2 * n)
		cap *= 2;
	ix->keys = calloc(cap, sizeof(*ix->keys));
	ix->slots = calloc(cap, sizeof(*ix->slots));
	if (!ix->keys || !ix->slots)
		return nomem(d);
	ix->mask = cap - 1;
	return 0;
}

static int index_add(struct dec *d, struct pprof_id_index *ix, uint64_t id, size_t slot,
		     const char *what)
{
	if (id == 0)
		return fail(d, "%s #%zu has id 0", what, slot);
	size_t i = id_hash(id, ix->mask);
	while (ix->keys[i]) {
		if (ix->keys[i] == id)
			return fail(d, "duplicate %s id %llu", what, (unsigned long long)id);
		i = (i + 1) & ix->mask;
	}
	ix->keys[i] = id;
	ix->slots[i] = (uint32_t)slot;
	return 0;
}

static int64_t index_find(const struct pprof_id_index *ix, uint64_t id)
{
	if (!ix->keys || id == 0)
		return -1;
	for (size_t i = id_hash(id, ix->mask);; i = (i + 1) & ix->mask) {
		if (ix->keys[i] == id)
			return ix->slots[i];
		if (!ix->keys[i])
			return -1;
	}
}

static int build_indexes(struct dec *d)
{
	struct pprof_profile *p = d->prof;
	int rc = index_init(d, &p->location_index, p->num_locations);
	for (size_t i = 0; !rc && i < p->num_locations; i++)
		rc = index_add(d, &p->location_index, p->locations[i].id, i, "location");
	if (!rc)
		rc = index_init(d, &p->function_index, p->num_functions);
	for (size_t i = 0; !rc && i < p->num_functions; i++)
		rc = index_add(d, &p->function_index, p->functions[i].id, i, "function");
	if (!rc)
		rc = index_init(d, &p->mapping_index, p->num_mappings);
	for (size_t i = 0; !rc && i < p->num_mappings; i++)
		rc = index_add(d, &p->mapping_index, p->mappings[i].id, i, "mapping");
	return rc;
}

/* Reports (and returns true for) a string index out of range; idx names item #i. */
static bool bad_str(struct dec *d, int64_t idx, const char *what, size_t i)
{
	if (idx >= 0 && (uint64_t)idx < d->prof->num_strings)
		return false;
	fail(d, "%s (#%zu): string index %lld out of range (%zu strings)", what, i, (long long)idx,
	     d->prof->num_strings);
	return true;
}

static int validate_strings(struct dec *d)
{
	const struct pprof_profile *p = d->prof;

	if (p->num_strings == 0)
		return fail(d, "string table is empty (string_table[0] must be \"\")");
	if (p->string_lens[0] != 0)
		return fail(d, "string_table[0] is not \"\"");
	for (size_t i = 0; i < p->num_sample_types; i++)
		if (bad_str(d, p->sample_types[i].type, "sample_type.type", i) ||
		    bad_str(d, p->sample_types[i].unit, "sample_type.unit", i))
			return -EINVAL;
	for (size_t i = 0; i < p->num_samples; i++)
		for (size_t j = 0; j < p->samples[i].num_labels; j++)
			if (bad_str(d, p->samples[i].labels[j].key, "label.key", i) ||
			    bad_str(d, p->samples[i].labels[j].str, "label.str", i) ||
			    bad_str(d, p->samples[i].labels[j].num_unit, "label.num_unit", i))
				return -EINVAL;
	for (size_t i = 0; i < p->num_mappings; i++)
		if (bad_str(d, p->mappings[i].filename, "mapping.filename", i) ||
		    bad_str(d, p->mappings[i].build_id, "mapping.build_id", i))
			return -EINVAL;
	for (size_t i = 0; i < p->num_functions; i++)
		if (bad_str(d, p->functions[i].name, "function.name", i) ||
		    bad_str(d, p->functions[i].system_name, "function.system_name", i) ||
		    bad_str(d, p->functions[i].filename, "function.filename", i))
			return -EINVAL;
	for (size_t i = 0; i < p->num_comments; i++)
		if (bad_str(d, p->comments[i], "comment", i))
			return -EINVAL;
	if (bad_str(d, p->drop_frames, "drop_frames", 0) ||
	    bad_str(d, p->keep_frames, "keep_frames", 0) ||
	    bad_str(d, p->period_type.type, "period_type.type", 0) ||
	    bad_str(d, p->period_type.unit, "period_type.unit", 0) ||
	    bad_str(d, p->default_sample_type, "default_sample_type", 0))
		return -EINVAL;
	return 0;
}

static int validate_refs(struct dec *d)
{
	const struct pprof_profile *p = d->prof;

	for (size_t i = 0; i < p->num_samples; i++) {
		const struct pprof_sample *s = &p->samples[i];
		if (s->num_values != p->num_sample_types)
			return fail(d, "sample #%zu has %zu values for %zu sample types", i,
				    s->num_values, p->num_sample_types);
		for (size_t j = 0; j < s->num_location_ids; j++)
			if (index_find(&p->location_index, s->location_ids[j]) < 0)
				return fail(d, "sample #%zu: location id %llu not found", i,
					    (unsigned long long)s->location_ids[j]);
	}
	for (size_t i = 0; i < p->num_locations; i++) {
		const struct pprof_location *loc = &p->locations[i];
		if (loc->mapping_id && index_find(&p->mapping_index, loc->mapping_id) < 0)
			return fail(d, "location %llu: mapping id %llu not found",
				    (unsigned long long)loc->id,
				    (unsigned long long)loc->mapping_id);
		for (size_t j = 0; j < loc->num_lines; j++) {
			uint64_t fid = loc->lines[j].function_id;
			if (fid && index_find(&p->function_index, fid) < 0)
				return fail(d, "location %llu: function id %llu not found",
					    (unsigned long long)loc->id, (unsigned long long)fid);
		}
	}
	return 0;
}

static int decode_raw(struct dec *d, const uint8_t *data, size_t len)
{
	struct rd r = {data, data + len};

	d->base = data;
	int rc = decode_msg(d, &r, profile_fields, d->prof, profile_field);
	rc = rc ? rc : build_strings(d);
	rc = rc ? rc : validate_strings(d);
	rc = rc ? rc : build_indexes(d);
	return rc ? rc : validate_refs(d);
}

/* Inflates gzip (or zlib) data, including concatenated gzip members. */
static int gunzip(struct dec *d, const uint8_t *in, size_t len, uint8_t **outp, size_t *outlen)
{
	const uint8_t *in_end = in + len;
	size_t cap = (len < MAX_INFLATED / 8 ? len * 4 : MAX_INFLATED / 2) + 4096, n = 0;
	uint8_t *buf;
	z_stream zs;
	int rc = 0;

	if (len > MAX_INFLATED)
		return fail_rc(d, -E2BIG, "compressed profile exceeds %zu bytes", MAX_INFLATED);
	buf = malloc(cap);
	memset(&zs, 0, sizeof(zs));
	zs.next_in = (Bytef *)in;
	zs.avail_in = (uInt)len;
	if (!buf || inflateInit2(&zs, 15 + 32) != Z_OK) {
		free(buf);
		return nomem(d);
	}
	for (;;) {
		if (n == cap) {
			if (cap >= MAX_INFLATED) {
				rc = fail_rc(d, -E2BIG, "inflated profile exceeds %zu bytes", cap);
				break;
			}
			size_t ncap = cap * 2 > MAX_INFLATED ? MAX_INFLATED : cap * 2;
			uint8_t *nb = realloc(buf, ncap);
			if (!nb) {
				rc = nomem(d);
				break;
			}
			buf = nb;
			cap = ncap;
		}
		zs.next_out = buf + n;
		zs.avail_out = (uInt)(cap - n);
		int zr = inflate(&zs, Z_NO_FLUSH);
		n = (size_t)(zs.next_out - buf);
		size_t in_left = (size_t)(in_end - zs.next_in);
		if (zr == Z_STREAM_END) {
			if (in_left == 0)
				break;
			if (in_left >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b &&
			    inflateReset(&zs) == Z_OK)
				continue;
			rc = fail(d, "%zu trailing bytes after gzip stream", in_left);
			break;
		}
		if (zr == Z_OK || (zr == Z_BUF_ERROR && zs.avail_out == 0))
			continue;
		if (zr == Z_BUF_ERROR && in_left == 0)
			rc = fail(d, "truncated gzip stream");
		else if (zr == Z_MEM_ERROR)
			rc = nomem(d);
		else
			rc = fail(d, "corrupt gzip stream: %s", zs.msg ? zs.msg : "unknown error");
		break;
	}
	inflateEnd(&zs);
	*outp = buf; /* freed by the caller even on error */
	*outlen = n;
	return rc;
}

int pprof_decode(const uint8_t *data, size_t len, struct pprof_profile *out, char *err,
		 size_t errlen)
{
	struct dec d;
	int rc;

	memset(out, 0, sizeof(*out));
	memset(&d, 0, sizeof(d));
	d.prof = out;
	d.err = err;
	d.errlen = errlen;
	if (err && errlen)
		err[0] = '\0';
	if (len >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
		uint8_t *raw = NULL;
		size_t raw_len = 0;
		rc = gunzip(&d, data, len, &raw, &raw_len);
		if (!rc)
			rc = decode_raw(&d, raw, raw_len);
		free(raw);
	} else {
		rc = decode_raw(&d, data, len);
	}
	free(d.strs);
	if (rc)
		pprof_free(out);
	return rc;
}

int pprof_read_file(const char *path, struct pprof_profile *out, char *err, size_t errlen)
{
	size_t len = 0, cap = 1 << 16;
	uint8_t *buf = malloc(cap);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = fd < 0 ? -errno : buf ? 0 : -ENOMEM;

	memset(out, 0, sizeof(*out));
	while (!rc) {
		if (len == cap) {
			uint8_t *nb = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + len, cap - len);
		if (r == 0)
			break;
		if (r > 0)
			len += (size_t)r;
		else if (errno != EINTR)
			rc = -errno;
	}
	if (!rc) {
		char msg[512] = "";
		rc = pprof_decode(buf, len, out, msg, sizeof(msg));
		if (rc && err && errlen)
			snprintf(err, errlen, "%s: %s", path, msg);
	} else if (err && errlen) {
		snprintf(err, errlen, "%s: %s", path, strerror(-rc));
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return rc;
}

static void index_free(struct pprof_id_index *ix)
{
	free(ix->keys);
	free(ix->slots);
}

void pprof_free(struct pprof_profile *p)
{
	for (size_t i = 0; i < p->num_samples; i++) {
		free(p->samples[i].location_ids);
		free(p->samples[i].values);
		free(p->samples[i].labels);
	}
	for (size_t i = 0; i < p->num_locations; i++)
		free(p->locations[i].lines);
	free(p->sample_types);
	free(p->samples);
	free(p->mappings);
	free(p->locations);
	free(p->functions);
	free(p->strings);
	free(p->string_lens);
	free(p->string_data);
	free(p->comments);
	index_free(&p->location_index);
	index_free(&p->function_index);
	index_free(&p->mapping_index);
	memset(p, 0, sizeof(*p));
}

const char *pprof_str(const struct pprof_profile *p, int64_t idx)
{
	if (idx < 0 || (uint64_t)idx >= p->num_strings)
		return NULL;
	return p->strings[idx];
}

size_t pprof_str_len(const struct pprof_profile *p, int64_t idx)
{
	if (idx < 0 || (uint64_t)idx >= p->num_strings)
		return 0;
	return p->string_lens[idx];
}

const struct pprof_location *pprof_location(const struct pprof_profile *p, uint64_t id)
{
	int64_t i = index_find(&p->location_index, id);
	return i < 0 ? NULL : &p->locations[i];
}

const struct pprof_function *pprof_function(const struct pprof_profile *p, uint64_t id)
{
	int64_t i = index_find(&p->function_index, id);
	return i < 0 ? NULL : &p->functions[i];
}

const struct pprof_mapping *pprof_mapping(const struct pprof_profile *p, uint64_t id)
{
	int64_t i = index_find(&p->mapping_index, id);
	return i < 0 ? NULL : &p->mappings[i];
}

static bool str_eq(const struct pprof_profile *p, int64_t idx, const char *s)
{
	size_t len = strlen(s);
	return pprof_str(p, idx) && pprof_str_len(p, idx) == len &&
	       memcmp(pprof_str(p, idx), s, len) == 0;
}

int pprof_sample_type_index(const struct pprof_profile *p, const char *type)
{
	for (size_t i = 0; i < p->num_sample_types && i < INT_MAX; i++)
		if (str_eq(p, p->sample_types[i].type, type))
			return (int)i;
	return -1;
}

const struct pprof_label *pprof_sample_label(const struct pprof_sample *s,
					     const struct pprof_profile *p, const char *key)
{
	for (size_t i = 0; i < s->num_labels; i++)
		if (str_eq(p, s->labels[i].key, key))
			return &s->labels[i];
	return NULL;
}
