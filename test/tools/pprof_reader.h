/*
 * pprof_reader.h - the project's own decoder of pprof profiles (profile.proto of
 * google/pprof), optionally gzip-compressed, into plain C structs.
 *
 * Owns: wire-format parsing of Profile and its nested messages, inflating gzip input,
 * validation of cross references (string indexes, location/function/mapping ids) and
 * O(1) id lookups through hash indexes built once after decoding.
 * Context: unit tests and test tools (pprof-dump) only; never linked into libddprof.so.
 * Built to survive fuzzing: malformed input yields -EINVAL and a message, never a crash.
 *
 * Decoding is strict where the profiler could be wrong: string_table[0] must be "", every
 * string index must be in range, ids of definitions must be nonzero and unique, every
 * location id of a sample must exist, a line's function id and a location's mapping id
 * must exist or be 0, and each sample must have one value per sample type.
 */
#ifndef DDPROF_TEST_TOOLS_PPROF_READER_H
#define DDPROF_TEST_TOOLS_PPROF_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fields ending in a string-table index are int64_t, resolve them with pprof_str. */
struct pprof_value_type {
	int64_t type;
	int64_t unit;
};

struct pprof_label {
	int64_t key;
	int64_t str; /* 0 ("") when the label is numeric */
	int64_t num;
	int64_t num_unit;
};

struct pprof_sample {
	uint64_t *location_ids; /* leaf first */
	size_t num_location_ids;
	int64_t *values; /* one per sample type */
	size_t num_values;
	struct pprof_label *labels;
	size_t num_labels;
};

struct pprof_mapping {
	uint64_t id;
	uint64_t memory_start;
	uint64_t memory_limit;
	uint64_t file_offset;
	int64_t filename;
	int64_t build_id;
	bool has_functions;
	bool has_filenames;
	bool has_line_numbers;
	bool has_inline_frames;
};

struct pprof_line {
	uint64_t function_id; /* 0 when unknown */
	int64_t line;
	int64_t column;
};

struct pprof_location {
	uint64_t id;
	uint64_t mapping_id; /* 0 when unknown */
	uint64_t address;
	struct pprof_line *lines; /* innermost (inlined) first, caller last */
	size_t num_lines;
	bool is_folded;
};

struct pprof_function {
	uint64_t id;
	int64_t name;
	int64_t system_name;
	int64_t filename;
	int64_t start_line;
};

/* Open-addressing id -> array index map; private to pprof_reader.c. */
struct pprof_id_index {
	uint64_t *keys; /* 0 marks an empty slot (ids are nonzero) */
	uint32_t *slots;
	size_t mask;
};

struct pprof_profile {
	struct pprof_value_type *sample_types;
	size_t num_sample_types;
	struct pprof_sample *samples;
	size_t num_samples;
	struct pprof_mapping *mappings;
	size_t num_mappings;
	struct pprof_location *locations;
	size_t num_locations;
	struct pprof_function *functions;
	size_t num_functions;
	const char **strings; /* NUL-terminated copies; may contain NULs, see string_lens */
	size_t *string_lens;
	size_t num_strings;
	int64_t drop_frames;
	int64_t keep_frames;
	int64_t time_nanos;
	int64_t duration_nanos;
	struct pprof_value_type period_type;
	int64_t period;
	int64_t *comments;
	size_t num_comments;
	int64_t default_sample_type;

	/* Private. */
	char *string_data;
	struct pprof_id_index location_index;
	struct pprof_id_index function_index;
	struct pprof_id_index mapping_index;
};

/*
 * Decodes len bytes (gzip-compressed when they start with 1f 8b) into *out, which is
 * overwritten. Returns 0, -EINVAL on malformed input (message in err when err != NULL),
 * -E2BIG when the inflated size exceeds 1 GiB, or -ENOMEM. On error *out is left empty
 * (safe to pprof_free).
 */
int pprof_decode(const uint8_t *data, size_t len, struct pprof_profile *out, char *err,
		 size_t errlen);
/* Reads and decodes a file; -errno of open/read failures, otherwise as pprof_decode. */
int pprof_read_file(const char *path, struct pprof_profile *out, char *err, size_t errlen);
void pprof_free(struct pprof_profile *p);

/* String at idx, or NULL when idx is out of range. */
const char *pprof_str(const struct pprof_profile *p, int64_t idx);
/* Byte length of the string at idx (0 when out of range). */
size_t pprof_str_len(const struct pprof_profile *p, int64_t idx);
/* Definitions by id in O(1), or NULL. */
const struct pprof_location *pprof_location(const struct pprof_profile *p, uint64_t id);
const struct pprof_function *pprof_function(const struct pprof_profile *p, uint64_t id);
const struct pprof_mapping *pprof_mapping(const struct pprof_profile *p, uint64_t id);
/* Index in sample values of the sample type named type, or -1. */
int pprof_sample_type_index(const struct pprof_profile *p, const char *type);
/* First label of s whose key is key, or NULL. */
const struct pprof_label *pprof_sample_label(const struct pprof_sample *s,
					     const struct pprof_profile *p, const char *key);

#endif
