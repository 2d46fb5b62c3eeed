/*
 * pprof.c - CPU profile to gzip pprof (see pprof.h).
 *
 * Context: uploader thread; the profile is quiescent (profiles_swap waited for every
 * handler), so its trie is read without synchronization beyond the swap.
 *
 * Encoding plan: samples, locations and functions go into separate buffers as the trie
 * is walked (interning strings, pcs and names on the way); the Profile message is then
 * the concatenation of its fields, with the string table last, once it is complete.
 */
#include "pprof.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/sample/thread_names.h"
#include "agent/unwind/unwind.h"
#include "agent/wall/wall_clock.h"
#include "common/clock.h"
#include "common/gzip_store.h"
#include "common/strtab.h"
#include "common/u64map.h"
#include "common/log.h"
#include "common/z_api.h"

/* profile.proto field numbers. */
enum {
	PROFILE_SAMPLE_TYPE = 1,
	PROFILE_SAMPLE = 2,
	PROFILE_MAPPING = 3,
	PROFILE_LOCATION = 4,
	PROFILE_FUNCTION = 5,
	PROFILE_STRING_TABLE = 6,
	PROFILE_TIME_NANOS = 9,
	PROFILE_DURATION_NANOS = 10,
	PROFILE_PERIOD_TYPE = 11,
	PROFILE_PERIOD = 12,
	PROFILE_COMMENT = 13,
	PROFILE_DEFAULT_SAMPLE_TYPE = 14,
	VALUE_TYPE_TYPE = 1,
	VALUE_TYPE_UNIT = 2,
	SAMPLE_LOCATION_ID = 1,
	SAMPLE_VALUE = 2,
	SAMPLE_LABEL = 3,
	LABEL_KEY = 1,
	LABEL_STR = 2,
	LABEL_NUM = 3,
	MAPPING_ID = 1,
	MAPPING_MEMORY_START = 2,
	MAPPING_MEMORY_LIMIT = 3,
	MAPPING_FILE_OFFSET = 4,
	MAPPING_FILENAME = 5,
	MAPPING_BUILD_ID = 6,
	MAPPING_HAS_FUNCTIONS = 7,
	MAPPING_HAS_FILENAMES = 8,
	MAPPING_HAS_LINE_NUMBERS = 9,
	MAPPING_HAS_INLINE_FRAMES = 10,
	LOCATION_ID = 1,
	LOCATION_MAPPING_ID = 2,
	LOCATION_ADDRESS = 3,
	LOCATION_LINE = 4,
	LINE_FUNCTION_ID = 1,
	LINE_LINE = 2,
	FUNCTION_ID = 1,
	FUNCTION_NAME = 2,
	FUNCTION_SYSTEM_NAME = 3,
	FUNCTION_FILENAME = 4,
};

#define GZIP_WINDOW_BITS (15 + 16) /* 32 KiB window, gzip header */
#define GZIP_LEVEL 6		   /* zlib's default: smaller than level 1 on pprof, still fast */
#define GZIP_MEM_LEVEL 8
#define GZIP_CHUNK 65536

/* What the locations of one mapping turned out to carry. The flags follow google/pprof's
 * own symbolizer: each is set when any location of the mapping has it, and a consumer
 * re-symbolizes a mapping only when none is set (so unnamed pcs of a mapping whose
 * other pcs are named are not re-read, and a mapping we could not name at all is left
 * to the consumer's symbolization by file or build id). */
struct mapping_flags {
	bool used, functions, filenames, line_numbers;
};

#define COLUMN_NONE UINT32_MAX

struct builder {
	struct symbolizer *sym;
	struct strtab strings;
	struct u64map locs;  /* (pc << 1 | is_return) -> location id */
	struct u64map funcs; /* (name string index + 1) << 32 | file string index -> id */
	uint64_t next_loc, next_func;
	struct mapping_flags *mflags;
	size_t nmappings;
	struct pb_buf samples, locations, functions, scratch, line;
	int64_t s_thread_id, s_thread_name, s_process_id, s_state;
	/* The sample's value vector: every kind's values side by side, kind k's from
	 * column[k] (agent/store/profile_types.h); ncolumns in all. */
	uint32_t column[PROFILE_KINDS]; /* COLUMN_NONE: a kind the profile leaves out */
	uint32_t ncolumns;
	const struct thread_names *names; /* pprof_meta's */
	const struct profile *profile;
	struct jit_splits *jit_splits; /* pprof_meta's */
	uint32_t jit_epoch;	       /* the epoch of the sample being added */
	int pid;
	int err;
	struct pprof_stats st;
};

static int64_t intern(struct builder *b, const char *s)
{
	int64_t i = strtab_intern(&b->strings, s);
	if (i < 0)
		b->err = -ENOMEM;
	return i < 0 ? 0 : i;
}

static const char *synthetic_name(uintptr_t pc)
{
	switch (pc) {
	case PC_TRUNCATED:
		return "[truncated]";
	case PC_DROPPED:
		return "[dropped]";
	case PC_INCOMPLETE:
		return "[incomplete]";
	case PC_PROFILER:
		return "[profiler]";
	case PC_STARTUP:
		return "[start-up]";
	default:
		if (wall_clock_is_state_pc(pc))
			return wall_state_names[pc - PC_WALL_STATE_BASE];
		return "[unknown]";
	}
}

/* Functions are one per (name, file): a static function of the same name in two files
 * stays two functions. */
static uint64_t function_id(struct builder *b, const char *name, const char *file)
{
	int64_t name_idx = intern(b, name);
	int64_t file_idx = file ? intern(b, file) : 0;
	uint64_t key = ((uint64_t)name_idx + 1) << 32 | (uint64_t)file_idx, id;
	if (u64map_get(&b->funcs, key, &id))
		return id;
	id = ++b->next_func;
	if (u64map_put(&b->funcs, key, id) < 0)
		b->err = -ENOMEM;
	struct pb_buf *f = &b->scratch;
	pb_clear(f);
	pb_varint(f, FUNCTION_ID, id);
	pb_varint(f, FUNCTION_NAME, (uint64_t)name_idx);
	pb_varint(f, FUNCTION_SYSTEM_NAME, (uint64_t)name_idx);
	if (file_idx)
		pb_varint(f, FUNCTION_FILENAME, (uint64_t)file_idx);
	pb_bytes(&b->functions, PROFILE_FUNCTION, f->data, f->len);
	b->st.functions++;
	return id;
}

/* Appends one Line (function id, line number when known) to the location message l. */
static void add_line(struct builder *b, struct pb_buf *l, uint64_t fid, int line)
{
	pb_clear(&b->line);
	pb_varint(&b->line, LINE_FUNCTION_ID, fid);
	if (line > 0)
		pb_varint(&b->line, LINE_LINE, (uint64_t)line);
	pb_bytes(l, LOCATION_LINE, b->line.data, b->line.len);
}

/*
 * One Location per distinct (pc, is_return): its mapping and address, and one Line per
 * frame the symbolizer returns, innermost (inlined) first. A pc nothing names keeps only
 * mapping and address: consumers show it as module+offset and can symbolize it later.
 */
static uint64_t location_id(struct builder *b, uintptr_t pc, bool is_return)
{
	uint64_t key = ((uint64_t)pc << 1) | is_return, id;
	/* JIT code named otherwise in the sample's epoch than now: a location of its own
	 * (the epoch in the key's top bits, above any user-space pc). */
	bool then = pc > PC_SYNTHETIC_MAX && b->jit_epoch < symbolizer_jit_epoch(b->sym) &&
		    symbolizer_jit_renamed(b->sym, pc, is_return, b->jit_epoch);
	if (then)
		key |= (uint64_t)((b->jit_epoch & 0x7fff) + 1) << 48;
	if (u64map_get(&b->locs, key, &id))
		return id;
	id = ++b->next_loc;
	if (u64map_put(&b->locs, key, id) < 0)
		b->err = -ENOMEM;
	/* Function ids first: function_id uses the scratch buffer. */
	struct sym_frame fr[SYM_MAX_FRAMES];
	uint64_t fids[SYM_MAX_FRAMES];
	size_t n = 0;
	int m = -1;
	if (pc <= PC_SYNTHETIC_MAX) {
		fr[n++] = (struct sym_frame){synthetic_name(pc), NULL, 0};
	} else {
		uint64_t t0 = clock_now_ns(CLOCK_MONOTONIC);
		m = symbolizer_find_mapping(b->sym, pc);
		n = then ? symbolizer_jit_frames_at(b->sym, pc, is_return, b->jit_epoch, fr,
						    SYM_MAX_FRAMES)
			 : symbolizer_frames(b->sym, pc, is_return, fr, SYM_MAX_FRAMES);
		b->st.symbolize_ns += clock_now_ns(CLOCK_MONOTONIC) - t0;
	}
	for (size_t i = 0; i < n; i++)
		fids[i] = function_id(b, fr[i].function, fr[i].file);
	struct pb_buf *l = &b->scratch;
	pb_clear(l);
	pb_varint(l, LOCATION_ID, id);
	if (m >= 0) {
		struct mapping_flags *mf = &b->mflags[m];
		pb_varint(l, LOCATION_MAPPING_ID, (uint64_t)m + 1);
		mf->used = true;
		mf->functions |= n > 0;
		for (size_t i = 0; i < n; i++) {
			mf->filenames |= fr[i].file != NULL;
			mf->line_numbers |= fr[i].line > 0;
		}
	}
	if (pc > PC_SYNTHETIC_MAX)
		pb_varint(l, LOCATION_ADDRESS, pc);
	for (size_t i = 0; i < n; i++)
		add_line(b, l, fids[i], fr[i].line);
	pb_bytes(&b->locations, PROFILE_LOCATION, l->data, l->len);
	b->st.locations++;
	return id;
}

static void label_num(struct pb_buf *s, struct pb_buf *tmp, int64_t key, int64_t num)
{
	pb_clear(tmp);
	pb_varint(tmp, LABEL_KEY, (uint64_t)key);
	pb_varint(tmp, LABEL_NUM, (uint64_t)num);
	pb_bytes(s, SAMPLE_LABEL, tmp->data, tmp->len);
}

static void label_str(struct pb_buf *s, struct pb_buf *tmp, int64_t key, int64_t str)
{
	pb_clear(tmp);
	pb_varint(tmp, LABEL_KEY, (uint64_t)key);
	pb_varint(tmp, LABEL_STR, (uint64_t)str);
	pb_bytes(s, SAMPLE_LABEL, tmp->data, tmp->len);
}

/* Our pthread_create trampoline (preload/preload.c, section ddprof_trampoline): a caller
 * frame of every thread the application creates. It is left out of stacks, as if it
 * had been a tail call. Weak: absent from programs without it (unit tests). */
extern const char __start_ddprof_trampoline[] __attribute__((weak, visibility("hidden")));
extern const char __stop_ddprof_trampoline[] __attribute__((weak, visibility("hidden")));

static bool is_trampoline(uintptr_t pc)
{
	return pc >= (uintptr_t)__start_ddprof_trampoline &&
	       pc < (uintptr_t)__stop_ddprof_trampoline;
}

static void add_sample(struct builder *b, const uintptr_t *pcs, uint32_t n, int32_t tid,
		       enum profile_kind kind, const uint64_t *kind_values)
{
	if (b->column[kind] == COLUMN_NONE)
		return;
	uint64_t ids[UNWIND_MAX_DEPTH + 1];
	if (n > UNWIND_MAX_DEPTH)
		n = UNWIND_MAX_DEPTH;
	uint32_t nids = 0;
	/* A wall sample's state (its outermost pc): the "state" label, and for a wait a
	 * leaf frame named for the call. */
	int64_t state = -1;
	if (kind == PROFILE_WALL && n > 0 && wall_clock_is_state_pc(pcs[n - 1])) {
		state = (int64_t)(pcs[n - 1] - PC_WALL_STATE_BASE);
		n--;
		if (state != WALL_RUNNING)
			ids[nids++] = location_id(b, pcs[n], false);
	}
	/* The leaf too: a sample can land in the trampoline's own instructions (a tick right
	 * after it armed the thread's timer, or as the thread ends). A return address
	 * points past its call: pc - 1 is in the caller. */
	for (uint32_t i = 0; i < n; i++)
		if (!is_trampoline(i == 0 ? pcs[0] : pcs[i] - 1) || (i == 0 && n == 1))
			ids[nids++] = location_id(b, pcs[i], i > 0);
	struct pb_buf s, tmp;
	pb_init(&s);
	pb_init(&tmp);
	pb_packed_u64(&s, SAMPLE_LOCATION_ID, ids, nids);
	int64_t values[PROFILE_KINDS * PROFILE_VALUES_MAX] = {0};
	for (uint32_t i = 0; i < profile_types[kind].nvalues; i++)
		values[b->column[kind] + i] = (int64_t)kind_values[i];
	pb_packed_i64(&s, SAMPLE_VALUE, values, b->ncolumns);
	if (tid > 0) {
		label_num(&s, &tmp, b->s_thread_id, tid);
		const char *name = thread_names_find(b->names, tid);
		if (name)
			label_str(&s, &tmp, b->s_thread_name, intern(b, name));
	}
	label_num(&s, &tmp, b->s_process_id, b->pid);
	if (state >= 0)
		label_str(&s, &tmp, b->s_state, intern(b, wall_state_names[state]));
	pb_bytes(&b->samples, PROFILE_SAMPLE, s.data, s.len);
	if (s.failed || tmp.failed)
		b->err = -ENOMEM;
	pb_free(&s);
	pb_free(&tmp);
	b->st.samples++;
}

static void visit_node(const struct trie_node *node, void *arg)
{
	struct builder *b = arg;
	uint64_t v[PROFILE_VALUES_MAX];
	bool any = false;
	for (uint32_t i = 0; i < PROFILE_VALUES_MAX; i++) {
		v[i] = atomic_load_explicit(&node->values[i], memory_order_relaxed);
		any |= v[i] != 0;
	}
	/* All 0: inserted, then the handler was raced by the swap: never counted. A CPU
	 * node with time and no sample holds the end of a thread (profiles_record_n). */
	if (!any || node->kind >= PROFILE_KINDS)
		return;
	uint32_t swap_epoch = b->jit_epoch;
	const struct jit_split *r;
	size_t nr = b->jit_splits ? jit_splits_of(b->jit_splits, b->profile, node, &r) : 0;
	/* Counted in several JIT epochs: one sample per epoch, each its part of the counts. */
	uint64_t prev[PROFILE_VALUES_MAX] = {0};
	for (size_t k = 0; k < nr; k++) {
		uint64_t part[PROFILE_VALUES_MAX];
		bool some = false;
		for (uint32_t i = 0; i < PROFILE_VALUES_MAX; i++) {
			part[i] = r[k].values[i] > prev[i] ? r[k].values[i] - prev[i] : 0;
			some |= part[i] != 0;
			prev[i] = r[k].values[i] > prev[i] ? r[k].values[i] : prev[i];
		}
		b->jit_epoch = r[k].epoch;
		if (some)
			add_sample(b, node->pcs, node->npcs, node->tid,
				   (enum profile_kind)node->kind, part);
	}
	bool rest = nr == 0;
	for (uint32_t i = 0; i < PROFILE_VALUES_MAX; i++) {
		v[i] = v[i] > prev[i] ? v[i] - prev[i] : 0;
		rest |= v[i] != 0;
	}
	b->jit_epoch = swap_epoch;
	if (rest)
		add_sample(b, node->pcs, node->npcs, node->tid, (enum profile_kind)node->kind, v);
}

/* Names only (a short process's one profile): every distinct pc of the profile, named
 * module by module in one pass over each module's symbols before the samples are
 * written (symbolizer_prime), instead of one search of its symbols per pc. */
struct prime_walk {
	struct u64map seen;
	uintptr_t *pcs;
	bool *ret;
	size_t n, cap;
	bool failed;
};

static void collect_pcs(const struct trie_node *node, void *arg)
{
	struct prime_walk *w = arg;
	for (uint32_t i = 0; i < node->npcs && !w->failed; i++) {
		uintptr_t pc = node->pcs[i];
		uint64_t key = ((uint64_t)pc << 1) | (i > 0), one;
		if (pc <= PC_SYNTHETIC_MAX || u64map_get(&w->seen, key, &one))
			continue;
		if (w->n == w->cap) {
			size_t cap = w->cap ? 2 * w->cap : 256;
			uintptr_t *p = realloc(w->pcs, cap * sizeof(*p));
			bool *r = p ? realloc(w->ret, cap * sizeof(*r)) : NULL;
			if (p)
				w->pcs = p;
			if (!p || !r) {
				w->failed = true;
				return;
			}
			w->ret = r;
			w->cap = cap;
		}
		w->failed = u64map_put(&w->seen, key, 1) < 0;
		w->pcs[w->n] = pc;
		w->ret[w->n++] = i > 0;
	}
}

static void prime_names(struct symbolizer *sym, const struct profile *p)
{
	if (!symbolizer_names_only(sym))
		return;
	struct prime_walk w = {0};
	u64map_init(&w.seen);
	trie_foreach(&p->trie, collect_pcs, &w);
	if (!w.failed)
		symbolizer_prime(sym, w.pcs, w.ret, w.n);
	u64map_free(&w.seen);
	free(w.pcs);
	free(w.ret);
}

static void value_type(struct pb_buf *out, struct builder *b, uint32_t field, const char *type,
		       const char *unit)
{
	struct pb_buf *vt = &b->scratch;
	pb_clear(vt);
	pb_varint(vt, VALUE_TYPE_TYPE, (uint64_t)intern(b, type));
	pb_varint(vt, VALUE_TYPE_UNIT, (uint64_t)intern(b, unit));
	pb_bytes(out, field, vt->data, vt->len);
}

static void write_mappings(struct pb_buf *out, struct builder *b)
{
	for (size_t i = 0; i < b->nmappings; i++) {
		const struct mapping_flags *mf = &b->mflags[i];
		if (!mf->used)
			continue;
		const struct sym_mapping *m = symbolizer_mapping(b->sym, (int)i);
		struct pb_buf *mb = &b->scratch;
		pb_clear(mb);
		pb_varint(mb, MAPPING_ID, i + 1);
		pb_varint(mb, MAPPING_MEMORY_START, m->start);
		pb_varint(mb, MAPPING_MEMORY_LIMIT, m->end);
		pb_varint(mb, MAPPING_FILE_OFFSET, m->offset);
		pb_varint(mb, MAPPING_FILENAME, (uint64_t)intern(b, m->path));
		if (m->build_id[0])
			pb_varint(mb, MAPPING_BUILD_ID, (uint64_t)intern(b, m->build_id));
		if (mf->functions)
			pb_varint(mb, MAPPING_HAS_FUNCTIONS, 1);
		if (mf->filenames)
			pb_varint(mb, MAPPING_HAS_FILENAMES, 1);
		if (mf->line_numbers)
			pb_varint(mb, MAPPING_HAS_LINE_NUMBERS, 1);
		/* DWARF was read for the module: its locations list their inlined frames. */
		if (mf->functions && symbolizer_mapping_debug_info(b->sym, (int)i) == 1)
			pb_varint(mb, MAPPING_HAS_INLINE_FRAMES, 1);
		pb_bytes(out, PROFILE_MAPPING, mb->data, mb->len);
		b->st.mappings++;
	}
}

int pprof_gzip(const uint8_t *in, size_t len, struct pb_buf *out)
{
	const struct z_api *z = z_api_get();
	if (!z)
		return -ENOPKG;
	z_stream zs;
	memset(&zs, 0, sizeof(zs));
	if (z->deflateInit2_(&zs, GZIP_LEVEL, Z_DEFLATED, GZIP_WINDOW_BITS, GZIP_MEM_LEVEL,
			     Z_DEFAULT_STRATEGY, ZLIB_VERSION, (int)sizeof(zs)) != Z_OK)
		return -ENOMEM;
	zs.next_in = (Bytef *)in;
	zs.avail_in = (uInt)len;
	int rc;
	uint8_t chunk[GZIP_CHUNK];
	do {
		zs.next_out = chunk;
		zs.avail_out = sizeof(chunk);
		rc = z->deflate(&zs, Z_FINISH);
		if (rc == Z_STREAM_ERROR)
			break;
		pb_raw(out, chunk, sizeof(chunk) - zs.avail_out);
	} while (rc != Z_STREAM_END);
	z->deflateEnd(&zs);
	return (rc == Z_STREAM_END && !out->failed) ? 0 : -ENOMEM;
}

/* Stored, when small and zlib not loaded; else pprof_gzip. */
static int pprof_gzip_small(const uint8_t *in, size_t len, struct pb_buf *out)
{
	if (len > PPROF_STORE_MAX || z_api_loaded())
		return pprof_gzip(in, len, out);
	size_t n = gzip_store_size(len);
	uint8_t *buf = malloc(n);
	if (!buf)
		return -ENOMEM;
	gzip_store(in, len, buf);
	pb_raw(out, buf, n);
	free(buf);
	return out->failed ? -ENOMEM : 0;
}

static void builder_free(struct builder *b)
{
	strtab_free(&b->strings);
	u64map_free(&b->locs);
	u64map_free(&b->funcs);
	free(b->mflags);
	pb_free(&b->samples);
	pb_free(&b->locations);
	pb_free(&b->functions);
	pb_free(&b->scratch);
	pb_free(&b->line);
}

int pprof_build(const struct profile *p, const struct pprof_meta *meta, struct symbolizer *sym,
		struct pb_buf *out, struct pprof_stats *stats)
{
	struct builder b;
	memset(&b, 0, sizeof(b));
	b.sym = sym;
	b.pid = meta->pid;
	b.names = meta->thread_names;
	b.profile = p;
	b.jit_splits = meta->jit_splits;
	/* Without records, every sample is named as the map is now. */
	b.jit_epoch = meta->jit_splits ? meta->jit_epoch : UINT32_MAX;
	strtab_init(&b.strings);
	u64map_init(&b.locs);
	u64map_init(&b.funcs);
	intern(&b, ""); /* string_table[0] must be "" */
	b.s_thread_id = intern(&b, "thread id");
	b.s_thread_name = intern(&b, "thread name");
	b.s_state = intern(&b, "state");
	b.s_process_id = intern(&b, "process_id");
	uint32_t kinds = meta->kinds | PROFILE_KIND_BIT(PROFILE_CPU);
	for (int k = 0; k < PROFILE_KINDS; k++) {
		b.column[k] = COLUMN_NONE;
		if (!(kinds & PROFILE_KIND_BIT(k)))
			continue;
		b.column[k] = b.ncolumns;
		b.ncolumns += profile_types[k].nvalues;
	}
	b.nmappings = symbolizer_mapping_count(sym);
	b.mflags = calloc(b.nmappings + 1, sizeof(b.mflags[0]));
	if (!b.mflags) {
		builder_free(&b);
		return -ENOMEM;
	}

	struct symbolizer_stats s0, s1;
	symbolizer_get_stats(sym, &s0);
	uint64_t t_prime = clock_now_ns(CLOCK_MONOTONIC);
	prime_names(sym, p);
	b.st.symbolize_ns += clock_now_ns(CLOCK_MONOTONIC) - t_prime;
	trie_foreach(&p->trie, visit_node, &b);
	uint64_t own_ns = meta->take_profiler_cpu_ns ? meta->take_profiler_cpu_ns() : 0;
	if (own_ns > 0) {
		uintptr_t pc = PC_PROFILER;
		uint64_t period = meta->period_ns ? meta->period_ns : 1;
		const uint64_t v[PROFILE_VALUES_MAX] = {(own_ns + period / 2) / period, own_ns};
		add_sample(&b, &pc, 1, 0, PROFILE_CPU, v);
	}
	if (meta->startup_cpu_ns > 0) {
		uintptr_t pc = PC_STARTUP;
		const uint64_t v[PROFILE_VALUES_MAX] = {0, meta->startup_cpu_ns};
		add_sample(&b, &pc, 1, meta->startup_tid, PROFILE_CPU, v);
	}
	for (int k = 0; k < PROFILE_KINDS; k++) {
		uint64_t v[PROFILE_VALUES_MAX];
		bool any = false;
		for (uint32_t i = 0; i < PROFILE_VALUES_MAX; i++) {
			v[i] = profiles_dropped(p, (enum profile_kind)k, i);
			any |= v[i] != 0;
		}
		if (any) {
			uintptr_t pc = PC_DROPPED;
			add_sample(&b, &pc, 1, 0, (enum profile_kind)k, v);
		}
	}

	struct pb_buf body;
	pb_init(&body);
	for (int k = 0; k < PROFILE_KINDS; k++)
		for (uint32_t i = 0; b.column[k] != COLUMN_NONE && i < profile_types[k].nvalues;
		     i++)
			value_type(&body, &b, PROFILE_SAMPLE_TYPE, profile_types[k].values[i].type,
				   profile_types[k].values[i].unit);
	pb_raw(&body, b.samples.data, b.samples.len);
	write_mappings(&body, &b);
	pb_raw(&body, b.locations.data, b.locations.len);
	pb_raw(&body, b.functions.data, b.functions.len);
	pb_varint(&body, PROFILE_TIME_NANOS, meta->start_ns);
	pb_varint(&body, PROFILE_DURATION_NANOS,
		  meta->end_ns > meta->start_ns ? meta->end_ns - meta->start_ns : 0);
	/* One period per profile in pprof: the CPU profile's (the sampling interval). */
	value_type(&body, &b, PROFILE_PERIOD_TYPE, profile_types[PROFILE_CPU].period.type,
		   profile_types[PROFILE_CPU].period.unit);
	pb_varint(&body, PROFILE_PERIOD, meta->period_ns);
	for (size_t i = 0; i < meta->ncomments && i < PPROF_COMMENTS_MAX; i++)
		pb_varint(&body, PROFILE_COMMENT, (uint64_t)intern(&b, meta->comments[i]));
	pb_varint(&body, PROFILE_DEFAULT_SAMPLE_TYPE,
		  (uint64_t)intern(&b, profile_types[PROFILE_CPU].values[1].type));
	for (size_t i = 0; i < b.strings.len; i++)
		pb_string(&body, PROFILE_STRING_TABLE, b.strings.strs[i]);

	int rc = b.err;
	if (body.failed || b.samples.failed || b.locations.failed || b.functions.failed)
		rc = -ENOMEM;
	pb_clear(out);
	if (rc == 0)
		rc = meta->store_small ? pprof_gzip_small(body.data, body.len, out)
				       : pprof_gzip(body.data, body.len, out);
	b.st.raw_bytes = body.len;
	b.st.gz_bytes = out->len;
	symbolizer_get_stats(sym, &s1);
	b.st.sym_cached = s1.cache_hits - s0.cache_hits;
	b.st.sym_resolved = (s1.lookups - s0.lookups) - b.st.sym_cached;
	b.st.sym_resolve_cpu_ns = s1.resolve_cpu_ns - s0.resolve_cpu_ns;
	b.st.sym_tables_read = s1.tables_read - s0.tables_read;
	b.st.sym_bytes = symbolizer_bytes(sym);
	b.st.sym_cache_bytes = s1.cache_bytes;
	log_debug(
	    "pprof: pid %d: %zu locations symbolized in %.3f ms: %llu pcs resolved (%s, %.3f ms "
	    "CPU, %llu symbol tables read), %llu cached; symbolizer %zu bytes, pc cache %zu "
	    "bytes",
	    (int)meta->pid, b.st.locations, (double)b.st.symbolize_ns / 1e6,
	    (unsigned long long)b.st.sym_resolved, s1.libdw ? "libdw" : "ELF symbols only",
	    (double)b.st.sym_resolve_cpu_ns / 1e6, (unsigned long long)b.st.sym_tables_read,
	    (unsigned long long)b.st.sym_cached, b.st.sym_bytes, b.st.sym_cache_bytes);
	if (stats)
		*stats = b.st;
	pb_free(&body);
	builder_free(&b);
	return rc;
}
