/*
 * test_modules.c - the module registry: what it finds, and its lock-free publication.
 *
 * Readers play signal handlers: enter, look pcs up in the map and in its tables, exit,
 * as fast as they can, while the main thread loads and unloads a library and
 * republishes the map hundreds of times (each publication frees the old map and the
 * unloaded module's table after the grace period). Built with ThreadSanitizer too
 * (make tsan): a reader touching a freed map or table is a reported race.
 */
#include <check.h>
#include <errno.h>
#include <time.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/unwind/module_map.h"
#include "agent/unwind/modules.h"
#include "agent/unwind/modules_internal.h"
#include "common/bg_host.h"
#include "check_run.h"
#include "common/asan.h"

/* Sanitized builds: a fifth of the rounds (each ~5x slower there), every one still a
 * publication freeing what readers may hold, which both sanitizers would report. */
#if defined(DDPROF_TSAN) || DDPROF_ASAN
#define PUBLISH_ROUNDS 60
#else
#define PUBLISH_ROUNDS 300
#endif
#define READERS 3

static const char *churn_lib(void)
{
	static char path[4096];
	const char *dir = getenv("DDPROF_BUILD_DIR");
	snprintf(path, sizeof(path), "%s/workloads/libchurn.so", dir ? dir : "build");
	return path;
}

START_TEST(finds_executable_libc_and_vdso)
{
	modules_init();
	ck_assert_int_ge(modules_refresh(), 3);
	unsigned slot;
	const struct module_map *m = module_map_enter(&slot);
	const struct module_entry *e = module_map_find(m, (uintptr_t)&memcpy);
	ck_assert_ptr_nonnull(e);
	ck_assert_ptr_nonnull(e->table);
	ck_assert_ptr_nonnull(cfi_table_find(e->table, (uintptr_t)&memcpy - e->bias));
	e = module_map_find(m, (uintptr_t)&churn_lib); /* our own code */
	ck_assert_ptr_nonnull(e);
	ck_assert_ptr_nonnull(e->table);
	ck_assert_ptr_null(module_map_find(m, 16)); /* the zero page is nobody's */
	for (size_t i = 1; i < m->n; i++)
		ck_assert_uint_ge(m->e[i].start, m->e[i - 1].end);
	module_map_exit(slot);
	struct modules_stats st;
	modules_get_stats(&st);
	ck_assert_uint_ge(st.tables, 3);
	ck_assert_uint_gt(st.table_bytes, 100000); /* libc alone has ~28k rows */
	ck_assert_uint_eq(st.leaked, 0);
}
END_TEST

/* A dlopen caller's own rescan (modules_load_sync, from the preload layer's dlopen)
 * builds the new library's table before it returns, even when another rescan that
 * builds nothing (the symbolizer's, modules_retire_unloaded) saw the load first; a fork
 * child asks whether its parent's registry was behind (modules_registry_behind). */
START_TEST(a_dlopen_callers_rescan_builds_its_table)
{
	modules_init();
	modules_refresh();
	ck_assert(!modules_registry_behind());
	void *h = dlopen(churn_lib(), RTLD_NOW);
	ck_assert_msg(h != NULL, "%s", dlerror());
	uintptr_t fn = (uintptr_t)dlsym(h, "churn_burn");
	ck_assert(fn != 0);
	ck_assert(modules_registry_behind());
	bool changed;
	ck_assert_int_gt(modules_rescan(&changed, MODULES_BUILD_NONE), 0);
	ck_assert(changed);
	ck_assert(modules_registry_behind()); /* found, not built */
	modules_load_sync();
	unsigned slot;
	const struct module_map *m = module_map_enter(&slot);
	const struct module_entry *e = module_map_find(m, fn);
	ck_assert_ptr_nonnull(e);
	ck_assert_ptr_nonnull(e->table);
	module_map_exit(slot);
	ck_assert(!modules_registry_behind());
	ck_assert_int_eq(dlclose(h), 0);
	modules_refresh();
}
END_TEST

START_TEST(unloaded_library_is_retired)
{
	modules_init();
	modules_refresh();
	void *h = dlopen(churn_lib(), RTLD_NOW);
	ck_assert_msg(h != NULL, "%s", dlerror());
	uintptr_t fn = (uintptr_t)dlsym(h, "churn_burn");
	ck_assert(fn != 0);
	modules_refresh();
	unsigned slot;
	const struct module_map *m = module_map_enter(&slot);
	const struct module_entry *e = module_map_find(m, fn);
	ck_assert_ptr_nonnull(e);
	ck_assert_ptr_nonnull(e->table);
	module_map_exit(slot);
	struct retired_segment segs[8];
	modules_take_retired(segs, 8);
	ck_assert_int_eq(dlclose(h), 0);
	modules_refresh();
	m = module_map_enter(&slot);
	ck_assert_ptr_null(module_map_find(m, fn));
	module_map_exit(slot);
	size_t n = modules_take_retired(segs, 8);
	ck_assert_uint_ge(n, 1);
	ck_assert_ptr_nonnull(strstr(segs[0].path, "libchurn.so"));
	ck_assert(fn >= segs[0].start && fn < segs[0].end);
}
END_TEST

static _Atomic bool stop;
static _Atomic uint64_t lookups, hits;

static void *reader(void *arg)
{
	uintptr_t libc_pc = (uintptr_t)&memcpy;
	uintptr_t *lib_pc = arg;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		unsigned slot;
		const struct module_map *m = module_map_enter(&slot);
		size_t n = m->n;
		for (size_t i = 1; i < n; i++)
			ck_assert(m->e[i].start >= m->e[i - 1].end);
		uintptr_t probe[2] = {libc_pc, atomic_load_explicit((_Atomic uintptr_t *)lib_pc,
								    memory_order_relaxed)};
		for (int k = 0; k < 2; k++) {
			const struct module_entry *e = module_map_find(m, probe[k]);
			if (e && e->table) {
				const struct cfi_row *r =
				    cfi_table_find(e->table, probe[k] - e->bias);
				if (r)
					atomic_fetch_add_explicit(&hits, r->kind != 0,
								  memory_order_relaxed);
			}
		}
		module_map_exit(slot);
		atomic_fetch_add_explicit(&lookups, 1, memory_order_relaxed);
	}
	return NULL;
}

START_TEST(publication_under_concurrent_readers)
{
	modules_init();
	modules_refresh();
	static _Atomic uintptr_t lib_pc;
	pthread_t t[READERS];
	atomic_store(&stop, false);
	for (int i = 0; i < READERS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, reader, (void *)&lib_pc), 0);
	struct modules_stats before;
	modules_get_stats(&before);
	for (int round = 0; round < PUBLISH_ROUNDS; round++) {
		void *h = dlopen(churn_lib(), RTLD_NOW);
		ck_assert_msg(h != NULL, "%s", dlerror());
		atomic_store_explicit(&lib_pc, (uintptr_t)dlsym(h, "churn_burn"),
				      memory_order_relaxed);
		modules_refresh(); /* publishes with the library (and builds its table) */
		atomic_store_explicit(&lib_pc, 0, memory_order_relaxed);
		ck_assert_int_eq(dlclose(h), 0);
		modules_refresh(); /* publishes without it, frees its table after grace */
	}
	atomic_store(&stop, true);
	for (int i = 0; i < READERS; i++)
		pthread_join(t[i], NULL);
	struct modules_stats after;
	modules_get_stats(&after);
	ck_assert_uint_ge(after.publications - before.publications, 2 * PUBLISH_ROUNDS);
	/* A grace wait gives up after 200 ms and leaks (counted) rather than block: on a
	 * 2-vCPU VM a reader preempted inside its slot, or the whole VM paused, can cause
	 * a rare one. A reader that never leaves its slot would leak at every publication:
	 * allow 2%, no more. */
	ck_assert_uint_le(after.leaked, (after.publications - before.publications) / 50);
	ck_assert_uint_gt(atomic_load(&lookups), 1000);
	ck_assert_uint_gt(atomic_load(&hits), 1000);
	fprintf(stderr, "test_modules: %d publications, %llu lookups by %d readers\n",
		2 * PUBLISH_ROUNDS, (unsigned long long)atomic_load(&lookups), READERS);
}
END_TEST

/* A host like the uploader thread: runs modules_service when woken or when due. */
/* A background host (common/bg_host.h) with the module service as its only service, on
 * a thread of the test's: what the uploader's thread is in the library. */
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t host_cond = PTHREAD_COND_INITIALIZER;
static struct bg_host host;
static struct bg_host_thread host_thr;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint64_t modules_run(void *arg, uint64_t now)
{
	(void)arg;
	return modules_service(now);
}

static const struct bg_service modules_svc = {
    .name = "modules", .run = modules_run, .first_due_ns = 0, .nests = true};

static void *host_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&host_lock);
	bg_host_serve(&host);
	pthread_mutex_unlock(&host_lock);
	return NULL;
}

/* Whether the published map has libc's unwind table. */
static bool libc_has_table(void)
{
	unsigned slot;
	const struct module_map *m = module_map_enter(&slot);
	const struct module_entry *e = module_map_find(m, (uintptr_t)&memcpy);
	bool built = e && e->table;
	module_map_exit(slot);
	return built;
}

static int no_thread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	(void)t;
	(void)a;
	(void)fn;
	(void)arg;
	ck_abort_msg("hosted modules must not create a thread of their own");
	return EAGAIN;
}

START_TEST(hosted_service_builds_tables_and_follows_dlopen)
{
	modules_init();
	bg_host_init(&host, &host_lock, &host_cond, &host_thr);
	ck_assert_int_eq(bg_host_add(&host, &modules_svc), 0);
	atomic_store(&host.hosting, true);
	pthread_t host_thread;
	pthread_create(&host_thread, NULL, host_main, NULL);
	modules_set_host(&host, 0);
	ck_assert_int_eq(modules_start(no_thread_create), 0);
	/* The first scan, after the start delay, on the host's thread. */
	ck_assert_int_eq(modules_wait_ready(5000000000ULL), 0);
	ck_assert(libc_has_table());
	unsigned slot;
	const struct module_map *m;
	const struct module_entry *e;
	/* A library loaded later is found after a notify, with no thread of our own. */
	void *h = dlopen(churn_lib(), RTLD_NOW);
	ck_assert_ptr_nonnull(h);
	void *fn = dlsym(h, "churn_burn");
	ck_assert_ptr_nonnull(fn);
	modules_notify_load();
	uint64_t give_up = mono_ns() + 5000000000ULL;
	bool found = false;
	while (!found && mono_ns() < give_up) {
		m = module_map_enter(&slot);
		e = module_map_find(m, (uintptr_t)fn);
		found = e && e->table;
		module_map_exit(slot);
		if (!found)
			usleep(1000);
	}
	ck_assert_msg(found, "the host never built the dlopen'd library's table");
	modules_stop();
	pthread_mutex_lock(&host_lock);
	bg_host_leave_locked(&host, true);
	pthread_mutex_unlock(&host_lock);
	pthread_join(host_thread, NULL);
	/* The first scan, and the one the load notify asked for (kicked by id). */
	ck_assert_uint_ge(host_thr.runs[0], 2);
	ck_assert_uint_ge(host.kicks, 1);
	modules_set_host(NULL, 0);
	dlclose(h);
}
END_TEST

/* The stack size the module thread was created with, and the real pthread_create. */
static size_t created_stack;

static int recording_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	created_stack = 0;
	if (a)
		pthread_attr_getstacksize(a, &created_stack);
	return pthread_create(t, a, fn, arg);
}

/* An application may make every new thread's stack small before our thread starts
 * (pthread_setattr_default_np); our own module thread (no host: the uploader thread
 * failed to start) still gets PROFILER_THREAD_STACK_BYTES, and builds its tables on it. */
START_TEST(own_thread_keeps_its_stack_when_the_default_is_small)
{
	pthread_attr_t small;
	pthread_attr_init(&small);
	ck_assert_int_eq(pthread_attr_setstacksize(&small, 64 * 1024), 0);
	ck_assert_int_eq(pthread_setattr_default_np(&small), 0);
	pthread_attr_destroy(&small);
	modules_init();
	modules_set_host(NULL, 0);
	ck_assert_int_eq(modules_start(recording_create), 0);
	ck_assert_uint_ge(created_stack, PROFILER_THREAD_STACK_BYTES);
	ck_assert_int_eq(modules_wait_ready(5000000000ULL), 0);
	ck_assert(libc_has_table());
	modules_stop();
}
END_TEST

static Suite *modules_suite(void)
{
	Suite *s = suite_create("modules");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, finds_executable_libc_and_vdso);
	tcase_add_test(tc, a_dlopen_callers_rescan_builds_its_table);
	tcase_add_test(tc, unloaded_library_is_retired);
	tcase_add_test(tc, publication_under_concurrent_readers);
	tcase_add_test(tc, hosted_service_builds_tables_and_follows_dlopen);
	tcase_add_test(tc, own_thread_keeps_its_stack_when_the_default_is_small);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(modules_suite());
}
