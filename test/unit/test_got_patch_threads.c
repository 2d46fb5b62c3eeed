/*
 * test_got_patch_threads.c - unit tests of agent/alloc/got_patch.c with other threads:
 * calls that stay correct while slots are rewritten, walks during dlopen and dlclose,
 * an apply from a library constructor (the loader's lock against the guard), and a
 * fork child's walk after the handlers. The counting hooks and libraries:
 * got_patch_fixture.h and test_got_patch.c.
 */
#include "test/unit/got_patch_fixture.h"

/* ---------------------------------------------------------------- concurrency, fork */

static _Atomic bool stop;
static _Atomic long rounds_done; /* caller rounds finished */

static void *caller(void *arg)
{
	struct lib *l = arg;
	long bad = 0;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		bad += l->run(10) != 0;
		atomic_fetch_add_explicit(&rounds_done, 1, memory_order_relaxed);
	}
	return (void *)bad;
}

/* Until at least `more` caller rounds have finished past `from`, or 10 s. */
static void wait_rounds(long from, long more)
{
	for (int ms = 0; ms < 10000 && atomic_load(&rounds_done) < from + more; ms++)
		usleep(1000);
}

/* Threads call through the slots while they are patched and put back (200 times, and
 * for at least 200 of their rounds): every call reaches a working allocator (one
 * 8-byte store per slot), and once the slots stay patched every call is counted. */
START_TEST(calls_stay_correct_while_slots_are_rewritten)
{
	struct lib lazy = load("liballoc_lazy.so"), now = load("liballoc_now.so");
	int r = track((void *)lazy.run);
	atomic_store(&stop, false);
	atomic_store(&rounds_done, 0);
	pthread_t t[2];
	ck_assert_int_eq(pthread_create(&t[0], NULL, caller, &lazy), 0);
	ck_assert_int_eq(pthread_create(&t[1], NULL, caller, &now), 0);
	wait_rounds(0, 10);
	long start = atomic_load(&rounds_done);
	for (int i = 0; i < 200 || (atomic_load(&rounds_done) < start + 200 && i < 100000); i++) {
		ck_assert_int_eq(got_patch_apply(table, F_N), 0);
		ck_assert_int_gt(got_patch_restore(), 0);
	}
	long during = atomic_load(&rounds_done) - start;
	atomic_store(&stop, true);
	for (int i = 0; i < 2; i++) {
		void *bad;
		pthread_join(t[i], &bad);
		ck_assert_ptr_null(bad);
	}
	ck_assert_msg(during > 0, "the callers made no call while the slots changed");
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	uint64_t before = count_of(r, F_MALLOC);
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	ck_assert_uint_eq(count_of(r, F_MALLOC) - before, ROUNDS);
	dlclose(lazy.handle);
	dlclose(now.handle);
}
END_TEST

static _Atomic int loads;

static void *loader_thread(void *arg)
{
	long bad = 0;
	(void)arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		void *h = dlopen(lib_path("liballoc_slowreloc.so"), RTLD_NOW | RTLD_LOCAL);
		if (!h)
			return (void *)-1L;
		int (*run)(int) = (int (*)(int))dlsym(h, "alloc_caller_run");
		bad += run(1) != 0;
		dlclose(h);
		atomic_fetch_add(&loads, 1);
	}
	return (void *)bad;
}

/* liballoc_slowreloc.so (full RELRO, thousands of slots the loader writes after
 * malloc's, on its page) loaded and unloaded in a loop while the main thread walks: a
 * walk that patched it while the loader is still relocating it would make that page
 * read-only under the loader (a crash: without the barrier of got_patch.c and the
 * lookups before it, this test dies in the loader), or write into a module being
 * unmapped. */
START_TEST(walks_during_dlopen_and_dlclose_are_safe)
{
	struct lib lazy = load("liballoc_lazy.so");
	atomic_store(&stop, false);
	atomic_store(&loads, 0);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, loader_thread, NULL), 0);
	int ok = 0, again = 0;
	for (int i = 0; i < 300 || atomic_load(&loads) < 200; i++) {
		int rc = got_patch_apply(table, F_N);
		ck_assert_msg(rc == 0 || rc == -EAGAIN, "apply: %d", rc);
		ok += rc == 0;
		again += rc == -EAGAIN;
		if (i % 50 == 49)
			got_patch_restore();
	}
	atomic_store(&stop, true);
	void *bad;
	pthread_join(t, &bad);
	ck_assert_ptr_null(bad);
	ck_assert_msg(ok > 0, "no walk completed (%d gave up: loads kept coming)", again);
	got_patch_restore();
	ck_assert_int_eq(lazy.run(ROUNDS), 0);
	dlclose(lazy.handle);
}
END_TEST

/*
 * A patch from a library constructor (the loader's dlopen lock held) while another
 * thread holds common/dl_guard's lock and waits in dlopen for the loader's, as the
 * uploader does loading libdw: the barrier must take neither that guard nor anything
 * the other thread holds. Each side waits for the other to be in place; a deadlock
 * shows as threads not done within CTOR_DEADLINE_S.
 */
#define CTOR_DEADLINE_S 20
static _Atomic int ctor_stage; /* 1: in the constructor; 2: the guard is held */
static _Atomic int ctor_rc = 1;

static void wait_stage(int stage)
{
	while (atomic_load(&ctor_stage) < stage)
		usleep(1000);
}

static void in_constructor(void)
{
	atomic_store(&ctor_stage, 1);
	wait_stage(2);
	usleep(20000); /* the other thread is blocked in dlopen by now */
	atomic_store(&ctor_rc, got_patch_apply(table, F_N));
}

static void *guard_holder(void *arg)
{
	(void)arg;
	wait_stage(1);
	dl_guard_lock();
	atomic_store(&ctor_stage, 2);
	void *h = dlopen(lib_path("liballoc_now.so"), RTLD_NOW | RTLD_LOCAL);
	dl_guard_unlock();
	if (h)
		dlclose(h);
	return h;
}

static void *ctor_loader(void *arg)
{
	(void)arg;
	return dlopen(lib_path("libctor_apply.so"), RTLD_NOW | RTLD_LOCAL);
}

START_TEST(apply_from_a_constructor_does_not_deadlock_with_the_guard)
{
	char hex[32];
	snprintf(hex, sizeof(hex), "%lx", (unsigned long)(uintptr_t)&in_constructor);
	setenv("GOT_PATCH_TEST_CTOR", hex, 1);
	atomic_store(&ctor_stage, 0);
	pthread_t holder, loader;
	ck_assert_int_eq(pthread_create(&holder, NULL, guard_holder, NULL), 0);
	ck_assert_int_eq(pthread_create(&loader, NULL, ctor_loader, NULL), 0);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += CTOR_DEADLINE_S;
	void *lib = NULL, *other = NULL;
	ck_assert_msg(pthread_timedjoin_np(loader, &lib, &until) == 0,
		      "deadlock: the constructor's dlopen not done after %d s", CTOR_DEADLINE_S);
	ck_assert_msg(pthread_timedjoin_np(holder, &other, &until) == 0,
		      "deadlock: the guard holder's dlopen not done after %d s", CTOR_DEADLINE_S);
	unsetenv("GOT_PATCH_TEST_CTOR");
	ck_assert_ptr_nonnull(lib);
	ck_assert_ptr_nonnull(other);
	ck_assert_int_eq(atomic_load(&ctor_rc), 0);
	ck_assert_int_gt(got_patch_restore(), 0);
	dlclose(lib);
}
END_TEST

START_TEST(fork_child_walks_after_the_handlers)
{
	struct lib lazy = load("liballoc_lazy.so");
	int r = track((void *)lazy.run);
	ck_assert_int_eq(got_patch_apply(table, F_N), 0);
	got_patch_atfork_prepare();
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		got_patch_atfork_child();
		/* Inherited slots still hooked; the lock is usable. */
		int ok = lazy.run(10) == 0 && count_of(r, F_MALLOC) == 10 &&
			 got_patch_apply(table, F_N) == 0 && got_patch_restore() > 0 &&
			 lazy.run(10) == 0 && count_of(r, F_MALLOC) == 10;
		_exit(ok ? 0 : 1);
	}
	got_patch_atfork_parent();
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
	ck_assert_int_gt(got_patch_restore(), 0);
	dlclose(lazy.handle);
}
END_TEST

static Suite *got_patch_threads_suite(void)
{
	Suite *s = suite_create("got_patch_threads");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, calls_stay_correct_while_slots_are_rewritten);
	tcase_add_test(tc, walks_during_dlopen_and_dlclose_are_safe);
	tcase_add_test(tc, apply_from_a_constructor_does_not_deadlock_with_the_guard);
	tcase_add_test(tc, fork_child_walks_after_the_handlers);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(got_patch_threads_suite());
}
