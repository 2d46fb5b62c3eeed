/*
 * config_values.c - the syntax of configuration values (see config_values.h).
 * Context: normal context (the constructor, tests, the fuzz target).
 */
#include "common/config_values.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Parses a plain decimal integer: at least one digit, no sign, space or base prefix.
 * *end is left after the digits. False if there is no digit or it overflows. */
bool config_parse_u64(const char *s, uint64_t *out, char **end)
{
	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, end, 10);
	if (errno == ERANGE)
		return false;
	*out = v;
	return true;
}

/* "60", "0.5", "1.25", ".5" seconds to nanoseconds, exactly and without the locale's
 * decimal point. Digits past the nanosecond are ignored. Rejects signs, exponents, nan,
 * inf and anything above CONFIG_MAX_SECONDS. */
bool config_parse_seconds(const char *s, uint64_t *ns)
{
	uint64_t whole = 0, frac = 0, scale = 1000000000ULL;
	bool digits = false;
	for (; *s >= '0' && *s <= '9'; s++, digits = true) {
		whole = whole * 10 + (uint64_t)(*s - '0');
		if (whole > CONFIG_MAX_SECONDS)
			return false;
	}
	if (*s == '.') {
		for (s++; *s >= '0' && *s <= '9'; s++, digits = true) {
			scale /= 10;
			frac += scale * (uint64_t)(*s - '0');
		}
	}
	if (!digits || *s)
		return false;
	*ns = whole * 1000000000ULL + frac;
	return *ns <= CONFIG_MAX_SECONDS * 1000000000ULL;
}

/* An integer with an optional suffix K, M or G, alone or followed by B or iB, any case.
 * All suffixes are powers of 1024 (KB == KiB). */
bool config_parse_size(const char *s, uint64_t *bytes)
{
	static const char prefixes[] = "KMG"; /* 1024^1, 1024^2, 1024^3 */
	uint64_t v, mult = 1;
	char *end;
	if (!config_parse_u64(s, &v, &end))
		return false;
	if (*end) {
		const char *p = memchr(prefixes, toupper((unsigned char)*end), strlen(prefixes));
		if (!p || (end[1] && strcasecmp(end + 1, "B") && strcasecmp(end + 1, "iB")))
			return false;
		mult = 1ULL << (10 * (p - prefixes + 1));
	}
	if (v > UINT64_MAX / mult)
		return false;
	*bytes = v * mult;
	return true;
}

/* Bytes in the largest binary unit that divides them exactly, "64MiB". */
const char *config_fmt_size(char buf[CONFIG_NUM_BUF], uint64_t bytes)
{
	static const char *const names[] = {"", "KiB", "MiB", "GiB"};
	size_t i = 0;
	while (i + 1 < sizeof(names) / sizeof(names[0]) && bytes && bytes % 1024 == 0) {
		bytes /= 1024;
		i++;
	}
	snprintf(buf, CONFIG_NUM_BUF, "%llu%s", (unsigned long long)bytes, names[i]);
	return buf;
}

static const struct {
	const char *name; /* without the "SIG" prefix */
	int signo;
} signames[] = {
    {"HUP", SIGHUP},	   {"INT", SIGINT},	  {"QUIT", SIGQUIT}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP},	   {"ABRT", SIGABRT},	  {"IOT", SIGIOT},   {"BUS", SIGBUS},
    {"FPE", SIGFPE},	   {"KILL", SIGKILL},	  {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},	   {"PIPE", SIGPIPE},	  {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"CHLD", SIGCHLD},	   {"CONT", SIGCONT},	  {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},
    {"TTIN", SIGTTIN},	   {"TTOU", SIGTTOU},	  {"URG", SIGURG},   {"XCPU", SIGXCPU},
    {"XFSZ", SIGXFSZ},	   {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    {"IO", SIGIO},	   {"POLL", SIGPOLL},	  {"SYS", SIGSYS},
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
#ifdef SIGPWR
    {"PWR", SIGPWR},
#endif
};
#define N_SIGNAMES (sizeof(signames) / sizeof(signames[0]))

/* "" -> base, "+n" (dir 1) or "-n" (dir -1) -> base +/- n; -1 if outside the RT range. */
static int parse_rt_offset(const char *s, int base, int dir)
{
	uint64_t n;
	char *end;
	if (*s == '\0')
		return base;
	if (*s != (dir > 0 ? '+' : '-') || !config_parse_u64(s + 1, &n, &end) || *end ||
	    n > (uint64_t)(SIGRTMAX - SIGRTMIN))
		return -1;
	return base + dir * (int)n;
}

/* A number 0..SIGRTMAX or a name (SIG prefix optional, any case): signo, or -1. */
int config_parse_signal(const char *s)
{
	uint64_t n;
	char *end;
	if (config_parse_u64(s, &n, &end))
		return *end == '\0' && n <= (uint64_t)SIGRTMAX ? (int)n : -1;
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	if (strncasecmp(s, "RTMIN", 5) == 0)
		return parse_rt_offset(s + 5, SIGRTMIN, 1);
	if (strncasecmp(s, "RTMAX", 5) == 0)
		return parse_rt_offset(s + 5, SIGRTMAX, -1);
	for (size_t i = 0; i < N_SIGNAMES; i++) {
		if (strcasecmp(s, signames[i].name) == 0)
			return signames[i].signo;
	}
	return -1;
}

/*
 * The signals the profiler may sample with: SIGPROF, which exists for profiling, and the
 * real-time signals glibc leaves to applications (SIGRTMIN..SIGRTMAX; SIGRTMIN is read
 * at run time: glibc keeps the kernel's first two or three for its threads and setxid).
 * Every other signal means something to the program or the kernel: a fault (SEGV, BUS,
 * FPE, ILL, TRAP, and SYS from seccomp), a request to end, stop or resume it (INT,
 * TERM, HUP, QUIT, ABRT, KILL, STOP, TSTP, TTIN, TTOU, CONT, PIPE, XCPU, XFSZ), news it
 * may wait for (CHLD, WINCH, URG, IO, PWR), or a signal it may arm or handle itself,
 * after our constructor ran (ALRM, VTALRM, USR1, USR2, STKFLT): taking one would hide
 * crashes, or run the program's own handler at every sample.
 */
bool config_signal_allowed(int signo)
{
	return signo == SIGPROF || (signo >= SIGRTMIN && signo <= SIGRTMAX);
}
