/*
 * test_bg_host.c - unit tests of common/bg_host.c: the background host's table of
 * services and the loop of the thread that runs them.
 *
 * What the profiler relies on: a service runs when its due time comes and not before,
 * again at the time it returned; a kick wakes a sleeping host at once and the kicked
 * service runs; a wanted poll and a before_sleep refusal keep the thread from sleeping
 * while work waits; services run in table order, one at a time; a service that waits
 * runs the nesting services of its mask, never itself nor one that does not nest;
 * leaving stops the loop and nested runs; a kick that would wait for a busy lock is
 * dropped and counted instead; a wake asks the owner to start the thread and answers
 * whether it is hosted; and no kick is ever lost under many kicking threads (run under
 * ThreadSanitizer too: make tsan).
 */
#include "common/bg_host.h"

#include <check.h>
#include <stdatomic.h>
#include <time.h>
#include <signal.h>
#include <unistd.h>

#include "test/unit/check_run.h"

#define MS 1000000ULL

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond;
static struct bg_host host;
static struct bg_host_thread thr;

/* What each test service records; its run returns next_in after now (BG_NEVER if 0). */
struct probe {
	_Atomic unsigned runs;
	_Atomic uint64_t first_run_ns;
	uint64_t next_in;
	_Atomic bool wanted;
	_Atomic unsigned order[16]; /* the global sequence number of each run */
	unsigned nest_mask;	    /* run nested services of this mask while running */
	_Atomic unsigned nested_seen;
};

static _Atomic unsigned sequence;

static uint64_t probe_run(void *arg, uint64_t now)
{
	struct probe *p = arg;
	unsigned n = atomic_fetch_add(&p->runs, 1);
	if (n == 0)
		atomic_store(&p->first_run_ns, now);
	if (n < 16)
		atomic_store(&p->order[n], atomic_fetch_add(&sequence, 1));
	atomic_store(&p->wanted, false);
	if (p->nest_mask)
		bg_host_run_nested(&host, p->nest_mask);
	return p->next_in ? now + p->next_in : BG_NEVER;
}

static bool probe_wanted(void *arg)
{
	struct probe *p = arg;
	return atomic_load(&p->wanted);
}

static void host_new(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&cond, &a);
	pthread_condattr_destroy(&a);
	bg_host_init(&host, &lock, &cond, &thr);
	atomic_store(&sequence, 0);
}

static void *serve_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	bg_host_serve(&host);
	pthread_mutex_unlock(&lock);
	return NULL;
}

static void leave_and_join(pthread_t t)
{
	pthread_mutex_lock(&lock);
	bg_host_leave_locked(&host, true);
	pthread_mutex_unlock(&lock);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
}

/* Waits (at most 5 s) until p has run n times. */
static bool wait_runs(struct probe *p, unsigned n)
{
	uint64_t give_up = mono_ns() + 5000 * MS;
	while (atomic_load(&p->runs) < n && mono_ns() < give_up)
		usleep(200);
	return atomic_load(&p->runs) >= n;
}

START_TEST(test_services_run_when_due_and_again_at_the_time_they_return)
{
	host_new();
	struct probe now_p = {.next_in = 0};
	struct probe later = {.next_in = 40 * MS};
	struct bg_service s0 = {.name = "now", .run = probe_run, .arg = &now_p, .first_due_ns = 0};
	struct bg_service s1 = {
	    .name = "later", .run = probe_run, .arg = &later, .first_due_ns = 60 * MS};
	ck_assert_int_eq(bg_host_add(&host, &s0), 0);
	ck_assert_int_eq(bg_host_add(&host, &s1), 1);
	uint64_t t0 = mono_ns();
	pthread_t t;
	pthread_create(&t, NULL, serve_main, NULL);
	ck_assert(wait_runs(&later, 3));
	leave_and_join(t);
	/* The first at once, once (it returned BG_NEVER); the second not before its first
	 * due time, and its runs 40 ms apart at least: three runs took 60 + 2 x 40 ms. */
	ck_assert_uint_eq(atomic_load(&now_p.runs), 1);
	ck_assert_uint_ge(atomic_load(&later.first_run_ns), t0 + 60 * MS);
	ck_assert_uint_ge(mono_ns(), t0 + 140 * MS);
	ck_assert_uint_ge(thr.runs[1], 3);
	ck_assert_uint_ge(thr.sleeps, 3); /* it slept between them, no busy loop */
	ck_assert_uint_le(thr.sleeps, 40);
}
END_TEST

START_TEST(test_a_kick_wakes_the_sleeping_host_and_runs_that_service)
{
	host_new();
	struct probe idle = {0}, kicked = {0};
	struct bg_service s0 = {
	    .name = "idle", .run = probe_run, .arg = &idle, .first_due_ns = BG_NEVER};
	struct bg_service s1 = {
	    .name = "kicked", .run = probe_run, .arg = &kicked, .first_due_ns = BG_NEVER};
	bg_host_add(&host, &s0);
	bg_host_add(&host, &s1);
	pthread_t t;
	pthread_create(&t, NULL, serve_main, NULL);
	usleep(20000); /* asleep with no due time: it waits for a kick */
	ck_assert_uint_eq(atomic_load(&kicked.runs), 0);
	for (unsigned i = 1; i <= 3; i++) {
		bg_host_kick(&host, 1);
		ck_assert(wait_runs(&kicked, i));
	}
	leave_and_join(t);
	ck_assert_uint_eq(atomic_load(&kicked.runs), 3);
	ck_assert_uint_eq(atomic_load(&idle.runs), 0);
	ck_assert_uint_eq(host.kicks, 3);
}
END_TEST

START_TEST(test_a_wanted_poll_runs_the_service_without_a_kick)
{
	host_new();
	struct probe ticker = {.next_in = 5 * MS}, poll = {0};
	struct bg_service s0 = {.name = "ticker", .run = probe_run, .arg = &ticker};
	struct bg_service s1 = {.name = "poll",
				.run = probe_run,
				.arg = &poll,
				.wanted = probe_wanted,
				.first_due_ns = BG_NEVER};
	bg_host_add(&host, &s0);
	bg_host_add(&host, &s1);
	pthread_t t;
	pthread_create(&t, NULL, serve_main, NULL);
	ck_assert(wait_runs(&ticker, 2));
	ck_assert_uint_eq(atomic_load(&poll.runs), 0);
	/* Seen at the next wake-up (the ticker's), not kicked. */
	atomic_store(&poll.wanted, true);
	ck_assert(wait_runs(&poll, 1));
	leave_and_join(t);
	ck_assert_uint_eq(atomic_load(&poll.runs), 1);
	ck_assert_uint_eq(host.kicks, 0);
}
END_TEST

/* A service whose before_sleep refuses once: the host runs it instead of sleeping. */
static _Atomic unsigned refusals, sleeps_told, wakes_told;
static _Atomic uint64_t told_wake;

static bool refuse_once(void *arg)
{
	struct probe *p = arg;
	(void)p;
	return atomic_exchange(&refusals, 0) != 0;
}

static bool before_sleep(void *arg, uint64_t wake)
{
	atomic_fetch_add(&sleeps_told, 1);
	atomic_store(&told_wake, wake);
	return !refuse_once(arg);
}

static void after_sleep(void *arg)
{
	(void)arg;
	atomic_fetch_add(&wakes_told, 1);
}

START_TEST(test_before_sleep_refusal_runs_the_service_instead_of_sleeping)
{
	host_new();
	struct probe p = {0}, ticker = {.next_in = 30 * MS};
	struct bg_service s0 = {.name = "ticker", .run = probe_run, .arg = &ticker};
	struct bg_service s1 = {.name = "handshake",
				.run = probe_run,
				.arg = &p,
				.before_sleep = before_sleep,
				.after_sleep = after_sleep,
				.first_due_ns = BG_NEVER};
	bg_host_add(&host, &s0);
	bg_host_add(&host, &s1);
	atomic_store(&refusals, 1);
	pthread_t t;
	pthread_create(&t, NULL, serve_main, NULL);
	/* The first sleep is refused: the service runs though it was neither due, kicked
	 * nor wanted (its run counts), then the host sleeps until the ticker is due. */
	ck_assert(wait_runs(&p, 1));
	ck_assert(wait_runs(&ticker, 2));
	leave_and_join(t);
	ck_assert_uint_eq(atomic_load(&p.runs), 1);
	ck_assert_uint_ge(atomic_load(&sleeps_told), 2);
	/* Every time it was told of a sleep it was told of the wake-up (the refused one
	 * included); and the wake time told is the ticker's, not "never". */
	ck_assert_uint_ge(atomic_load(&wakes_told) + 1, atomic_load(&sleeps_told));
	ck_assert(atomic_load(&told_wake) != BG_NEVER);
}
END_TEST

START_TEST(test_services_run_in_table_order_and_one_at_a_time)
{
	host_new();
	struct probe p[4] = {0};
	struct bg_service s[4];
	for (int i = 0; i < 4; i++) {
		s[i] = (struct bg_service){.name = "p", .run = probe_run, .arg = &p[i]};
		bg_host_add(&host, &s[i]);
	}
	pthread_t t;
	pthread_create(&t, NULL, serve_main, NULL);
	ck_assert(wait_runs(&p[3], 1));
	/* All due at once: 0, 1, 2, 3. Kicked together (3 then 0): 0 first again. */
	for (int i = 0; i < 4; i++)
		ck_assert_uint_eq(atomic_load(&p[i].order[0]), i);
	pthread_mutex_lock(&lock);
	bg_host_kick_locked(&host, 3);
	bg_host_kick_locked(&host, 0);
	pthread_mutex_unlock(&lock);
	ck_assert(wait_runs(&p[3], 2));
	leave_and_join(t);
	ck_assert_uint_lt(atomic_load(&p[0].order[1]), atomic_load(&p[3].order[1]));
}
END_TEST

START_TEST(test_a_waiting_service_runs_only_nesting_services_of_its_mask)
{
	host_new();
	struct probe waiter = {0}, nests = {0}, solo = {0}, outside = {0};
	struct bg_service s0 = {
	    .name = "waiter", .run = probe_run, .arg = &waiter, .first_due_ns = BG_NEVER};
	struct bg_service s1 = {.name = "nests", .run = probe_run, .arg = &nests, .nests = true};
	struct bg_service s2 = {.name = "solo", .run = probe_run, .arg = &solo};
	struct bg_service s3 = {
	    .name = "outside", .run = probe_run, .arg = &outside, .nests = true};
	bg_host_add(&host, &s0);
	bg_host_add(&host, &s1);
	bg_host_add(&host, &s2);
	bg_host_add(&host, &s3);
	waiter.nest_mask = (1u << 0) | (1u << 1) | (1u << 2); /* not 3 */
	pthread_t t;
	pthread_create(&t, NULL, serve_main, NULL);
	ck_assert(wait_runs(&outside, 1)); /* the first turn: 1, 2, 3 once each */
	/* Everyone due again, then the waiter kicked: inside its run, only "nests". */
	pthread_mutex_lock(&lock);
	bg_host_kick_locked(&host, 1);
	bg_host_kick_locked(&host, 2);
	bg_host_kick_locked(&host, 3);
	bg_host_kick_locked(&host, 0);
	pthread_mutex_unlock(&lock);
	ck_assert(wait_runs(&outside, 2));
	leave_and_join(t);
	ck_assert_uint_eq(atomic_load(&waiter.runs), 1);
	/* "nests" ran nested, inside the waiter's run (the waiter runs first, table order):
	 * its second run's sequence number lies between the waiter's and "solo"'s. */
	ck_assert_uint_eq(atomic_load(&nests.runs), 2);
	ck_assert_uint_gt(atomic_load(&nests.order[1]), atomic_load(&waiter.order[0]));
	ck_assert_uint_gt(atomic_load(&solo.order[1]), atomic_load(&nests.order[1]));
	ck_assert_uint_gt(atomic_load(&outside.order[1]), atomic_load(&solo.order[1]));
}
END_TEST

START_TEST(test_leaving_stops_the_loop_and_nested_runs)
{
	host_new();
	struct probe p = {.next_in = 1 * MS};
	struct bg_service s0 = {.name = "p", .run = probe_run, .arg = &p, .nests = true};
	bg_host_add(&host, &s0);
	pthread_mutex_lock(&lock);
	bg_host_leave_locked(&host, false);
	bg_host_serve(&host); /* returns at once: leaving */
	pthread_mutex_unlock(&lock);
	ck_assert_uint_eq(atomic_load(&p.runs), 0);
	bg_host_run_nested(&host, ~0u);
	ck_assert_uint_eq(atomic_load(&p.runs), 0);
	bg_host_run_nested(NULL, ~0u); /* no host: nothing, no crash */
	/* Reset (a fork child): serving again sets the clock again and runs. */
	bg_host_reset(&host);
	pthread_t t;
	pthread_create(&t, NULL, serve_main, NULL);
	ck_assert(wait_runs(&p, 3));
	leave_and_join(t);
}
END_TEST

/* A signal handler, which may take no lock, makes a host that sleeps with nothing due
 * leave at once (bg_host_leave_async: a process dying of a signal asks its thread for
 * the final profile so). */
static void leave_from_handler(int sig)
{
	(void)sig;
	bg_host_leave_async(&host);
}

static _Atomic bool served_out;
static void *serve_then_mark(void *arg)
{
	serve_main(arg);
	atomic_store(&served_out, true);
	return NULL;
}

START_TEST(test_a_signal_handler_makes_the_sleeping_host_leave_at_once)
{
	host_new();
	struct probe p = {.next_in = 0}; /* BG_NEVER after its first run: the host sleeps */
	struct bg_service s0 = {.name = "p", .run = probe_run, .arg = &p};
	bg_host_add(&host, &s0);
	atomic_store(&served_out, false);
	pthread_t t;
	pthread_create(&t, NULL, serve_then_mark, NULL);
	ck_assert(wait_runs(&p, 1));
	usleep(20000); /* asleep, with no due time */
	ck_assert(!atomic_load(&served_out));
	struct sigaction sa = {.sa_handler = leave_from_handler};
	ck_assert_int_eq(sigaction(SIGUSR2, &sa, NULL), 0);
	uint64_t t0 = mono_ns();
	raise(SIGUSR2);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_msg(mono_ns() - t0 < 500 * MS, "the host left %.0f ms after the signal",
		      (double)(mono_ns() - t0) / MS);
	ck_assert_uint_eq(atomic_load(&p.runs), 1);
	/* A reset host (a fork child) serves again. */
	bg_host_reset(&host);
	pthread_create(&t, NULL, serve_main, NULL);
	ck_assert(wait_runs(&p, 2));
	leave_and_join(t);
	signal(SIGUSR2, SIG_DFL);
}
END_TEST

static _Atomic unsigned starts;
static void count_start(void)
{
	atomic_fetch_add(&starts, 1);
}

static void *try_kick_main(void *arg)
{
	(void)arg;
	return (void *)(uintptr_t)bg_host_try_kick(&host, 0);
}

START_TEST(test_a_kick_never_waits_for_a_busy_lock_and_a_wake_starts_the_owner)
{
	host_new();
	struct probe p = {0};
	struct bg_service s0 = {.name = "p", .run = probe_run, .arg = &p, .first_due_ns = BG_NEVER};
	bg_host_add(&host, &s0);
	host.start = count_start;
	/* The lock held (a fork prepare handler holds it): dropped and counted. */
	pthread_mutex_lock(&lock);
	pthread_t t;
	pthread_create(&t, NULL, try_kick_main, NULL);
	void *ok;
	pthread_join(t, &ok);
	pthread_mutex_unlock(&lock);
	ck_assert(!ok);
	ck_assert_uint_eq(atomic_load(&host.kicks_lost), 1);
	ck_assert_uint_eq(host.kicks, 0);
	ck_assert(bg_host_try_kick(&host, 0));
	ck_assert_uint_eq(host.kicks, 1);
	/* A wake: the owner's start only when asked, and the hosting answer as set. */
	ck_assert(!bg_host_wake(&host, 0, false));
	ck_assert_uint_eq(atomic_load(&starts), 0);
	atomic_store(&host.hosting, true);
	ck_assert(bg_host_wake(&host, 0, true));
	ck_assert_uint_eq(atomic_load(&starts), 1);
	ck_assert_uint_eq(host.kicks, 3);
	/* Ids past the table are ignored; a full table refuses more. */
	bg_host_kick(&host, 7);
	ck_assert_uint_eq(host.kicks, 3);
	for (int i = 1; i < BG_HOST_SERVICES_MAX; i++)
		ck_assert_int_eq(bg_host_add(&host, &s0), i);
	ck_assert_int_eq(bg_host_add(&host, &s0), -1);
}
END_TEST

/* Kickers publish work then kick; the service takes all the work there is. Every unit
 * of work must be taken, each kick sooner or later followed by a run (no lost
 * wake-up), and the host never runs the service twice at once. */
#define KICKERS 6
#define KICKS_EACH 20000
static _Atomic uint64_t work_posted, work_taken;
static _Atomic int in_run;
static _Atomic bool overlapped;

static uint64_t take_work(void *arg, uint64_t now)
{
	(void)arg;
	(void)now;
	if (atomic_fetch_add(&in_run, 1) != 0)
		atomic_store(&overlapped, true);
	uint64_t posted = atomic_load(&work_posted);
	atomic_store(&work_taken, posted);
	atomic_fetch_sub(&in_run, 1);
	return BG_NEVER;
}

static void *kicker_main(void *arg)
{
	(void)arg;
	for (int i = 0; i < KICKS_EACH; i++) {
		atomic_fetch_add(&work_posted, 1);
		bg_host_kick(&host, 0);
		if ((i & 1023) == 0)
			bg_host_run_nested(&host, ~0u); /* any thread: still one run at a time */
	}
	return NULL;
}

START_TEST(test_no_kick_is_lost_under_many_kicking_threads)
{
	host_new();
	struct bg_service s0 = {
	    .name = "work", .run = take_work, .first_due_ns = BG_NEVER, .nests = true};
	bg_host_add(&host, &s0);
	pthread_t t, k[KICKERS];
	pthread_create(&t, NULL, serve_main, NULL);
	for (int i = 0; i < KICKERS; i++)
		pthread_create(&k[i], NULL, kicker_main, NULL);
	for (int i = 0; i < KICKERS; i++)
		pthread_join(k[i], NULL);
	uint64_t give_up = mono_ns() + 10000 * MS;
	while (atomic_load(&work_taken) != (uint64_t)KICKERS * KICKS_EACH && mono_ns() < give_up)
		usleep(500);
	leave_and_join(t);
	ck_assert_uint_eq(atomic_load(&work_taken), (uint64_t)KICKERS * KICKS_EACH);
	ck_assert(!atomic_load(&overlapped));
	ck_assert_uint_eq(host.kicks, (uint64_t)KICKERS * KICKS_EACH);
	ck_assert_uint_ge(thr.runs[0], 1);
}
END_TEST

static Suite *bg_host_suite(void)
{
	Suite *s = suite_create("bg_host");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_services_run_when_due_and_again_at_the_time_they_return);
	tcase_add_test(tc, test_a_kick_wakes_the_sleeping_host_and_runs_that_service);
	tcase_add_test(tc, test_a_wanted_poll_runs_the_service_without_a_kick);
	tcase_add_test(tc, test_before_sleep_refusal_runs_the_service_instead_of_sleeping);
	tcase_add_test(tc, test_services_run_in_table_order_and_one_at_a_time);
	tcase_add_test(tc, test_a_waiting_service_runs_only_nesting_services_of_its_mask);
	tcase_add_test(tc, test_leaving_stops_the_loop_and_nested_runs);
	tcase_add_test(tc, test_a_signal_handler_makes_the_sleeping_host_leave_at_once);
	tcase_add_test(tc, test_a_kick_never_waits_for_a_busy_lock_and_a_wake_starts_the_owner);
	tcase_add_test(tc, test_no_kick_is_lost_under_many_kicking_threads);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(bg_host_suite());
}
