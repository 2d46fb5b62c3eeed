/*
 * test_agent_snapshot.c - the seam between the agent and the exporters
 * (agent/agent_snapshot.c), on a running agent (agent/agent.h).
 *
 * What the uploader relies on: a snapshot holds what was recorded before it and
 * nothing recorded after (those samples go to the next one); releasing it resets the
 * profile; the threads' names are the ones at the swap, and renaming a thread afterwards
 * changes nothing in it; a thread that ended before the swap keeps its name in that
 * snapshot and is forgotten once it is released; the start-up CPU appears in the first
 * snapshot only; the kinds are the ones the process records, CPU always.
 * Each test runs in a process of its own (Check's fork mode): the agent is per process.
 */
#include "agent/agent_snapshot.h"

#include <check.h>
#include <pthread.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "check_run.h"
#include "common/config.h"

static struct profile_pair *start_agent(unsigned hz)
{
	struct config cfg;
	config_defaults(&cfg);
	cfg.cpu_hz = hz;
	ck_assert_int_gt(agent_init(&cfg), 0);
	agent_start();
	return agent_profiles();
}

static const char *name_of(const struct thread_names *n, pid_t tid)
{
	const char *name = thread_names_find(n, tid);
	return name ? name : "";
}

static pid_t my_tid(void)
{
	return (pid_t)gettid();
}

static void record(struct profile_pair *pp, pid_t tid, uintptr_t pc, uint64_t n)
{
	uintptr_t pcs[] = {pc};
	for (uint64_t i = 0; i < n; i++)
		profiles_record(pp, tid, pcs, 1, 1000);
}

START_TEST(test_a_snapshot_holds_what_came_before_it_and_release_resets)
{
	struct profile_pair *pp = start_agent(1);
	record(pp, my_tid(), 0x1000, 7);
	struct agent_snapshot s;
	ck_assert(agent_snapshot_take(pp, 5000, &s));
	ck_assert_uint_eq(s.samples, 7);
	ck_assert_uint_eq(s.end_ns, 5000);
	ck_assert_uint_eq(profiles_total(s.profile, PROFILE_CPU, 1), 7000);
	/* After the swap: the next snapshot's, not this one's. */
	record(pp, my_tid(), 0x2000, 3);
	ck_assert_uint_eq(profiles_samples(s.profile), 7);
	agent_snapshot_release(&s);
	ck_assert(agent_snapshot_take(pp, 9000, &s));
	ck_assert_uint_eq(s.samples, 3);
	ck_assert_uint_eq(s.start_ns, 5000); /* it began at the previous swap */
	agent_snapshot_release(&s);
	/* Released: reset. Nothing since: nothing to encode. */
	ck_assert(!agent_snapshot_take(pp, 12000, &s));
	ck_assert_uint_eq(s.samples, 0);
	agent_snapshot_release(&s);
}
END_TEST

START_TEST(test_names_are_the_ones_at_the_swap)
{
	struct profile_pair *pp = start_agent(1);
	prctl(PR_SET_NAME, "before-swap", 0, 0, 0);
	record(pp, my_tid(), 0x1000, 1);
	struct agent_snapshot s;
	ck_assert(agent_snapshot_take(pp, 5000, &s));
	prctl(PR_SET_NAME, "after-swap", 0, 0, 0);
	ck_assert_str_eq(name_of(&s.names, my_tid()), "before-swap");
	agent_snapshot_release(&s);
	record(pp, my_tid(), 0x1000, 1);
	ck_assert(agent_snapshot_take(pp, 9000, &s));
	ck_assert_str_eq(name_of(&s.names, my_tid()), "after-swap");
	agent_snapshot_release(&s);
}
END_TEST

/* A thread that is sampled (1 kHz, 40 ms of CPU) and ends. */
static void *burner(void *arg)
{
	struct thread_start start;
	agent_thread_begin(arg, &start);
	prctl(PR_SET_NAME, "short-lived", 0, 0, 0);
	*(pid_t *)start.arg = my_tid();
	struct timespec t0, t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
	do {
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 40000000L);
	agent_thread_end(NULL);
	return NULL;
}

static void *unused_fn(void *arg)
{
	return arg;
}

START_TEST(test_an_ended_thread_is_named_in_the_next_snapshot_then_forgotten)
{
	struct profile_pair *pp = start_agent(1000);
	pid_t tid = 0;
	struct thread_start *st = agent_thread_new(unused_fn, &tid, NULL);
	ck_assert_ptr_nonnull(st);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, burner, st), 0);
	pthread_join(t, NULL);
	ck_assert_int_gt(tid, 0);
	struct agent_snapshot s;
	ck_assert(agent_snapshot_take(pp, 5000, &s));
	ck_assert_msg(strcmp(name_of(&s.names, tid), "short-lived") == 0,
		      "the ended thread %d is named \"%s\" in the snapshot", (int)tid,
		      name_of(&s.names, tid));
	agent_snapshot_release(&s);
	record(pp, my_tid(), 0x1000, 1);
	ck_assert(agent_snapshot_take(pp, 9000, &s));
	ck_assert_str_eq(name_of(&s.names, tid), "");
	agent_snapshot_release(&s);
}
END_TEST

START_TEST(test_startup_cpu_is_in_the_first_snapshot_only_and_kinds_hold_cpu)
{
	struct profile_pair *pp = start_agent(1);
	profiles_note_startup(pp, my_tid(), 123456);
	record(pp, my_tid(), 0x1000, 1);
	struct agent_snapshot s;
	ck_assert(agent_snapshot_take(pp, 5000, &s));
	ck_assert_uint_eq(s.startup_cpu_ns, 123456);
	ck_assert_int_eq(s.startup_tid, my_tid());
	ck_assert_uint_eq(s.kinds, PROFILE_KIND_BIT(PROFILE_CPU));
	agent_snapshot_release(&s);
	agent_snapshot_set_kinds(PROFILE_KIND_BIT(PROFILE_ALLOC));
	record(pp, my_tid(), 0x1000, 1);
	ck_assert(agent_snapshot_take(pp, 9000, &s));
	ck_assert_uint_eq(s.startup_cpu_ns, 0);
	ck_assert_uint_eq(s.kinds, PROFILE_KIND_BIT(PROFILE_CPU) | PROFILE_KIND_BIT(PROFILE_ALLOC));
	agent_snapshot_release(&s);
}
END_TEST

static Suite *snapshot_suite(void)
{
	Suite *s = suite_create("agent_snapshot");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_a_snapshot_holds_what_came_before_it_and_release_resets);
	tcase_add_test(tc, test_names_are_the_ones_at_the_swap);
	tcase_add_test(tc, test_an_ended_thread_is_named_in_the_next_snapshot_then_forgotten);
	tcase_add_test(tc, test_startup_cpu_is_in_the_first_snapshot_only_and_kinds_hold_cpu);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(snapshot_suite());
}
