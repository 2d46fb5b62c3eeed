/*
 * test_syscall_wrappers.c - libc's plain system-call wrappers found in memory
 * (agent/syscall_wrappers.c): the listed ones are found from libc's dynamic symbols,
 * the instruction after their syscall is recognised, and nothing else is: another
 * offset in the same wrapper, a system call of a function not listed (getppid), a
 * module without a dynamic section.
 */
#include <check.h>
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "agent/syscall_wrappers.h"
#include "check_run.h"

static int init_from_libc(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	if (!info->dlpi_name || !strstr(info->dlpi_name, "libc.so"))
		return 0;
	*(int *)arg = syscall_wrappers_init(info);
	return 1;
}

/* The address right after the first syscall instruction in libc's function name, or 0. */
static uintptr_t after_syscall_in(const char *name)
{
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	ck_assert_ptr_nonnull(libc);
	void *fn = dlsym(libc, name);
	ck_assert_ptr_nonnull(fn);
	Dl_info di;
	const ElfW(Sym) *sym = NULL;
	ck_assert(dladdr1(fn, &di, (void **)&sym, RTLD_DL_SYMENT) && sym);
	const uint8_t *p = fn;
	for (size_t i = 0; i + 1 < sym->st_size; i++)
		if (p[i] == 0x0f && p[i + 1] == 0x05)
			return (uintptr_t)fn + i + 2;
	return 0;
}

START_TEST(listed_wrappers_are_recognised_after_their_call)
{
	int found = -1;
	dl_iterate_phdr(init_from_libc, &found);
	/* read, write, poll, recv... and their aliases: most of the list in any glibc. */
	ck_assert_int_ge(found, 20);
	static const char *const listed[] = {"read", "write", "pread64", "writev", "poll",
					     "recvfrom", "sendto", "epoll_wait", "close"};
	for (size_t i = 0; i < sizeof(listed) / sizeof(listed[0]); i++) {
		uintptr_t pc = after_syscall_in(listed[i]);
		ck_assert_msg(pc != 0, "no syscall instruction in %s", listed[i]);
		ck_assert_msg(syscall_wrappers_after_call(pc), "%s not recognised", listed[i]);
		ck_assert(!syscall_wrappers_after_call(pc - 1));
		ck_assert(!syscall_wrappers_after_call(pc + 1));
	}
	uintptr_t other = after_syscall_in("getppid");
	ck_assert(other != 0);
	ck_assert(!syscall_wrappers_after_call(other));
	ck_assert(!syscall_wrappers_after_call((uintptr_t)after_syscall_in));
	ck_assert(!syscall_wrappers_after_call(0));
}
END_TEST

START_TEST(a_module_without_dynamic_symbols_gives_none)
{
	int found = -1;
	dl_iterate_phdr(init_from_libc, &found);
	ck_assert_int_gt(found, 0);
	ck_assert(syscall_wrappers_after_call(after_syscall_in("read")));
	/* Then only a PT_LOAD over this test's own code: no PT_DYNAMIC to read. */
	ElfW(Phdr) ph;
	memset(&ph, 0, sizeof(ph));
	ph.p_type = PT_LOAD;
	ph.p_vaddr = (uintptr_t)after_syscall_in & ~(uintptr_t)4095;
	ph.p_memsz = 4096;
	struct dl_phdr_info info;
	memset(&info, 0, sizeof(info));
	info.dlpi_name = "libc.so.6";
	info.dlpi_phdr = &ph;
	info.dlpi_phnum = 1;
	ck_assert_int_eq(syscall_wrappers_init(&info), 0);
	ck_assert(!syscall_wrappers_after_call(after_syscall_in("read")));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("syscall_wrappers");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, listed_wrappers_are_recognised_after_their_call);
	tcase_add_test(tc, a_module_without_dynamic_symbols_gives_none);
	suite_add_tcase(s, tc);
	return check_run_suite(s);
}
