/*
 * sym_dwarf.c - libdwfl sessions per module file (see sym_dwarf.h).
 *
 * Context: uploader thread. Every libdw call goes through the dlopen'd table (dw_api).
 * libdw validates DWARF and returns NULL or -1 on malformed input; each result is
 * checked here before use, and libdw accepts NULL attribute pointers (it propagates
 * the failure), which keeps the attribute chains below short.
 *
 * Inline frames: dwarf_getscopes(cu, addr) lists the DIEs whose ranges hold addr,
 * innermost first: lexical blocks, DW_TAG_inlined_subroutine for each inlined call,
 * then the DW_TAG_subprogram of the function the code physically belongs to, then the
 * CU. Each inlined subroutine gives a frame named after its abstract origin; its
 * DW_AT_call_file/DW_AT_call_line are where its caller (the next frame out) is.
 */
#include "agent/symbolize/sym_dwarf.h"

#include <dwarf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/unwind/elf_image.h"
#include "agent/symbolize/sym_elf.h"

#include "common/log.h"
#include "common/z_api.h"
#include "common/sys_io.h"

struct sym_dwarf {
	const struct dw_api *api;
	Dwfl_Callbacks callbacks; /* dwfl_begin keeps a pointer to it: lives as long */
	Dwfl *dwfl;
	Dwfl_Module *mod;
	int debug_info; /* -1 not checked yet, 0 none (or over the budget), 1 found */
	char *path;	/* the module's file */
};

#define DEBUG_DIR "/usr/lib/debug" /* the debuglink search's global directory */

/*
 * libdw decompresses every compressed DWARF section of a file when it first reads its
 * DWARF, into the profiler's memory, and keeps it while the session lives: libc6-dbg's
 * debug file alone is well over this budget decompressed, and libdw's own tables come
 * on top.
 * Past this many bytes, a module is named from its symbol tables only (no files, lines
 * or inlined frames). Uncompressed DWARF is mapped from the file, not copied: it does
 * not count.
 */
#define DWARF_DECOMPRESS_MAX ((uint64_t)4 << 20)
static const char *const dwarf_sections[] = {
    ".debug_info",    ".debug_abbrev", ".debug_line",	     ".debug_line_str", ".debug_str",
    ".debug_aranges", ".debug_ranges", ".debug_rnglists",    ".debug_loc",	".debug_loclists",
    ".debug_addr",    ".debug_types",  ".debug_str_offsets", ".debug_macro",	".debug_macinfo",
};

/* Bytes the compressed DWARF sections of path take once decompressed (0: none, or the
 * file cannot be read). */
static uint64_t dwarf_decompressed_bytes(const char *path)
{
	struct elf_image im;
	if (elf_image_open(&im, path) < 0)
		return 0;
	uint64_t total = 0;
	for (size_t i = 0; i < sizeof(dwarf_sections) / sizeof(dwarf_sections[0]); i++) {
		struct elf_section sec;
		uint64_t size; /* Elf64_Chdr: ch_type, ch_reserved, ch_size, ch_addralign */
		if (elf_image_section(&im, dwarf_sections[i], 0, &sec) &&
		    (sec.flags & SHF_COMPRESSED) && sec.len >= 24) {
			memcpy(&size, sec.data + 8, sizeof(size));
			total += size;
		}
	}
	elf_image_close(&im);
	return total;
}

/* Whether the module's DWARF fits the budget: its own sections and those of its
 * separate debug file found by build id (where Debian's -dbg packages put them). */
static bool dwarf_within_budget(const char *path)
{
	uint64_t bytes = dwarf_decompressed_bytes(path);
	struct sym_elf_info info;
	if (sym_elf_read_info(path, &info) == 0 && strlen(info.build_id) > 2) {
		char dbg[PATH_MAX];
		snprintf(dbg, sizeof(dbg), DEBUG_DIR "/.build-id/%.2s/%s.debug", info.build_id,
			 info.build_id + 2);
		bytes += dwarf_decompressed_bytes(dbg);
	}
	if (bytes <= DWARF_DECOMPRESS_MAX)
		return true;
	log_debug("%s: %llu KiB of compressed DWARF to decompress, over the %llu KiB budget: "
		  "functions from symbol tables, no lines",
		  path, (unsigned long long)(bytes >> 10),
		  (unsigned long long)(DWARF_DECOMPRESS_MAX >> 10));
	return false;
}

/* NULL selects libdwfl's default search path for build ids (/usr/lib/debug). */
static char *default_debuginfo_path;

#define CRC_CHUNK 65536

/* zlib's crc32 is the .gnu_debuglink CRC (CRC-32, polynomial 0xedb88320). */
static bool crc_matches(int fd, uint32_t want)
{
	static unsigned char buf[CRC_CHUNK]; /* uploader thread only */
	const struct z_api *z = z_api_get();
	if (!z)
		return false;
	uLong crc = z->crc32(0L, Z_NULL, 0);
	ssize_t n;
	while ((n = sys_read(fd, buf, sizeof(buf))) > 0)
		crc = z->crc32(crc, buf, (uInt)n);
	lseek(fd, 0, SEEK_SET);
	return n == 0 && (uint32_t)crc == want;
}

/* An open fd on candidate if it is the debug file of file_name, else -1. */
static int open_linked(const char *candidate, const char *file_name, uint32_t crc)
{
	struct stat a, b;
	if (stat(candidate, &a) != 0 ||
	    (stat(file_name, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev))
		return -1; /* missing, or the module itself */
	int fd = open(candidate, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct sym_elf_info mine, theirs;
	sym_elf_read_info(file_name, &mine);
	sym_elf_read_info(candidate, &theirs);
	bool ok = mine.build_id[0] && theirs.build_id[0]
		      ? strcmp(mine.build_id, theirs.build_id) == 0
		      : crc_matches(fd, crc);
	if (!ok) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Dwfl_Callbacks.find_elf: never needed, every session reports its file by path. Not
 * dwfl_build_id_find_elf, which may ask debuginfod for a missing file. */
static int find_elf_none(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
			 char **file_name, Elf **elfp)
{
	return -1;
}

/* Dwfl_Callbacks.find_debuginfo: see the top of sym_dwarf.h. */
static int find_debuginfo_local(Dwfl_Module *mod, void **userdata, const char *modname,
				GElf_Addr base, const char *file_name, const char *debuglink,
				GElf_Word crc, char **debuginfo_file_name)
{
	const struct dw_api *api = dw_api_get(); /* loaded: it opened this session */
	int fd = api ? api->dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name,
							 debuglink, crc, debuginfo_file_name)
		     : -1;
	if (fd >= 0 || !debuglink || !file_name || !debuglink[0] || strchr(debuglink, '/'))
		return fd;
	char dir[PATH_MAX], path[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", file_name);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	const char *const formats[] = {"%s/%s", "%s/.debug/%s", DEBUG_DIR "%s/%s"};
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
		if (snprintf(path, sizeof(path), formats[i], dir, debuglink) >= (int)sizeof(path))
			continue;
		fd = open_linked(path, file_name, crc);
		if (fd >= 0) {
			*debuginfo_file_name = strdup(path); /* libdwfl frees it */
			return fd;
		}
	}
	return -1;
}

struct sym_dwarf *sym_dwarf_open(const struct dw_api *api, const char *path)
{
	struct sym_dwarf *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->api = api;
	d->debug_info = -1;
	d->path = strdup(path);
	if (!d->path) {
		free(d);
		return NULL;
	}
	d->callbacks.find_elf = find_elf_none;
	d->callbacks.find_debuginfo = find_debuginfo_local;
	d->callbacks.debuginfo_path = &default_debuginfo_path;
	d->dwfl = api->dwfl_begin(&d->callbacks);
	if (!d->dwfl) {
		free(d->path);
		free(d);
		return NULL;
	}
	api->dwfl_report_begin(d->dwfl);
	/* base 0 with add_p_vaddr: the module sits at its own p_vaddr (bias 0), ET_EXEC and
	 * ET_DYN alike. */
	d->mod = api->dwfl_report_elf(d->dwfl, path, path, -1, 0, true);
	if (api->dwfl_report_end(d->dwfl, NULL, NULL) != 0 || !d->mod) {
		log_debug("libdwfl cannot read %s: %s", path, api->dwfl_errmsg(-1));
		api->dwfl_end(d->dwfl);
		free(d->path);
		free(d);
		return NULL;
	}
	dw_api_session_opened();
	return d;
}

void sym_dwarf_close(struct sym_dwarf *d)
{
	if (!d)
		return;
	d->api->dwfl_end(d->dwfl);
	free(d->path);
	free(d);
	dw_api_session_closed();
}

int sym_dwarf_read_symbols(struct sym_dwarf *d, struct sym_table *t)
{
	const struct dw_api *api = d->api;
	int n = api->dwfl_module_getsymtab(d->mod);
	if (n < 0)
		return -EINVAL;
	for (int i = 1; i < n; i++) { /* entry 0 is the null symbol */
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		Elf *elf;
		Dwarf_Addr bias;
		const char *name =
		    api->dwfl_module_getsym_info(d->mod, i, &sym, &addr, &shndx, &elf, &bias);
		if (!name)
			continue;
		int type = GELF_ST_TYPE(sym.st_info);
		if ((type != STT_FUNC && type != STT_GNU_IFUNC) || shndx == SHN_UNDEF)
			continue;
		int rc = sym_table_add(t, addr, sym.st_size, name,
				       GELF_ST_BIND(sym.st_info) != STB_LOCAL);
		if (rc < 0)
			return rc;
	}
	return 0;
}

bool sym_dwarf_has_debug_info(struct sym_dwarf *d)
{
	if (d->debug_info < 0) {
		Dwarf_Addr bias;
		d->debug_info = dwarf_within_budget(d->path) &&
				d->api->dwfl_module_getdwarf(d->mod, &bias) != NULL;
	}
	return d->debug_info == 1;
}

/* Linkage name (C++: mangled, qualified) or plain name, through abstract origins and
 * specifications. */
static const char *die_name(const struct dw_api *api, Dwarf_Die *die)
{
	static const unsigned int attrs[] = {DW_AT_linkage_name, DW_AT_MIPS_linkage_name,
					     DW_AT_name};
	for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
		Dwarf_Attribute a;
		const char *s = api->dwarf_formstring(api->dwarf_attr_integrate(die, attrs[i], &a));
		if (s && s[0])
			return s;
	}
	return NULL;
}

/* Where an inlined subroutine was called from: a file of its own CU's line table. */
static void call_site(const struct dw_api *api, Dwarf_Die *die, const char **file, int *line)
{
	Dwarf_Attribute a;
	Dwarf_Word v;
	*line = api->dwarf_formudata(api->dwarf_attr(die, DW_AT_call_line, &a), &v) == 0 &&
			v <= INT32_MAX
		    ? (int)v
		    : 0;
	*file = NULL;
	if (api->dwarf_formudata(api->dwarf_attr(die, DW_AT_call_file, &a), &v) != 0)
		return;
	Dwarf_Die cu;
	Dwarf_Files *files;
	size_t nfiles;
	if (api->dwarf_diecu(die, &cu, NULL, NULL) &&
	    api->dwarf_getsrcfiles(&cu, &files, &nfiles) == 0 && v < nfiles)
		*file = api->dwarf_filesrc(files, v, NULL, NULL);
}

static bool is_function_scope(int tag)
{
	return tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine ||
	       tag == DW_TAG_entry_point;
}

size_t sym_dwarf_frames(struct sym_dwarf *d, uint64_t vaddr, struct sym_frame *out, size_t max,
			bool *error)
{
	const struct dw_api *api = d->api;
	if (max == 0 || !sym_dwarf_has_debug_info(d))
		return 0;
	const char *file = NULL;
	int line = 0;
	Dwfl_Line *l = api->dwfl_module_getsrc(d->mod, vaddr);
	if (l && !(file = api->dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL)))
		line = 0;

	size_t n = 0;
	Dwarf_Addr bias = 0;
	Dwarf_Die *cu = api->dwfl_module_addrdie(d->mod, vaddr, &bias);
	Dwarf_Die *scopes = NULL;
	int nscopes = cu ? api->dwarf_getscopes(cu, vaddr - bias, &scopes) : 0;
	if (nscopes < 0) {
		*error = true;
		nscopes = 0;
	}
	bool outer_found = false;
	for (int i = 0; i < nscopes && !outer_found; i++) {
		int tag = api->dwarf_tag(&scopes[i]);
		if (!is_function_scope(tag))
			continue;
		outer_found = tag != DW_TAG_inlined_subroutine;
		/* The last slot is kept for the containing function. */
		if (outer_found || n + 1 < max)
			out[n++] = (struct sym_frame){die_name(api, &scopes[i]), file, line};
		if (!outer_found)
			call_site(api, &scopes[i], &file, &line);
	}
	free(scopes);
	/* No subprogram around (assembly with a line table, or odd DWARF): the containing
	 * function is a frame of its own at the last call site, named by the caller. */
	if (!outer_found && (n > 0 || file))
		out[n++] = (struct sym_frame){NULL, file, line};
	return n;
}
