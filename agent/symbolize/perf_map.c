/*
 * perf_map.c - the perf map of the process: parsing, trust checks, growth (see perf_map.h).
 *
 * Context: uploader thread only (the symbolizer's owner); the totals are relaxed atomics
 * (independent counters, read only for diagnostics: nothing is published with them).
 *
 * A pass (perf_map_refresh_path):
 *   open (O_NOFOLLOW: a symbolic link is refused; O_NONBLOCK: a FIFO planted there
 *   cannot block us) -> fstat the descriptor: regular, ours, not writable by group or
 *   others, at most PERF_MAP_FILE_MAX -> same file, same size and time: done
 *   -> appended (same device and inode, larger, and the TAIL_BYTES before where the last
 *   pass stopped unchanged): read from there; else from the start, entries dropped
 *   -> lines into the batch (file order) -> merge the batch into the ranges.
 *
 * The merge ("later lines win"): the kept ranges (which never overlap) and the batch's
 * lines are items with a priority: 0 for a kept range, 1 + its index for a line of the
 * batch. Sorted by start, they are swept from left to right with a max-heap of the
 * items covering the current address: the segment from here to the next item start or
 * the end of the top item belongs to the top item (the newest covering it). Adjacent
 * segments of the same item are joined. n items give at most 2n - 1 segments, in
 * O(n log n). An older range that a newer line covers only in part keeps its other
 * parts (a JIT that frees half a region and fills it keeps the other half's names).
 *
 * Names live in one arena (NUL-terminated, addressed by offset). Nothing is removed from
 * it until the file is read whole again: what it holds is at most what was read of the
 * file since, so at most PERF_MAP_FILE_MAX bytes.
 */
#include "agent/symbolize/perf_map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sort.h"
#include "common/big_alloc.h"
#include "common/log.h"
#include "common/sys_io.h"

#define PERF_MAP_PATH_FMT "/tmp/perf-%d.map"
#define PATH_BYTES 48 /* "/tmp/perf-" + a pid + ".map" */
/* Bytes per read: a few system calls per MiB, and a small buffer. */
#define READ_CHUNK 32768
/* Bytes before the stopping point compared at the next growth: a file truncated and
 * written again past its old size is told from an appended one (unless those bytes
 * happen to be the same). */
#define TAIL_BYTES 32

/* A kept range (prio 0) or, while merging, an item of the sweep. */
struct range {
	uint64_t start, end;
	uint32_t name; /* offset in the name arena */
	uint32_t prio; /* merge order: 0 kept, 1 + index for the batch's lines */
};

struct perf_map {
	struct range *ranges; /* sorted by start, never overlapping */
	size_t nranges;
	/* Parts of ranges a later line gave another name: what they were called before
	 * (perf_map.h: epochs). Sorted by start; they may overlap one another. */
	struct perf_map_retired *retired;
	size_t nretired, capretired;
	uint64_t retired_max_len;  /* the longest one: bounds the lookup's scan */
	uint32_t epoch;		   /* passes that retired something */
	uint64_t last_lo, last_hi; /* the span of what the last such pass retired */
	struct range *batch;	   /* lines of this pass, in file order */
	size_t nbatch, capbatch;
	char *names;
	size_t names_len, names_cap;
	bool oom; /* an allocation of this pass failed */
	int pid;  /* of the last perf_map_refresh; 0 before the first */
	/* The file as the last pass left it. */
	bool have_file;
	uint64_t dev, ino, size, mtime_ns;
	uint64_t offset; /* first byte not parsed: a line's start, or inside a skipped line */
	bool skipping;	 /* offset is inside a line longer than PERF_MAP_LINE_MAX */
	uint8_t tail[TAIL_BYTES];
	size_t tail_len; /* the bytes before offset */
	bool warned;	 /* this process refused a map once and said so */
	bool warned_bad; /* ... skipped bad lines once and said so */
	struct perf_map_stats st;
};

static _Atomic uint64_t total_rejects, total_bad_lines, total_frames;

struct perf_map *perf_map_new(void)
{
	return big_calloc(1, sizeof(struct perf_map));
}

/* The entries and the file's state: the next pass reads it from its start. */
static void forget(struct perf_map *pm)
{
	big_free(pm->ranges);
	big_free(pm->batch);
	big_free(pm->names);
	big_free(pm->retired);
	pm->retired = NULL;
	pm->nretired = pm->capretired = 0;
	pm->retired_max_len = 0;
	pm->ranges = pm->batch = NULL;
	pm->names = NULL;
	pm->nranges = pm->nbatch = pm->capbatch = 0;
	pm->names_len = pm->names_cap = 0;
	pm->have_file = false;
	pm->offset = 0;
	pm->skipping = false;
	pm->tail_len = 0;
}

void perf_map_free(struct perf_map *pm)
{
	if (!pm)
		return;
	forget(pm);
	big_free(pm);
}

static void count_bad_line(struct perf_map *pm)
{
	pm->st.bad_lines++;
	atomic_fetch_add_explicit(&total_bad_lines, 1, memory_order_relaxed);
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A hexadecimal number (0x optional) at p: the first byte after it, or NULL when there
 * is no digit or the value does not fit 64 bits. */
static const char *parse_hex(const char *p, const char *end, uint64_t *out)
{
	if (end - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
		p += 2;
	uint64_t v = 0;
	const char *digits = p;
	for (int d; p < end && (d = hex_value(*p)) >= 0; p++) {
		if (v >> 60)
			return NULL; /* a 17th significant digit */
		v = v << 4 | (uint64_t)d;
	}
	if (p == digits)
		return NULL;
	*out = v;
	return p;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Length of the well-formed UTF-8 sequence (2 to 4 bytes) at s, 0 when it is not one:
 * bad lead or continuation bytes, overlong forms, surrogates, past U+10FFFF. */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp, min;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		len = 2, cp = s[0] & 0x1f, min = 0x80;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3, cp = s[0] & 0x0f, min = 0x800;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4, cp = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

/* Copies name (n bytes) to dst as printable UTF-8 of at most PERF_MAP_NAME_MAX bytes:
 * control bytes and bytes of no well-formed sequence become '?', a sequence that would
 * cross the limit is left out. Returns the length written (dst is not terminated). */
static size_t clean_name(char *dst, const char *name, size_t n)
{
	const unsigned char *s = (const unsigned char *)name;
	size_t i = 0, out = 0;
	while (i < n && out < PERF_MAP_NAME_MAX) {
		if (s[i] < 0x80) {
			dst[out++] = (s[i] < 0x20 || s[i] == 0x7f) ? '?' : (char)s[i];
			i++;
			continue;
		}
		size_t len = utf8_sequence(s + i, n - i);
		if (len == 0) {
			dst[out++] = '?';
			i++;
			continue;
		}
		if (out + len > PERF_MAP_NAME_MAX)
			break;
		memcpy(dst + out, s + i, len);
		out += len;
		i += len;
	}
	return out;
}

/* Appends a cleaned copy of name to the arena: its offset, or -1 (out of memory). */
static int64_t add_name(struct perf_map *pm, const char *name, size_t n)
{
	size_t need = pm->names_len + PERF_MAP_NAME_MAX + 1;
	if (need > pm->names_cap) {
		size_t cap = pm->names_cap ? pm->names_cap * 2 : 65536;
		while (cap < need)
			cap *= 2;
		char *p = big_realloc(pm->names, cap);
		if (!p)
			return -1;
		pm->names = p;
		pm->names_cap = cap;
	}
	size_t at = pm->names_len;
	size_t len = clean_name(pm->names + at, name, n);
	pm->names[at + len] = 0;
	pm->names_len += len + 1;
	return (int64_t)at;
}

/* One line (without its newline): START SIZE name. A bad one is counted and skipped. */
static void parse_line(struct perf_map *pm, const char *line, size_t len)
{
	if (len > PERF_MAP_LINE_MAX) {
		count_bad_line(pm);
		return;
	}
	const char *p = line, *end = line + len;
	while (end > p && (is_blank(end[-1]) || end[-1] == '\r'))
		end--;
	while (p < end && is_blank(*p))
		p++;
	uint64_t start, size;
	p = parse_hex(p, end, &start);
	if (!p || p == end || !is_blank(*p)) {
		count_bad_line(pm);
		return;
	}
	while (p < end && is_blank(*p))
		p++;
	p = parse_hex(p, end, &size);
	if (!p || p == end || !is_blank(*p) || size == 0 || size > UINT64_MAX - start) {
		count_bad_line(pm);
		return;
	}
	while (p < end && is_blank(*p))
		p++;
	if (p == end) { /* no name */
		count_bad_line(pm);
		return;
	}
	if (pm->nranges + pm->nbatch >= PERF_MAP_ENTRIES_MAX) {
		pm->st.dropped++;
		return;
	}
	if (pm->nbatch == pm->capbatch) {
		size_t cap = pm->capbatch ? pm->capbatch * 2 : 256;
		struct range *b = big_realloc(pm->batch, cap * sizeof(*b));
		if (!b) {
			pm->oom = true;
			return;
		}
		pm->batch = b;
		pm->capbatch = cap;
	}
	int64_t name = add_name(pm, p, (size_t)(end - p));
	if (name < 0) {
		pm->oom = true;
		return;
	}
	pm->batch[pm->nbatch] =
	    (struct range){start, start + size, (uint32_t)name, (uint32_t)(pm->nbatch + 1)};
	pm->nbatch++;
	pm->st.lines++;
}

static int range_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->prio < y->prio ? -1 : x->prio > y->prio;
}

/* The sweep's max-heap of item indices, by priority. */
static void heap_push(uint32_t *heap, size_t *n, const struct range *it, uint32_t i)
{
	size_t k = (*n)++;
	while (k > 0 && it[heap[(k - 1) / 2]].prio < it[i].prio) {
		heap[k] = heap[(k - 1) / 2];
		k = (k - 1) / 2;
	}
	heap[k] = i;
}

static void heap_pop(uint32_t *heap, size_t *n, const struct range *it)
{
	uint32_t last = heap[--(*n)];
	size_t k = 0;
	for (;;) {
		size_t c = 2 * k + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && it[heap[c + 1]].prio > it[heap[c]].prio)
			c++;
		if (it[heap[c]].prio <= it[last].prio)
			break;
		heap[k] = heap[c];
		k = c;
	}
	if (*n > 0)
		heap[k] = last;
}

/* A line of this pass covers [pos, stop) with name: the parts of kept ranges there
 * that had another name are retired (*kept: the first kept range ending after pos, the
 * sweep's cursor over them). Memory failures only lose history (counted as oom). */
static void retire_covered(struct perf_map *pm, size_t *kept, uint64_t pos, uint64_t stop,
			   uint32_t name)
{
	while (*kept < pm->nranges && pm->ranges[*kept].end <= pos)
		(*kept)++;
	for (size_t k = *kept; k < pm->nranges && pm->ranges[k].start < stop; k++) {
		const struct range *r = &pm->ranges[k];
		if (strcmp(pm->names + r->name, pm->names + name) == 0)
			continue; /* the same function written again: nothing changes */
		if (pm->nretired == pm->capretired) {
			size_t cap = pm->capretired ? 2 * pm->capretired : 64;
			if (cap > PERF_MAP_RETIRED_MAX)
				return;
			struct perf_map_retired *v = big_realloc(pm->retired, cap * sizeof(*v));
			if (!v)
				return;
			pm->retired = v;
			pm->capretired = cap;
		}
		uint64_t a = r->start > pos ? r->start : pos, b = r->end < stop ? r->end : stop;
		pm->retired[pm->nretired++] = (struct perf_map_retired){
		    .start = a, .end = b, .name = r->name, .until = pm->epoch + 1};
		if (b - a > pm->retired_max_len)
			pm->retired_max_len = b - a;
	}
}

static int retired_cmp(const void *a, const void *b)
{
	const struct perf_map_retired *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->until < y->until ? -1 : x->until > y->until;
}

/* After a merge: a pass that retired something starts a new epoch; the list is sorted
 * again (the pass's entries came in address order after the older ones). */
static void finish_retired(struct perf_map *pm, size_t before)
{
	if (pm->nretired == before)
		return;
	pm->last_lo = UINT64_MAX;
	pm->last_hi = 0;
	for (size_t i = before; i < pm->nretired; i++) {
		if (pm->retired[i].start < pm->last_lo)
			pm->last_lo = pm->retired[i].start;
		if (pm->retired[i].end > pm->last_hi)
			pm->last_hi = pm->retired[i].end;
	}
	pm->epoch++;
	sort_inplace(pm->retired, pm->nretired, sizeof(*pm->retired), retired_cmp);
}

/* The kept ranges and the batch into new kept ranges (the rule at the top). */
static int merge_batch(struct perf_map *pm)
{
	if (pm->nbatch == 0)
		return 0;
	size_t n = pm->nranges + pm->nbatch;
	struct range *it = big_malloc(n * sizeof(*it));
	struct range *out = big_malloc((2 * n - 1) * sizeof(*out));
	uint32_t *heap = big_malloc(n * sizeof(*heap));
	if (!it || !out || !heap) {
		big_free(it);
		big_free(out);
		big_free(heap);
		return -ENOMEM;
	}
	if (pm->nranges)
		memcpy(it, pm->ranges, pm->nranges * sizeof(*it));
	memcpy(it + pm->nranges, pm->batch, pm->nbatch * sizeof(*it));
	sort_inplace(it, n, sizeof(*it), range_cmp);
	size_t next = 0, hn = 0, nout = 0, kept = 0;
	size_t retired_before = pm->nretired;
	uint64_t pos = 0;
	while (next < n || hn > 0) {
		if (hn == 0)
			pos = it[next].start; /* a gap: on to the next item */
		while (next < n && it[next].start <= pos)
			heap_push(heap, &hn, it, (uint32_t)next++);
		while (hn > 0 && it[heap[0]].end <= pos)
			heap_pop(heap, &hn, it); /* items that ended (lazily) */
		if (hn == 0)
			continue;
		const struct range *top = &it[heap[0]];
		uint64_t stop = top->end; /* > pos: ended items were popped */
		if (next < n && it[next].start < stop)
			stop = it[next].start; /* > pos: starts up to pos were pushed */
		if (top->prio > 0)
			retire_covered(pm, &kept, pos, stop, top->name);
		if (nout > 0 && out[nout - 1].end == pos && out[nout - 1].prio == top->prio &&
		    out[nout - 1].name == top->name)
			out[nout - 1].end = stop; /* the same item, split by an older start */
		else
			out[nout++] = (struct range){pos, stop, top->name, top->prio};
		pos = stop;
	}
	for (size_t i = 0; i < nout; i++)
		out[i].prio = 0; /* kept: older than any later line */
	finish_retired(pm, retired_before);
	big_free(it);
	big_free(heap);
	big_free(pm->ranges);
	struct range *fit = big_realloc(out, nout * sizeof(*out)); /* nout >= 1: n >= 1 items */
	pm->ranges = fit ? fit : out;
	pm->nranges = nout;
	big_free(pm->batch); /* not kept between passes */
	pm->batch = NULL;
	pm->nbatch = pm->capbatch = 0;
	return 0;
}

/* Reads [pm->offset, size) of fd, line by line, into the batch. */
static void read_lines(struct perf_map *pm, int fd, uint64_t size)
{
	char *buf = big_malloc(READ_CHUNK + PERF_MAP_LINE_MAX);
	if (!buf) {
		pm->oom = true;
		return;
	}
	size_t have = 0;	   /* bytes in buf: a partial line, then what was read */
	uint64_t pos = pm->offset; /* file offset of buf + have */
	while (pos < size && !pm->oom) {
		size_t want = size - pos < READ_CHUNK ? (size_t)(size - pos) : READ_CHUNK;
		ssize_t n = sys_pread(fd, buf + have, want, (off_t)pos);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* truncated meanwhile: the next pass reads it again */
		pos += (uint64_t)n;
		have += (size_t)n;
		pm->st.bytes_read += (uint64_t)n;
		char *p = buf, *end = buf + have, *nl;
		while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
			if (pm->skipping)
				pm->skipping = false; /* the end of a long line, counted */
			else
				parse_line(pm, p, (size_t)(nl - p));
			p = nl + 1;
		}
		size_t rest = (size_t)(end - p);
		if (pm->skipping) {
			rest = 0; /* still inside a long line */
		} else if (rest > PERF_MAP_LINE_MAX) {
			count_bad_line(pm); /* no newline yet, already too long */
			pm->skipping = true;
			rest = 0;
		}
		memmove(buf, p, rest);
		have = rest;
		pm->offset = pos - rest;
	}
	big_free(buf);
}

/* The TAIL_BYTES before pm->offset, as the file holds them now: into out, its length. */
static size_t read_tail(const struct perf_map *pm, int fd, uint8_t *out)
{
	size_t len = pm->offset < TAIL_BYTES ? (size_t)pm->offset : TAIL_BYTES;
	ssize_t n = len ? sys_pread(fd, out, len, (off_t)(pm->offset - len)) : 0;
	return n == (ssize_t)len ? len : (size_t)-1;
}

/* A map found and refused: entries dropped, counted, one warning per process. */
static int refuse(struct perf_map *pm, const char *path, const char *why)
{
	forget(pm);
	pm->st.rejects++;
	atomic_fetch_add_explicit(&total_rejects, 1, memory_order_relaxed);
	if (!pm->warned) {
		pm->warned = true;
		log_warn("JIT perf map %s ignored: %s (its frames stay unnamed)", path, why);
	}
	return -EPERM;
}

/* The descriptor's file against the trust rules: NULL when it passes, else why not. */
static const char *check_file(int fd, struct stat *st)
{
	if (fstat(fd, st) != 0)
		return "fstat failed";
	if (!S_ISREG(st->st_mode))
		return "not a regular file";
	if (st->st_uid != geteuid())
		return "owned by another user";
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return "writable by group or others";
	if ((uint64_t)st->st_size > PERF_MAP_FILE_MAX)
		return "larger than the 64 MiB cap";
	return NULL;
}

int perf_map_refresh_path(struct perf_map *pm, const char *path)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return (int)pm->nranges; /* no map: nothing to say */
		return refuse(pm, path, errno == ELOOP ? "a symbolic link" : strerror(errno));
	}
	struct stat st;
	const char *why = check_file(fd, &st);
	if (why) {
		close(fd);
		return refuse(pm, path, why);
	}
	uint64_t size = (uint64_t)st.st_size;
	uint64_t mtime = (uint64_t)st.st_mtim.tv_sec * 1000000000ULL + (uint64_t)st.st_mtim.tv_nsec;
	bool same =
	    pm->have_file && pm->dev == (uint64_t)st.st_dev && pm->ino == (uint64_t)st.st_ino;
	if (same && size == pm->size && mtime == pm->mtime_ns) {
		close(fd);
		return (int)pm->nranges;
	}
	/* Appended only when larger and the bytes before the stopping point are those read. */
	uint8_t tail[TAIL_BYTES];
	bool grown = same && size > pm->size && read_tail(pm, fd, tail) == pm->tail_len &&
		     memcmp(tail, pm->tail, pm->tail_len) == 0;
	if (!grown) {
		if (pm->have_file)
			pm->st.rereads++;
		forget(pm);
	}
	pm->have_file = true;
	pm->dev = (uint64_t)st.st_dev;
	pm->ino = (uint64_t)st.st_ino;
	pm->size = size;
	pm->mtime_ns = mtime;
	pm->oom = false;
	uint64_t bad_before = pm->st.bad_lines;
	read_lines(pm, fd, size);
	if (pm->st.bad_lines > bad_before && !pm->warned_bad) {
		pm->warned_bad = true;
		log_warn("JIT perf map %s: %llu malformed or overlong lines skipped (later ones "
			 "are counted, not reported)",
			 path, (unsigned long long)(pm->st.bad_lines - bad_before));
	}
	size_t tl = read_tail(pm, fd, pm->tail);
	close(fd);
	pm->tail_len = tl == (size_t)-1 ? 0 : tl;
	if (tl == (size_t)-1)
		pm->size = 0; /* cannot tell growth from a rewrite: read whole next time */
	if (pm->oom || merge_batch(pm) < 0) {
		forget(pm);
		return -ENOMEM;
	}
	return (int)pm->nranges;
}

int perf_map_refresh(struct perf_map *pm)
{
	int pid = (int)getpid();
	if (pm->pid != pid) { /* first pass, or a fork child: not the parent's map */
		forget(pm);
		pm->warned = pm->warned_bad = false;
		pm->pid = pid;
	}
	char path[PATH_BYTES];
	snprintf(path, sizeof(path), PERF_MAP_PATH_FMT, pid);
	return perf_map_refresh_path(pm, path);
}

/* Index of the first range ending after addr (nranges when none). */
static size_t first_ending_after(const struct perf_map *pm, uint64_t addr)
{
	size_t lo = 0, hi = pm->nranges;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (pm->ranges[mid].end <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const char *perf_map_find(struct perf_map *pm, uintptr_t addr)
{
	size_t i = first_ending_after(pm, addr);
	if (i == pm->nranges || pm->ranges[i].start > addr)
		return NULL;
	atomic_fetch_add_explicit(&total_frames, 1, memory_order_relaxed);
	return pm->names + pm->ranges[i].name;
}

/* The retired entry naming addr at epoch: the earliest retirement after it. */
static const struct perf_map_retired *retired_at(const struct perf_map *pm, uint64_t addr,
						 uint32_t epoch)
{
	if (epoch >= pm->epoch || pm->nretired == 0)
		return NULL;
	uint64_t from = addr > pm->retired_max_len ? addr - pm->retired_max_len : 0;
	size_t lo = 0, hi = pm->nretired;
	while (lo < hi) { /* the first entry starting at or after from */
		size_t mid = lo + (hi - lo) / 2;
		if (pm->retired[mid].start < from)
			lo = mid + 1;
		else
			hi = mid;
	}
	const struct perf_map_retired *best = NULL;
	for (size_t i = lo; i < pm->nretired && pm->retired[i].start <= addr; i++) {
		const struct perf_map_retired *r = &pm->retired[i];
		if (addr < r->end && r->until > epoch && (!best || r->until < best->until))
			best = r;
	}
	return best;
}

const char *perf_map_find_at(struct perf_map *pm, uintptr_t addr, uint32_t epoch)
{
	const struct perf_map_retired *r = retired_at(pm, addr, epoch);
	if (!r)
		return perf_map_find(pm, addr);
	atomic_fetch_add_explicit(&total_frames, 1, memory_order_relaxed);
	return pm->names + r->name;
}

bool perf_map_renamed_since(const struct perf_map *pm, uintptr_t addr, uint32_t epoch)
{
	return retired_at(pm, addr, epoch) != NULL;
}

uint32_t perf_map_epoch(const struct perf_map *pm)
{
	return pm->epoch;
}

void perf_map_last_span(const struct perf_map *pm, uint64_t *lo, uint64_t *hi)
{
	*lo = pm->epoch ? pm->last_lo : 0;
	*hi = pm->epoch ? pm->last_hi : 0;
}

void perf_map_prune(struct perf_map *pm, uint32_t epoch)
{
	size_t w = 0;
	uint64_t max_len = 0;
	for (size_t i = 0; i < pm->nretired; i++) {
		if (pm->retired[i].until <= epoch)
			continue; /* no sample of that time is left to name */
		pm->retired[w++] = pm->retired[i];
		if (pm->retired[i].end - pm->retired[i].start > max_len)
			max_len = pm->retired[i].end - pm->retired[i].start;
	}
	pm->nretired = w;
	pm->retired_max_len = max_len;
}

bool perf_map_overlaps(const struct perf_map *pm, uintptr_t start, uintptr_t end)
{
	size_t i = first_ending_after(pm, start);
	return i < pm->nranges && pm->ranges[i].start < end;
}

void perf_map_get_stats(const struct perf_map *pm, struct perf_map_stats *out)
{
	*out = pm->st;
	out->entries = pm->nranges;
}

size_t perf_map_bytes(const struct perf_map *pm)
{
	return sizeof(*pm) + pm->nranges * sizeof(pm->ranges[0]) +
	       pm->capretired * sizeof(pm->retired[0]) + pm->capbatch * sizeof(pm->batch[0]) +
	       pm->names_cap;
}

void perf_map_get_totals(struct perf_map_totals *out)
{
	out->rejects = atomic_load_explicit(&total_rejects, memory_order_relaxed);
	out->bad_lines = atomic_load_explicit(&total_bad_lines, memory_order_relaxed);
	out->frames = atomic_load_explicit(&total_frames, memory_order_relaxed);
}
