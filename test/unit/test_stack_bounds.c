/*
 * test_stack_bounds.c - a thread's stack bounds from its descriptor and requested size
 * (agent/unwind/stack_bounds.c), against pthread_getattr_np.
 *
 * For threads with glibc-allocated stacks of several sizes and with a stack the
 * application provides: the bounds must lie inside the real stack (every byte between
 * them mapped, the thread's own frames inside), lose at most the slack at the bottom,
 * and come from the fast path (no pthread_getattr_np) whenever the size is known and
 * big enough. A stack that is too small, or an unknown size, takes the exact path.
 */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "agent/unwind/stack_bounds.h"
#include "check_run.h"

struct probe {
	size_t hint; /* passed to stack_bounds_self */
	struct stack_range got, real;
	uintptr_t sp, self;
	bool ok;
};

static void *probe_thread(void *arg)
{
	struct probe *p = arg;
	volatile char local = 0;
	p->sp = (uintptr_t)&local;
	p->self = (uintptr_t)pthread_self();
	p->ok = stack_bounds_self(false, p->hint, &p->got);
	pthread_attr_t attr;
	ck_assert_int_eq(pthread_getattr_np(pthread_self(), &attr), 0);
	void *addr;
	size_t size;
	ck_assert_int_eq(pthread_attr_getstack(&attr, &addr, &size), 0);
	pthread_attr_destroy(&attr);
	p->real.lo = (uintptr_t)addr;
	p->real.hi = (uintptr_t)addr + size;
	return NULL;
}

/* Runs a thread with stack size `size` (0: default attributes; user: our own stack) and
 * hint; returns what it saw. */
static struct probe run(size_t size, size_t hint, bool user)
{
	struct probe p = {.hint = hint};
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	void *mem = NULL;
	if (user) {
		mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ck_assert(mem != MAP_FAILED);
		ck_assert_int_eq(pthread_attr_setstack(&attr, mem, size), 0);
	} else if (size) {
		ck_assert_int_eq(pthread_attr_setstacksize(&attr, size), 0);
	}
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, size || user ? &attr : NULL, probe_thread, &p), 0);
	pthread_join(t, NULL);
	pthread_attr_destroy(&attr);
	if (mem)
		munmap(mem, size);
	return p;
}

static void check_inside(const struct probe *p, const char *what)
{
	ck_assert_msg(p->ok, "%s: no bounds", what);
	ck_assert_msg(p->got.lo >= p->real.lo && p->got.hi <= p->real.hi,
		      "%s: [%#lx, %#lx) not inside the real stack [%#lx, %#lx)", what,
		      (unsigned long)p->got.lo, (unsigned long)p->got.hi, (unsigned long)p->real.lo,
		      (unsigned long)p->real.hi);
	ck_assert_msg(p->sp > p->got.lo && p->sp < p->got.hi, "%s: the thread's frame is outside",
		      what);
}

START_TEST(default_stack_from_descriptor)
{
	pthread_attr_t def;
	size_t size;
	ck_assert_int_eq(pthread_getattr_default_np(&def), 0);
	ck_assert_int_eq(pthread_attr_getstacksize(&def, &size), 0);
	pthread_attr_destroy(&def);
	struct probe p = run(0, size, false);
	check_inside(&p, "default");
	ck_assert_msg(p.got.hi == p.self, "default: not from the descriptor (hi %#lx, self %#lx)",
		      (unsigned long)p.got.hi, (unsigned long)p.self);
	/* At most the slack (and the guard) lost at the bottom. */
	ck_assert_uint_le(p.got.lo - p.real.lo, 128 * 1024);
}
END_TEST

START_TEST(requested_sizes_from_descriptor)
{
	static const size_t sizes[] = {256 * 1024, 1024 * 1024, 3 * 1024 * 1024 + 4096};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		/* Twice: the second thread gets the first one's cached stack block. */
		for (int round = 0; round < 2; round++) {
			struct probe p = run(sizes[i], sizes[i], false);
			check_inside(&p, "sized");
			ck_assert(p.got.hi == p.self);
			ck_assert_uint_le(p.got.lo - p.real.lo, 128 * 1024);
		}
	}
	/* A cached block bigger than asked for: the bounds stay inside it. */
	struct probe big = run(2 * 1024 * 1024, 2 * 1024 * 1024, false);
	check_inside(&big, "big");
	struct probe small = run(1024 * 1024, 1024 * 1024, false);
	check_inside(&small, "reused");
}
END_TEST

START_TEST(user_stack_from_descriptor)
{
	struct probe p = run(1024 * 1024, 1024 * 1024, true);
	check_inside(&p, "user stack");
	ck_assert(p.got.hi == p.self);
}
END_TEST

START_TEST(small_or_unknown_sizes_are_exact)
{
	struct probe small = run(64 * 1024, 64 * 1024, false);
	check_inside(&small, "64 KiB");
	ck_assert(small.got.lo == small.real.lo && small.got.hi == small.real.hi);
	struct probe unknown = run(1024 * 1024, 0, false);
	check_inside(&unknown, "unknown size");
	ck_assert(unknown.got.lo == unknown.real.lo && unknown.got.hi == unknown.real.hi);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stack_bounds");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, default_stack_from_descriptor);
	tcase_add_test(tc, requested_sizes_from_descriptor);
	tcase_add_test(tc, user_stack_from_descriptor);
	tcase_add_test(tc, small_or_unknown_sizes_are_exact);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
