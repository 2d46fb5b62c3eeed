/*
 * fuzz_perf_map.c - libFuzzer target: JIT perf maps, the bytes a process reads from
 * /tmp/perf-<pid>.map (agent/symbolize/perf_map.c).
 *
 * Each input is a map written in two parts: the first byte says where it is cut, the
 * first part is written and read, then the rest is appended and read (the growth path:
 * a line cut in two, a long line skipped across passes). Written to a file of ours,
 * mode 0600, so that the trust checks pass. Checked:
 *   - a pass returns the number of ranges (>= 0), at most twice PERF_MAP_ENTRIES_MAX;
 *   - every name a lookup returns is at most PERF_MAP_NAME_MAX bytes of printable,
 *     well-formed UTF-8 (no control byte, no broken sequence);
 *   - lookups at and around every address the input spells in hex do not crash.
 * Context: the fuzzer's one thread.
 *
 * Run: make fuzz (or build/fuzz/fuzz_perf_map -max_total_time=60 test/fuzz/corpus/perf_map/)
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/symbolize/perf_map.h"
#include "common/log.h"

/* Addresses looked up per input, taken from the hex numbers in it. */
#define LOOKUPS 64

static char path[64];

static void fail(const char *what, const char *name)
{
	fprintf(stderr, "fuzz_perf_map: invariant broken: %s: \"%s\"\n", what, name ? name : "");
	abort();
}

static void write_part(const uint8_t *data, size_t len, int flags)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0600);
	if (fd < 0 || (len && write(fd, data, len) != (ssize_t)len))
		fail("cannot write the map", path);
	close(fd);
}

/* Printable, well-formed UTF-8 of at most PERF_MAP_NAME_MAX bytes. */
static void check_name(const char *name)
{
	const unsigned char *s = (const unsigned char *)name;
	size_t n = strlen(name);
	if (n == 0 || n > PERF_MAP_NAME_MAX)
		fail("name length", name);
	for (size_t i = 0; i < n;) {
		if (s[i] < 0x80) {
			if (s[i] < 0x20 || s[i] == 0x7f)
				fail("control byte in a name", name);
			i++;
			continue;
		}
		size_t len = s[i] >= 0xf0 ? 4 : s[i] >= 0xe0 ? 3 : s[i] >= 0xc2 ? 2 : 0;
		if (len == 0 || s[i] > 0xf4 || i + len > n)
			fail("broken UTF-8 in a name", name);
		for (size_t k = 1; k < len; k++)
			if ((s[i + k] & 0xc0) != 0x80)
				fail("broken UTF-8 in a name", name);
		i += len;
	}
}

static void check(struct perf_map *pm, int rc, const uint8_t *data, size_t size)
{
	if (rc < 0 || (size_t)rc > 2 * PERF_MAP_ENTRIES_MAX)
		fail("a pass's result", NULL);
	int lookups = 0;
	for (size_t i = 0; i < size && lookups < LOOKUPS; i++) {
		uint64_t v = 0;
		size_t k = i;
		for (; k < size && k - i < 16; k++) {
			int d = data[k] >= '0' && data[k] <= '9' ? data[k] - '0'
				: (data[k] | 0x20) >= 'a' && (data[k] | 0x20) <= 'f'
				    ? (data[k] | 0x20) - 'a' + 10
				    : -1;
			if (d < 0)
				break;
			v = v << 4 | (uint64_t)d;
		}
		if (k == i)
			continue;
		i = k;
		lookups++;
		for (uint64_t a = v - 1; a != v + 2; a++) {
			const char *name = perf_map_find(pm, (uintptr_t)a);
			if (name)
				check_name(name);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!path[0]) {
		log_set_level(LOG_LEVEL_ERROR); /* the skipped lines' warning, at every input */
		snprintf(path, sizeof(path), "/tmp/fuzz-perf-map-%d.map", (int)getpid());
	}
	if (size == 0)
		return 0;
	size_t cut = 1 + (size_t)data[0] * (size - 1) / 255;
	struct perf_map *pm = perf_map_new();
	if (!pm)
		return 0;
	write_part(data + 1, cut - 1, O_TRUNC);
	check(pm, perf_map_refresh_path(pm, path), data + 1, size - 1);
	write_part(data + cut, size - cut, O_APPEND);
	check(pm, perf_map_refresh_path(pm, path), data + 1, size - 1);
	perf_map_free(pm);
	unlink(path);
	return 0;
}
