/*
 * pprof_dump.c - pprof-dump: prints what a pprof file holds, for people and for tests.
 *
 * Owns: the command line `pprof-dump [--json] [--stacks] FILE...`, aggregation of a
 * decoded profile (totals, per-thread values, self/total per function name, stacks) and
 * its rendering as one JSON object per line (for Python's json.loads) or as a summary.
 * Context: test tool built next to libddprof.so, never linked into it; decoding is done by
 * pprof_reader.c. Frames without a function name are named "[basename]+0xOFFSET" when
 * their location has a mapping (OFFSET in the mapped file) and "0xADDRESS" otherwise.
 * A location with several Lines (inlined functions) gives several frames, innermost
 * first; each frame's source position is "FILE:LINE" ("FILE" when the line is unknown,
 * "" when the file is).
 */
#include "test/tools/pprof_reader.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOP_FUNCTIONS 20
/* Output goes through the *_unlocked stdio calls: single-threaded, and stacks are large. */

/* A distinct frame name with its summed values. */
struct agg {
	char *name;
	int64_t *self;
	int64_t *total;
	size_t last_sample; /* 1 + index of the last sample counted in total */
};

struct thread_ref {
	bool has_tid;
	int64_t tid;
	size_t sample;
};

struct dump {
	const struct pprof_profile *p;
	const char *path;
	size_t nv; /* values per sample */
	struct agg *aggs;
	size_t num_aggs;
	size_t *slots; /* name hash: 1 + agg index, 0 when empty */
	size_t mask;
	size_t *loc_frames; /* agg index of each frame, locations in order, innermost first */
	char **loc_pos;	    /* "file:line" of each frame, parallel to loc_frames */
	size_t *loc_start;  /* per location: first entry in loc_frames; [num_locations] = end */
	int64_t *totals;
};

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);
	if (!p) {
		fprintf(stderr, "pprof-dump: out of memory\n");
		exit(1);
	}
	return p;
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

/* Index of the aggregate named name, created on first use (the table never fills). */
static size_t agg_get(struct dump *d, const char *name)
{
	size_t i = (size_t)fnv1a(name) & d->mask;
	for (; d->slots[i]; i = (i + 1) & d->mask)
		if (strcmp(d->aggs[d->slots[i] - 1].name, name) == 0)
			return d->slots[i] - 1;
	struct agg *a = &d->aggs[d->num_aggs];
	a->name = strdup(name);
	a->self = xcalloc(d->nv, sizeof(int64_t));
	a->total = xcalloc(d->nv, sizeof(int64_t));
	if (!a->name) {
		fprintf(stderr, "pprof-dump: out of memory\n");
		exit(1);
	}
	d->slots[i] = ++d->num_aggs;
	return d->num_aggs - 1;
}

/* Name of a frame without a function name: mapping-relative when the mapping is known. */
static void location_name(const struct pprof_profile *p, const struct pprof_location *loc,
			  char *buf, size_t size)
{
	const struct pprof_mapping *m = pprof_mapping(p, loc->mapping_id);
	if (!m) {
		snprintf(buf, size, "0x%" PRIx64, loc->address);
		return;
	}
	const char *file = pprof_str(p, m->filename);
	const char *slash = strrchr(file, '/');
	const char *base = slash ? slash + 1 : file;
	uint64_t offset = loc->address >= m->memory_start
			      ? loc->address - m->memory_start + m->file_offset
			      : loc->address;
	snprintf(buf, size, "[%s]+0x%" PRIx64, *base ? base : "unknown", offset);
}

/* "file:line" of a frame (malloc'd): "file" without a line, "" without a file. */
static char *frame_position(const struct pprof_profile *p, const struct pprof_function *f,
			    int64_t line)
{
	const char *file = f ? pprof_str(p, f->filename) : NULL;
	char *pos = NULL;
	int rc;
	if (!file || !*file)
		rc = asprintf(&pos, "%s", "");
	else if (line > 0)
		rc = asprintf(&pos, "%s:%" PRId64, file, line);
	else
		rc = asprintf(&pos, "%s", file);
	if (rc < 0) {
		fprintf(stderr, "pprof-dump: out of memory\n");
		exit(1);
	}
	return pos;
}

static void build_frames(struct dump *d)
{
	const struct pprof_profile *p = d->p;
	size_t n = 0, cap = 16;
	char buf[4096];

	for (size_t i = 0; i < p->num_locations; i++)
		n += p->locations[i].num_lines ? p->locations[i].num_lines : 1;
	while (cap < 2 * n)
		cap *= 2;
	d->slots = xcalloc(cap, sizeof(*d->slots));
	d->mask = cap - 1;
	d->aggs = xcalloc(n, sizeof(*d->aggs));
	d->loc_frames = xcalloc(n, sizeof(*d->loc_frames));
	d->loc_pos = xcalloc(n, sizeof(*d->loc_pos));
	d->loc_start = xcalloc(p->num_locations + 1, sizeof(*d->loc_start));
	n = 0;
	for (size_t i = 0; i < p->num_locations; i++) {
		const struct pprof_location *loc = &p->locations[i];
		d->loc_start[i] = n;
		for (size_t j = 0; j < loc->num_lines || j == 0; j++) {
			const struct pprof_function *f =
			    j < loc->num_lines ? pprof_function(p, loc->lines[j].function_id)
					       : NULL;
			if (f && pprof_str_len(p, f->name))
				snprintf(buf, sizeof(buf), "%s", pprof_str(p, f->name));
			else
				location_name(p, loc, buf, sizeof(buf));
			d->loc_pos[n] =
			    frame_position(p, f, j < loc->num_lines ? loc->lines[j].line : 0);
			d->loc_frames[n++] = agg_get(d, buf);
		}
	}
	d->loc_start[p->num_locations] = n;
}

static void aggregate(struct dump *d)
{
	const struct pprof_profile *p = d->p;

	d->totals = xcalloc(d->nv, sizeof(int64_t));
	for (size_t i = 0; i < p->num_samples; i++) {
		const struct pprof_sample *s = &p->samples[i];
		for (size_t k = 0; k < d->nv; k++)
			d->totals[k] += s->values[k];
		for (size_t j = 0; j < s->num_location_ids; j++) {
			size_t li = (size_t)(pprof_location(p, s->location_ids[j]) - p->locations);
			for (size_t f = d->loc_start[li]; f < d->loc_start[li + 1]; f++) {
				struct agg *a = &d->aggs[d->loc_frames[f]];
				bool leaf = j == 0 && f == d->loc_start[li];
				for (size_t k = 0; k < d->nv; k++) {
					if (leaf)
						a->self[k] += s->values[k];
					if (a->last_sample != i + 1)
						a->total[k] += s->values[k];
				}
				a->last_sample = i + 1;
			}
		}
	}
}

static void dump_free(struct dump *d)
{
	for (size_t i = 0; i < d->num_aggs; i++) {
		free(d->aggs[i].name);
		free(d->aggs[i].self);
		free(d->aggs[i].total);
	}
	free(d->aggs);
	free(d->slots);
	for (size_t i = 0; d->loc_start && i < d->loc_start[d->p->num_locations]; i++)
		free(d->loc_pos[i]);
	free(d->loc_pos);
	free(d->loc_frames);
	free(d->loc_start);
	free(d->totals);
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if (len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff)))
		return 0;
	if (len == 4 && (cp < 0x10000 || cp > 0x10ffff))
		return 0;
	return len;
}

/* Writes s[0..n) as a JSON string; bytes that are not UTF-8 become \u00XX. */
static void json_strn(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;

	putchar_unlocked('"');
	for (size_t i = 0; i < n;) {
		size_t run = 0; /* printable ASCII needing no escape, written at once */
		while (i + run < n && s[i + run] >= 0x20 && s[i + run] < 0x80 &&
		       s[i + run] != '"' && s[i + run] != '\\')
			run++;
		if (run) {
			fwrite_unlocked(s + i, 1, run, stdout);
			i += run;
			continue;
		}
		unsigned char c = s[i];
		size_t len = utf8_seq(s + i, n - i);
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c == '\n')
			fputs_unlocked("\\n", stdout);
		else if (c == '\t')
			fputs_unlocked("\\t", stdout);
		else if (c == '\r')
			fputs_unlocked("\\r", stdout);
		else if (c < 0x20 || len == 0)
			printf("\\u%04x", c);
		else
			fwrite_unlocked(s + i, 1, len, stdout);
		i += len ? len : 1;
	}
	putchar_unlocked('"');
}

static void json_str(const char *s)
{
	json_strn(s, strlen(s));
}

static void json_pstr(const struct pprof_profile *p, int64_t idx)
{
	json_strn(pprof_str(p, idx), pprof_str_len(p, idx));
}

static void json_values(const int64_t *v, size_t n)
{
	putchar_unlocked('[');
	for (size_t i = 0; i < n; i++)
		printf("%s%" PRId64, i ? "," : "", v[i]);
	putchar_unlocked(']');
}

static int cmp_thread(const void *a, const void *b)
{
	const struct thread_ref *x = a, *y = b;
	if (x->has_tid != y->has_tid)
		return x->has_tid ? 1 : -1;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return x->sample < y->sample ? -1 : x->sample > y->sample;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* "threads": samples grouped by their "thread id" label, "none" for those without. */
static void json_threads(struct dump *d)
{
	const struct pprof_profile *p = d->p;
	struct thread_ref *refs = xcalloc(p->num_samples, sizeof(*refs));
	int64_t *sum = xcalloc(d->nv, sizeof(int64_t));

	for (size_t i = 0; i < p->num_samples; i++) {
		const struct pprof_label *l = pprof_sample_label(&p->samples[i], p, "thread id");
		refs[i] = (struct thread_ref){l != NULL, l ? l->num : 0, i};
	}
	qsort(refs, p->num_samples, sizeof(*refs), cmp_thread);
	fputs_unlocked("\"threads\":{", stdout);
	for (size_t i = 0, end; i < p->num_samples; i = end) {
		int64_t name = 0;
		memset(sum, 0, d->nv * sizeof(int64_t));
		for (end = i; end < p->num_samples && refs[end].has_tid == refs[i].has_tid &&
			      refs[end].tid == refs[i].tid;
		     end++) {
			const struct pprof_sample *s = &p->samples[refs[end].sample];
			const struct pprof_label *l = pprof_sample_label(s, p, "thread name");
			if (!name && l)
				name = l->str;
			for (size_t k = 0; k < d->nv; k++)
				sum[k] += s->values[k];
		}
		if (refs[i].has_tid)
			printf("%s\"%" PRId64 "\":{\"name\":", i ? "," : "", refs[i].tid);
		else
			printf("%s\"none\":{\"name\":", i ? "," : "");
		json_pstr(p, name);
		fputs_unlocked(",\"values\":", stdout);
		json_values(sum, d->nv);
		putchar_unlocked('}');
	}
	putchar_unlocked('}');
	free(sum);
	free(refs);
}

static void json_process_ids(const struct pprof_profile *p)
{
	int64_t *pids = xcalloc(p->num_samples, sizeof(int64_t));
	size_t n = 0;

	for (size_t i = 0; i < p->num_samples; i++) {
		const struct pprof_label *l = pprof_sample_label(&p->samples[i], p, "process_id");
		if (l)
			pids[n++] = l->num;
	}
	qsort(pids, n, sizeof(*pids), cmp_i64);
	fputs_unlocked("\"process_ids\":[", stdout);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || pids[i] != pids[i - 1])
			printf("%s%" PRId64, i ? "," : "", pids[i]);
	putchar_unlocked(']');
	free(pids);
}

/* The frames of sample s, leaf first, as a JSON list of names or of "file:line". */
static void json_sample_frames(const struct dump *d, const struct pprof_sample *s, bool positions)
{
	const struct pprof_profile *p = d->p;
	bool first = true;

	putchar_unlocked('[');
	for (size_t j = 0; j < s->num_location_ids; j++) {
		size_t li = (size_t)(pprof_location(p, s->location_ids[j]) - p->locations);
		for (size_t f = d->loc_start[li]; f < d->loc_start[li + 1]; f++) {
			if (!first)
				putchar_unlocked(',');
			first = false;
			json_str(positions ? d->loc_pos[f] : d->aggs[d->loc_frames[f]].name);
		}
	}
	putchar_unlocked(']');
}

static void json_stacks(struct dump *d)
{
	const struct pprof_profile *p = d->p;

	fputs_unlocked(",\"stacks\":[", stdout);
	for (size_t i = 0; i < p->num_samples; i++) {
		const struct pprof_sample *s = &p->samples[i];
		printf("%s{\"frames\":", i ? "," : "");
		json_sample_frames(d, s, false);
		fputs_unlocked(",\"lines\":", stdout);
		json_sample_frames(d, s, true);
		fputs_unlocked(",\"values\":", stdout);
		json_values(s->values, s->num_values);
		fputs_unlocked(",\"labels\":{", stdout);
		for (size_t j = 0; j < s->num_labels; j++) {
			const struct pprof_label *l = &s->labels[j];
			if (j)
				putchar_unlocked(',');
			json_pstr(p, l->key);
			putchar_unlocked(':');
			if (l->str)
				json_pstr(p, l->str);
			else
				printf("%" PRId64, l->num);
		}
		fputs_unlocked("}}", stdout);
	}
	putchar_unlocked(']');
}

static void print_json(struct dump *d, bool stacks)
{
	const struct pprof_profile *p = d->p;

	fputs_unlocked("{\"file\":", stdout);
	json_str(d->path);
	fputs_unlocked(",\"sample_types\":[", stdout);
	for (size_t i = 0; i < p->num_sample_types; i++) {
		printf("%s[", i ? "," : "");
		json_pstr(p, p->sample_types[i].type);
		putchar_unlocked(',');
		json_pstr(p, p->sample_types[i].unit);
		putchar_unlocked(']');
	}
	fputs_unlocked("],\"period_type\":[", stdout);
	json_pstr(p, p->period_type.type);
	putchar_unlocked(',');
	json_pstr(p, p->period_type.unit);
	printf("],\"period\":%" PRId64 ",\"time_nanos\":%" PRId64 ",\"duration_nanos\":%" PRId64,
	       p->period, p->time_nanos, p->duration_nanos);
	fputs_unlocked(",\"totals\":", stdout);
	json_values(d->totals, d->nv);
	putchar_unlocked(',');
	json_threads(d);
	putchar_unlocked(',');
	json_process_ids(p);
	fputs_unlocked(",\"functions\":{", stdout);
	for (size_t i = 0; i < d->num_aggs; i++) {
		if (i)
			putchar_unlocked(',');
		json_str(d->aggs[i].name);
		fputs_unlocked(":{\"self\":", stdout);
		json_values(d->aggs[i].self, d->nv);
		fputs_unlocked(",\"total\":", stdout);
		json_values(d->aggs[i].total, d->nv);
		putchar_unlocked('}');
	}
	putchar_unlocked('}');
	if (stacks)
		json_stacks(d);
	fputs_unlocked(",\"mappings\":[", stdout);
	for (size_t i = 0; i < p->num_mappings; i++) {
		const struct pprof_mapping *m = &p->mappings[i];
		printf("%s{\"id\":%" PRIu64 ",\"start\":%" PRIu64 ",\"limit\":%" PRIu64
		       ",\"offset\":%" PRIu64 ",\"filename\":",
		       i ? "," : "", m->id, m->memory_start, m->memory_limit, m->file_offset);
		json_pstr(p, m->filename);
		fputs_unlocked(",\"build_id\":", stdout);
		json_pstr(p, m->build_id);
		printf(",\"has_functions\":%s,\"has_filenames\":%s,\"has_line_numbers\":%s"
		       ",\"has_inline_frames\":%s}",
		       m->has_functions ? "true" : "false", m->has_filenames ? "true" : "false",
		       m->has_line_numbers ? "true" : "false",
		       m->has_inline_frames ? "true" : "false");
	}
	printf("],\"num_samples\":%zu,\"num_locations\":%zu,\"num_functions\":%zu}\n",
	       p->num_samples, p->num_locations, p->num_functions);
}

static size_t sort_value; /* value index that cmp_agg_self orders by */

static int cmp_agg_self(const void *a, const void *b)
{
	const struct agg *x = *(struct agg *const *)a, *y = *(struct agg *const *)b;
	if (x->self[sort_value] != y->self[sort_value])
		return x->self[sort_value] > y->self[sort_value] ? -1 : 1;
	return strcmp(x->name, y->name);
}

static void print_summary(struct dump *d)
{
	const struct pprof_profile *p = d->p;

	printf("%s\n  sample types:", d->path);
	for (size_t i = 0; i < d->nv; i++)
		printf(" %s/%s", pprof_str(p, p->sample_types[i].type),
		       pprof_str(p, p->sample_types[i].unit));
	printf("\n  period: %" PRId64 " %s/%s\n", p->period, pprof_str(p, p->period_type.type),
	       pprof_str(p, p->period_type.unit));
	printf("  time: %" PRId64 " ns, duration: %" PRId64 " ns\n", p->time_nanos,
	       p->duration_nanos);
	printf("  samples: %zu, locations: %zu, functions: %zu, mappings: %zu\n", p->num_samples,
	       p->num_locations, p->num_functions, p->num_mappings);
	printf("  totals:");
	for (size_t i = 0; i < d->nv; i++)
		printf(" %s=%" PRId64, pprof_str(p, p->sample_types[i].type), d->totals[i]);
	putchar_unlocked('\n');
	if (d->nv == 0 || d->num_aggs == 0)
		return;

	struct agg **order = xcalloc(d->num_aggs, sizeof(*order));
	for (size_t i = 0; i < d->num_aggs; i++)
		order[i] = &d->aggs[i];
	sort_value = d->nv - 1;
	qsort(order, d->num_aggs, sizeof(*order), cmp_agg_self);
	int64_t all = d->totals[sort_value];
	printf("  top functions by self %s:\n  %16s %6s %16s %6s  name\n",
	       pprof_str(p, p->sample_types[sort_value].type), "self", "self%", "total", "total%");
	for (size_t i = 0; i < d->num_aggs && i < TOP_FUNCTIONS; i++) {
		const struct agg *a = order[i];
		printf("  %16" PRId64 " %5.1f%% %16" PRId64 " %5.1f%%  %s\n", a->self[sort_value],
		       all ? 100.0 * (double)a->self[sort_value] / (double)all : 0.0,
		       a->total[sort_value],
		       all ? 100.0 * (double)a->total[sort_value] / (double)all : 0.0, a->name);
	}
	free(order);
}

static int dump_file(const char *path, bool json, bool stacks)
{
	struct pprof_profile p;
	struct dump d;
	char err[512];

	int rc = pprof_read_file(path, &p, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "pprof-dump: %s\n", err);
		return 1;
	}
	memset(&d, 0, sizeof(d));
	d.p = &p;
	d.path = path;
	d.nv = p.num_sample_types;
	build_frames(&d);
	aggregate(&d);
	if (json)
		print_json(&d, stacks);
	else
		print_summary(&d);
	dump_free(&d);
	pprof_free(&p);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: pprof-dump [--json] [--stacks] FILE...\n"
		   "  Decodes pprof files (gzip-compressed or not) and prints a summary, or with\n"
		   "  --json one JSON object per file and line; --stacks adds every sample's\n"
		   "  frames (leaf first, an inlined function as a frame of its own), their\n"
		   "  source lines (\"file:line\"), values and labels to the JSON.\n");
}

int main(int argc, char **argv)
{
	bool json = false, stacks = false, options = true;
	int nfiles = 0, status = 0;

	for (int i = 1; i < argc; i++) {
		if (options && strcmp(argv[i], "--") == 0) {
			options = false;
		} else if (options && strcmp(argv[i], "--json") == 0) {
			json = true;
		} else if (options && strcmp(argv[i], "--stacks") == 0) {
			stacks = true;
		} else if (options && (strcmp(argv[i], "-h") == 0 || !strcmp(argv[i], "--help"))) {
			usage(stdout);
			return 0;
		} else if (options && argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "pprof-dump: unknown option %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	options = true;
	for (int i = 1; i < argc; i++) {
		if (options && argv[i][0] == '-' && argv[i][1]) {
			options = strcmp(argv[i], "--") != 0;
			continue;
		}
		nfiles++;
		status |= dump_file(argv[i], json, stacks);
	}
	if (nfiles == 0) {
		usage(stderr);
		return 2;
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "pprof-dump: write error: %s\n", strerror(errno));
		return 1;
	}
	return status;
}
