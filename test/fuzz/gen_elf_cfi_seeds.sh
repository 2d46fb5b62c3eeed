#!/usr/bin/env bash
# gen_elf_cfi_seeds.sh - writes the seed corpus of fuzz_elf_cfi.c into a directory:
#   tiny.so         a -O0 shared object with a few functions and its symbols (~15 KiB)
#   tiny_nofp       a -O2 PIE program without frame pointers, stripped: CFI with
#                   pushes and pops, a PLT, remember/restore_state
#   debug_frame.so  a shared object whose functions have .debug_frame only
#   eh_frame_hdr    tiny.so's .eh_frame_hdr through the end of its .eh_frame, raw (the
#                   target's step 4 reads it as a header with its .eh_frame)
#   eh_frame        tiny_nofp's .eh_frame alone, raw
# Every file stays well under 64 KiB. Only files built here: no copy of a system binary
# (the kernel's vdso, a distribution's library) whose license would come with it.
# Context: a tool run by hand when the seeds should
# change; needs gcc, objcopy, python3.
# usage: test/fuzz/gen_elf_cfi_seeds.sh test/fuzz/corpus/elf_cfi
set -euo pipefail
out=$1
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/tiny.c" <<'C'
#include <stdio.h>
static int twice(int x) { return 2 * x; }
int tiny_add(int a, int b) { return twice(a) + b; }
int tiny_loop(int n) { int s = 0; for (int i = 0; i < n; i++) s += tiny_add(i, n); return s; }
void tiny_print(const char *s) { printf("%s\n", s); }
C
cat >"$tmp/nofp.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) static long work(long *v, int n)
{
	long s = 0;
	for (int i = 0; i < n; i++)
		s += v[i] * (i & 3 ? 3 : 7);
	if (s < 0)
		abort();
	return s;
}
int main(int argc, char **argv)
{
	long v[64];
	for (int i = 0; i < 64; i++)
		v[i] = argc + i;
	printf("%ld\n", work(v, argc > 1 ? atoi(argv[1]) : 64));
	return 0;
}
C
gcc -O0 -g0 -shared -fPIC "$tmp/tiny.c" -o "$out/tiny.so"
gcc -O2 -g0 -fomit-frame-pointer -s "$tmp/nofp.c" -o "$out/tiny_nofp"
gcc -O0 -g -shared -fPIC -fno-asynchronous-unwind-tables -fno-unwind-tables "$tmp/tiny.c" \
	-o "$tmp/df.so"
objcopy --remove-section=.debug_info --remove-section=.debug_line --remove-section=.debug_str \
	--remove-section=.debug_abbrev --remove-section=.debug_aranges \
	--remove-section=.debug_line_str "$tmp/df.so" "$out/debug_frame.so"
python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
import subprocess
def section(path, name):
    r = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True).stdout
    for l in r.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", l)
        if m and m.group(1) == name:
            return int(m.group(3), 16), int(m.group(4), 16)
    raise SystemExit("%s: no %s" % (path, name))
data = open(out + "/tiny.so", "rb").read()
hoff, _ = section(out + "/tiny.so", ".eh_frame_hdr")
eoff, esize = section(out + "/tiny.so", ".eh_frame")
open(out + "/eh_frame_hdr", "wb").write(data[hoff:eoff + esize])
data = open(out + "/tiny_nofp", "rb").read()
eoff, esize = section(out + "/tiny_nofp", ".eh_frame")
open(out + "/eh_frame", "wb").write(data[eoff:eoff + esize])
PY
ls -l "$out"
