/*
 * process_start.c - when the process started, in CLOCK_REALTIME (see process_start.h).
 *
 * Context: normal context, any thread (the uploader's); never a signal handler.
 */
#include "common/process_start.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/sys_io.h"

/* CLOCK_REALTIME when the process started, from its start time in /proc/self/stat (in
 * clock ticks of the boot-time clock): 0 when unknown. For a fork child's first
 * profile, whose start the fork handler leaves at 0 (agent_atfork_child). */
uint64_t process_start_realtime_ns(void)
{
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = sys_read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* Field 22; the fields after the comm's closing parenthesis hold no spaces. */
	const char *s = strrchr(buf, ')');
	for (int field = 2; s && field < 22; field++)
		s = strchr(s + 1, ' ');
	long hz = sysconf(_SC_CLK_TCK);
	if (!s || hz <= 0)
		return 0;
	uint64_t start_boot = strtoull(s + 1, NULL, 10) * (NS_PER_SEC / (uint64_t)hz);
	uint64_t now_boot = clock_now_ns(CLOCK_BOOTTIME);
	uint64_t now_rt = clock_now_ns(CLOCK_REALTIME);
	if (start_boot > now_boot || now_boot - start_boot > now_rt)
		return 0;
	return now_rt - (now_boot - start_boot);
}
