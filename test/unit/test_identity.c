/*
 * test_identity.c - unit tests of common/identity.c: whether the process still runs as
 * the user and group it started as.
 */
#include "common/identity.h"

#include <check.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/unit/check_run.h"

START_TEST(test_unchanged_until_noted_and_while_the_same)
{
	ck_assert(!identity_changed()); /* nothing noted: no change to report */
	identity_note_start();
	ck_assert(!identity_changed());
}
END_TEST

/* A child that switches its effective group, then its user (as root can): changed; one
 * that switches back: unchanged. Without root, a switch to another id is refused and
 * the test says so. */
START_TEST(test_a_switch_of_user_or_group_is_a_change)
{
	if (geteuid() != 0)
		return; /* needs root: make check runs as root in CI */
	identity_note_start();
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int bad = 0;
		if (setegid(65534) != 0)
			_exit(9);
		bad |= identity_changed() ? 0 : 1;
		if (setegid(0) != 0)
			_exit(9);
		bad |= identity_changed() ? 2 : 0;
		if (seteuid(65534) != 0)
			_exit(9);
		bad |= identity_changed() ? 0 : 4;
		_exit(bad);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "status 0x%x (bits: 1 group switch unseen, 2 switch back seen, 4 user "
		      "switch unseen, 9 switch refused)",
		      st);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("identity");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_unchanged_until_noted_and_while_the_same);
	tcase_add_test(tc, test_a_switch_of_user_or_group_is_a_change);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
