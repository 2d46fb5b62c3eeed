/*
 * test_elf_image.c - unit tests of agent/unwind/elf_image.c: ELF headers and sections
 * without libelf.
 *
 * Against libelf on real files (libc, ld.so, this test program): every section's
 * name lookup, offset, size, address, type, link and flags agree, and the load base is
 * the lowest PT_LOAD page. Then hostile input: every truncation of a real header area
 * and 20k random byte mutations of the headers only ever hand out sections inside the
 * bytes (asserted, and every page of each is read), and non-ELF, ELF32 and
 * wrong-machine files are refused, as are header tables at misaligned offsets.
 */
#include "agent/unwind/elf_image.h"

#include <check.h>

#include "test/unit/check_run.h"
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *const files[] = {"/lib/x86_64-linux-gnu/libc.so.6",
				    "/lib64/ld-linux-x86-64.so.2", "/proc/self/exe"};

static void compare_with_libelf(const char *path)
{
	struct elf_image im;
	ck_assert_int_eq(elf_image_open(&im, path), 0);
	ck_assert_int_eq(elf_image_check(&im, EM_X86_64), 0);
	elf_version(EV_CURRENT);
	int fd = open(path, O_RDONLY);
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);
	ck_assert_ptr_nonnull(e);
	size_t shnum, strndx;
	ck_assert_int_eq(elf_getshdrnum(e, &shnum), 0);
	ck_assert_int_eq(elf_getshdrstrndx(e, &strndx), 0);
	ck_assert_uint_eq(elf_image_nsections(&im), shnum);
	size_t checked = 0;
	for (size_t i = 1; i < shnum; i++) {
		GElf_Shdr sh;
		ck_assert_ptr_nonnull(gelf_getshdr(elf_getscn(e, i), &sh));
		const char *name = elf_strptr(e, strndx, sh.sh_name);
		struct elf_section a, b;
		bool got = elf_image_section_at(&im, i, &a);
		ck_assert_msg(got == (sh.sh_type != SHT_NOBITS), "%s section %zu", path, i);
		if (!got)
			continue;
		ck_assert_uint_eq(a.data - im.data, sh.sh_offset);
		ck_assert_uint_eq(a.len, sh.sh_size);
		ck_assert_uint_eq(a.vaddr, sh.sh_addr);
		ck_assert_uint_eq(a.type, sh.sh_type);
		ck_assert_uint_eq(a.flags, sh.sh_flags);
		ck_assert_uint_eq(a.link, sh.sh_link);
		ck_assert_uint_eq(a.entsize, sh.sh_entsize);
		/* Lookup by name finds the first section of that name and type. */
		ck_assert(elf_image_section(&im, name, sh.sh_type, &b));
		size_t first = 1;
		for (; first < i; first++) {
			GElf_Shdr o;
			gelf_getshdr(elf_getscn(e, first), &o);
			if (o.sh_type == sh.sh_type &&
			    !strcmp(elf_strptr(e, strndx, o.sh_name), name))
				break;
		}
		if (first == i)
			ck_assert_ptr_eq(b.data, a.data);
		checked++;
	}
	ck_assert_uint_gt(checked, 10);
	size_t nph;
	ck_assert_int_eq(elf_getphdrnum(e, &nph), 0);
	uint64_t base = UINT64_MAX;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;
		gelf_getphdr(e, (int)i, &ph);
		if (ph.p_type == PT_LOAD && ph.p_vaddr < base)
			base = ph.p_vaddr & ~(uint64_t)0xfff;
	}
	ck_assert_uint_eq(elf_image_load_base(&im), base);
	struct elf_section none;
	ck_assert(!elf_image_section(&im, ".no-such-section", 0, &none));
	elf_end(e);
	close(fd);
	elf_image_close(&im);
}

START_TEST(test_sections_agree_with_libelf)
{
	compare_with_libelf(files[_i]);
}
END_TEST

START_TEST(test_non_elf_elf32_and_other_machines_are_refused)
{
	struct elf_image im;
	ck_assert_int_eq(elf_image_open(&im, "/etc/passwd"), 0);
	ck_assert_int_lt(elf_image_check(&im, EM_X86_64), 0);
	elf_image_close(&im);
	ck_assert_int_lt(elf_image_open(&im, "/nonexistent/file"), 0);
	ck_assert_int_lt(elf_image_open(&im, "/tmp"), 0); /* not a regular file */
	ck_assert_int_eq(elf_image_open(&im, files[0]), 0);
	ck_assert_int_lt(elf_image_check(&im, EM_AARCH64), 0);
	uint8_t *copy = malloc(im.len);
	memcpy(copy, im.data, im.len);
	copy[EI_CLASS] = ELFCLASS32;
	struct elf_image m;
	elf_image_memory(&m, copy, im.len);
	ck_assert_int_lt(elf_image_check(&m, EM_X86_64), 0);
	free(copy);
	elf_image_close(&im);
}
END_TEST

/* Reads every section the image claims, touching each byte: out of bounds would be a
 * crash (or an ASan report when run under it). */
static size_t touch_all(const struct elf_image *im)
{
	if (elf_image_check(im, EM_X86_64) < 0)
		return 0;
	size_t sum = 0, n = elf_image_nsections(im);
	for (size_t i = 0; i < n; i++) {
		struct elf_section s;
		if (!elf_image_section_at(im, i, &s))
			continue;
		ck_assert(s.data >= im->data && s.len <= im->len &&
			  (size_t)(s.data - im->data) <= im->len - s.len);
		for (size_t k = 0; k < s.len; k += 4096)
			sum += s.data[k];
	}
	struct elf_section s;
	elf_image_section(im, ".eh_frame", SHT_PROGBITS, &s);
	elf_image_load_base(im);
	return sum;
}

START_TEST(test_truncated_and_mutated_headers_stay_in_bounds)
{
	struct elf_image im;
	ck_assert_int_eq(elf_image_open(&im, files[2]), 0);
	size_t len = im.len;
	uint8_t *buf = malloc(len);
	/* Truncations: the section table (at the end of the file) is cut off. */
	for (size_t cut = 0; cut <= len; cut += len / 97 + 1) {
		memcpy(buf, im.data, cut);
		struct elf_image t;
		elf_image_memory(&t, buf, cut);
		touch_all(&t);
	}
	/* Mutations of the ELF header, the program headers and the section headers. */
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)im.data;
	size_t shoff = eh->e_shoff, shlen = (size_t)eh->e_shnum * sizeof(Elf64_Shdr);
	srand(7);
	for (int round = 0; round < 20000; round++) {
		memcpy(buf, im.data, len);
		for (int k = 0; k < 4; k++) {
			size_t at = rand() % 3 == 0 ? (size_t)rand() % sizeof(Elf64_Ehdr)
						    : shoff + (size_t)rand() % shlen;
			buf[at] = (uint8_t)rand();
		}
		struct elf_image t;
		elf_image_memory(&t, buf, len);
		touch_all(&t);
	}
	free(buf);
	elf_image_close(&im);
}
END_TEST

/* Header tables at offsets a struct cannot be read from (found by UBSan in the mutation
 * test above): refused, not read through a misaligned pointer. */
START_TEST(test_misaligned_header_tables_are_refused)
{
	struct elf_image im;
	ck_assert_int_eq(elf_image_open(&im, files[2]), 0);
	size_t len = im.len;
	uint64_t *words = malloc(len + 8); /* 8-aligned, as a mapping or malloc gives */
	uint8_t *buf = (uint8_t *)words;
	memcpy(buf, im.data, len);
	Elf64_Ehdr *eh = (Elf64_Ehdr *)buf;
	ck_assert_uint_gt(eh->e_phnum, 0);
	ck_assert_uint_gt(elf_image_nsections(&im), 0);
	struct elf_image t;
	eh->e_phoff += 1;
	elf_image_memory(&t, buf, len);
	ck_assert_msg(elf_image_check(&t, EM_X86_64) == -EINVAL,
		      "program headers at an odd offset: expected -EINVAL, got %d",
		      elf_image_check(&t, EM_X86_64));
	eh->e_phoff -= 1;
	eh->e_shoff += 4;
	ck_assert_int_eq(elf_image_check(&t, EM_X86_64), 0);
	ck_assert_msg(elf_image_nsections(&t) == 0,
		      "section headers at offset 4 mod 8: expected no sections, got %zu",
		      elf_image_nsections(&t));
	eh->e_shoff -= 4;
	ck_assert_uint_eq(elf_image_nsections(&t), elf_image_nsections(&im));
	/* The image itself at an odd address. */
	memmove(buf + 1, buf, len);
	elf_image_memory(&t, buf + 1, len);
	ck_assert_int_eq(elf_image_check(&t, EM_X86_64), -EINVAL);
	free(words);
	elf_image_close(&im);
}
END_TEST

/* No program headers: whatever e_phoff says is not used, not even to compute a pointer
 * (found by test/fuzz/fuzz_elf_cfi.c: data + e_phoff overflowed, undefined behaviour
 * that UBSan reports in the ASan build of this suite). */
START_TEST(test_no_program_headers_whatever_their_offset)
{
	struct elf_image im;
	ck_assert_int_eq(elf_image_open(&im, files[2]), 0);
	uint64_t *words = malloc(im.len + 8);
	memcpy(words, im.data, im.len);
	Elf64_Ehdr *eh = (Elf64_Ehdr *)words;
	eh->e_phnum = 0;
	eh->e_phoff = UINT64_MAX - 0xfff; /* far past the image, and past the address space */
	struct elf_image t;
	elf_image_memory(&t, words, im.len);
	ck_assert_int_eq(elf_image_check(&t, EM_X86_64), 0);
	ck_assert_uint_eq(elf_image_load_base(&t), 0);
	size_t n = 1;
	ck_assert_ptr_null(elf_image_phdrs(&t, &n));
	ck_assert_uint_eq(n, 0);
	free(words);
	elf_image_close(&im);
}
END_TEST

static Suite *elf_image_suite(void)
{
	Suite *s = suite_create("elf_image");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_sections_agree_with_libelf, 0,
			    (int)(sizeof(files) / sizeof(files[0])));
	tcase_add_test(tc, test_non_elf_elf32_and_other_machines_are_refused);
	tcase_add_test(tc, test_truncated_and_mutated_headers_stay_in_bounds);
	tcase_add_test(tc, test_misaligned_header_tables_are_refused);
	tcase_add_test(tc, test_no_program_headers_whatever_their_offset);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return check_run_suite(elf_image_suite());
}
