/*
 * fuzz_cfi_cache.c - libFuzzer target: unwind cache files, the bytes a process reads
 * from DD_PROFILING_UNWIND_CACHE_DIR (agent/unwind/cfi_cache_file.c).
 *
 * Each input is a whole cache file. It is written to a memfd of ours, mode 0600, so the
 * checks on the descriptor pass as for a real file of this user, and goes through
 * cfi_cache_file_read: the code cfi_cache_load runs on every file it opens. An input
 * long enough to hold a header gets the module identity of a fixed module (libc, else
 * this program) written over its own, so that mutations reach the row and page index
 * checks instead of all stopping at that compare (a memcmp). Checked:
 *   - a refusal is a negative errno with a reason, and leaves the table empty;
 *   - an accepted table is at most CFI_CACHE_MAX_TABLE_BYTES, its rows strictly
 *     increasing, its page index within the rows, and every lookup (cfi_table_find,
 *     the signal handler's) returns one of its rows or NULL.
 * Context: the fuzzer's one thread.
 *
 * Build, from the repository's root:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     test/fuzz/fuzz_cfi_cache.c agent/unwind/cfi_cache_file.c agent/unwind/cfi_table.c \
 *     agent/unwind/cfi_roots.c \
 *     agent/unwind/cfi_parse.c agent/unwind/cfi_decode.c agent/unwind/elf_image.c \
 *     common/fs.c common/mem_populate.c -lelf -ldl -lpthread -o fuzz_cfi_cache
 * Run: ./fuzz_cfi_cache -max_total_time=60 test/fuzz/corpus/cfi_cache/
 * (the seeds: test/fuzz/gen_cfi_cache_seeds.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/unwind/cfi_cache_file.h"
#include "agent/unwind/cfi_table.h"

#define MODULE "/lib/x86_64-linux-gnu/libc.so.6"
#define MODULE_FALLBACK "/proc/self/exe"
/* pcs looked up per accepted table: spread over its range, plus each row's own pc. */
#define LOOKUPS 64

static int fd = -1;
static struct cfi_cache_key key;

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_cfi_cache: invariant broken: %s\n", what);
	abort();
}

static void setup(void)
{
	fd = memfd_create("fuzz_cfi_cache", MFD_CLOEXEC);
	if (fd < 0 || fchmod(fd, 0600) != 0)
		fail("memfd_create/fchmod");
	if (!cfi_cache_file_key(MODULE, &key) && !cfi_cache_file_key(MODULE_FALLBACK, &key))
		fail("no module to key the inputs by");
}

static void check_lookup(const struct cfi_table *t, uint64_t vaddr)
{
	const struct cfi_row *r = cfi_table_find(t, vaddr);
	if (r && (r < t->rows || r >= t->rows + t->nrows))
		fail("lookup returned a row outside the table");
}

static void check_table(const struct cfi_table *t)
{
	if (t->nrows == 0 || !t->rows || !t->page || t->npages == 0)
		fail("accepted an empty table");
	size_t len = t->nrows * sizeof(struct cfi_row) + t->npages * sizeof(uint32_t);
	if (len > CFI_CACHE_MAX_TABLE_BYTES || t->shared_len != len)
		fail("accepted table bigger than the cap, or of the wrong length");
	for (size_t i = 1; i < t->nrows; i++)
		if (t->rows[i].pc <= t->rows[i - 1].pc)
			fail("accepted rows out of order");
	for (uint32_t p = 0; p < t->npages; p++)
		if (t->page[p] >= t->nrows)
			fail("accepted a page index past the rows");
	uint64_t span = (uint64_t)t->rows[t->nrows - 1].pc + 2 * CFI_PAGE;
	for (uint64_t i = 0; i < LOOKUPS; i++)
		check_lookup(t, t->base + span * i / LOOKUPS);
	for (size_t i = 0; i < t->nrows && i < LOOKUPS; i++)
		check_lookup(t, t->base + t->rows[i].pc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (fd < 0)
		setup();
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	size_t key_at = offsetof(struct cfi_cache_header, key);
	if (size >= key_at + sizeof(key))
		memcpy(buf + key_at, &key, sizeof(key));
	if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, size, 0) != (ssize_t)size)
		fail("cannot write the input to the memfd");
	free(buf);
	struct cfi_table t;
	const char *why = NULL;
	int rc = cfi_cache_file_read(fd, &key, &t, &why);
	if (rc < 0) {
		if (!why || !why[0])
			fail("refused without a reason");
		if (t.rows || t.nrows || t.page || t.shared_len)
			fail("refused but returned a table");
		return 0;
	}
	if (rc != 0)
		fail("neither 0 nor a negative errno");
	check_table(&t);
	cfi_table_free(&t);
	return 0;
}
