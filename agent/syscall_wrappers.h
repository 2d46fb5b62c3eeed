/*
 * syscall_wrappers.h - where libc's plain system-call wrappers lie in memory: the I/O
 * calls (read, write, poll, recv, send...) whose body is the system call itself, with
 * no lock taken and no state updated after it.
 *
 * Why: a single-threaded program whose CPU goes to system calls is sampled as the calls
 * return, in libc (agent/hijack.h): the instruction after the syscall of one of these
 * wrappers, called straight from the program, is a safe point. An allowlist rather than
 * "any libc function": functions such as brk (which updates __curbrk after its call) or
 * abort (which holds its own lock around one) are no safe point, in any glibc version.
 *
 * Found at start-up in libc's dynamic symbol table as the loader mapped it (GNU hash
 * lookups, plain reads of memory: no malloc, no file). libc is never unloaded.
 * Context: syscall_wrappers_init in the constructor; syscall_wrappers_holds from the
 * signal handler (async-signal-safe).
 */
#ifndef DDPROF_AGENT_SYSCALL_WRAPPERS_H
#define DDPROF_AGENT_SYSCALL_WRAPPERS_H

#include <link.h>
#include <stdbool.h>
#include <stdint.h>

/* Normal context: records the wrappers of libc, the module info describes (from
 * dl_iterate_phdr). Returns how many were found (0: none, no exception). */
int syscall_wrappers_init(const struct dl_phdr_info *info);

/* async-signal-safe. pc follows a syscall instruction inside one of the wrappers. */
bool syscall_wrappers_after_call(uintptr_t pc);

#endif
