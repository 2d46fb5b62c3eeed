/*
 * test_mem_populate.c - unit tests of common/mem_populate.c: mapping a buffer's pages
 * in advance.
 *
 * What the unwind-table builder relies on: the whole pages inside the buffer are
 * resident afterwards (mincore) and still zero and writable; the pages it shares with
 * memory on either side are left alone; small buffers are left alone; errno is kept.
 * On a kernel before 5.14 (no MADV_POPULATE_WRITE) nothing may be populated, which the
 * tests accept only there.
 */
#include "common/mem_populate.h"

#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "test/unit/check_run.h"

#define PAGE 4096
#define MIB (1024 * 1024)

static bool kernel_has_populate(void)
{
	struct utsname u;
	int major = 0, minor = 0;
	if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return true;
	return major > 5 || (major == 5 && minor >= 14);
}

/* Resident pages of [p, p + n pages). */
static size_t resident(void *p, size_t npages)
{
	unsigned char vec[512];
	ck_assert_uint_le(npages, sizeof(vec));
	ck_assert_int_eq(mincore(p, npages * PAGE, vec), 0);
	size_t r = 0;
	for (size_t i = 0; i < npages; i++)
		r += vec[i] & 1;
	return r;
}

static unsigned char *fresh(size_t npages)
{
	void *p =
	    mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	return p;
}

START_TEST(test_whole_pages_inside_become_resident)
{
	if (!kernel_has_populate())
		return;
	enum { N = 256 }; /* 1 MiB */
	unsigned char *p = fresh(N);
	ck_assert_uint_eq(resident(p, N), 0);
	errno = 1234;
	/* From the middle of the first page to the middle of the last one. */
	mem_populate(p + 100, (N - 1) * PAGE);
	ck_assert_int_eq(errno, 1234);
	unsigned char vec[N];
	ck_assert_int_eq(mincore(p, N * PAGE, vec), 0);
	ck_assert_msg(!(vec[0] & 1), "the page shared with what lies before was touched");
	ck_assert_msg(!(vec[N - 1] & 1), "the page shared with what lies after was touched");
	for (int i = 1; i < N - 1; i++)
		ck_assert_msg(vec[i] & 1, "page %d of the buffer is not resident", i);
	for (size_t i = 0; i < (size_t)N * PAGE; i += 997)
		ck_assert_uint_eq(p[i], 0);
	p[PAGE * 7] = 42; /* writable */
	munmap(p, N * PAGE);
}
END_TEST

START_TEST(test_small_buffers_are_left_alone)
{
	enum { N = 64 };
	unsigned char *p = fresh(N);
	mem_populate(p, MEM_POPULATE_MIN - 1);
	ck_assert_uint_eq(resident(p, N), 0);
	mem_populate(p, 0);
	mem_populate(NULL, 0);
	ck_assert_uint_eq(resident(p, N), 0);
	munmap(p, N * PAGE);
}
END_TEST

START_TEST(test_heap_buffer_keeps_its_contents)
{
	/* A malloc'd buffer (mmap'd by glibc at this size) partly written already. */
	size_t len = 2 * MIB;
	unsigned char *b = malloc(len);
	ck_assert_ptr_nonnull(b);
	for (size_t i = 0; i < len / 2; i++)
		b[i] = (unsigned char)i;
	mem_populate(b, len);
	for (size_t i = 0; i < len / 2; i++)
		ck_assert_uint_eq(b[i], (unsigned char)i);
	free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mem_populate");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_whole_pages_inside_become_resident);
	tcase_add_test(tc, test_small_buffers_are_left_alone);
	tcase_add_test(tc, test_heap_buffer_keeps_its_contents);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
