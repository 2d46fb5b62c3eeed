"""The short-lived processes benchmark of peers.py: short.json. What a build, a compile,
a shell pipeline and a git command pay for running under the profiler, every process of
them profiled (LD_PRELOAD inherited), against the same command alone.

Cases (each a command run through /bin/sh from a scratch directory or this checkout):
  make   make -j2 of a 14-file C project (generated; objects removed before each run,
         unprofiled), about 30 processes
  gcc    gcc -O2 -c of one file (the driver, cc1, as)
  pipe   a bash pipeline over this checkout's C files (cat, grep, sort, uniq, sort, head)
  git    git log -p of this checkout
Candidates: libddprof with its CPU profile, libddprof with every profile type on
(allocation, heap, wall, lock), async-profiler (ctimer, a collapsed file per process)
when present. Profiles go to files. Each round pairs every candidate with a run alone
(order random); wall time from spawn to wait, CPU from wait4's rusage (the command's
processes, children included).
"""
import os
import resource
import shutil
import subprocess
import tempfile
import time

from peers_common import (MINE, PEERS, Profiler, QUICK, ROOT, median, median_ci, paired,
    write)

ALL_TYPES = {"DD_PROFILING_ALLOCATION_ENABLED": "true", "DD_PROFILING_HEAP_ENABLED": "true",
             "DD_PROFILING_WALL_ENABLED": "true", "DD_PROFILING_LOG_LEVEL": "error",
             "DD_PROFILING_LOCK_ENABLED": "true"}

C_FILE = """#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct item%(i)d { int key; char name[32]; double weight; };
static int cmp%(i)d(const void *a, const void *b)
{
	const struct item%(i)d *x = a, *y = b;
	return x->key - y->key;
}
double work%(i)d(int n)
{
	struct item%(i)d *v = calloc((size_t)n, sizeof(*v));
	double s = 0;
	for (int k = 0; k < n; k++) {
		v[k].key = (k * 7919) %% n;
		snprintf(v[k].name, sizeof(v[k].name), "i%%d", k);
		v[k].weight = k * 0.5;
	}
	qsort(v, (size_t)n, sizeof(*v), cmp%(i)d);
	for (int k = 0; k < n; k++)
		s += v[k].weight * (double)strlen(v[k].name);
	free(v);
	return s;
}
"""

MAKEFILE = """SRCS := $(wildcard *.c)
OBJS := $(SRCS:.c=.o)
prog: $(OBJS)
\t$(CC) -O2 -o $@ $(OBJS)
%.o: %.c
\t$(CC) -O2 -c -o $@ $<
"""


def make_project(d):
    for i in range(1, 14):
        with open(os.path.join(d, "f%d.c" % i), "w") as f:
            f.write(C_FILE % {"i": i})
    with open(os.path.join(d, "main.c"), "w") as f:
        f.write('#include <stdio.h>\ndouble work1(int);\n'
                'int main(void) { printf("%f\\n", work1(100)); return 0; }\n')
    with open(os.path.join(d, "Makefile"), "w") as f:
        f.write(MAKEFILE)


def clean_project(d):
    for n in os.listdir(d):
        if n.endswith(".o") or n == "prog":
            os.unlink(os.path.join(d, n))


def bench_short(resdir):
    rounds = 4 if QUICK else 15
    proj = tempfile.mkdtemp(prefix="ddprof-bench-short-")
    make_project(proj)
    cases = [
        ("make", "make -s -j2 >/dev/null", proj, lambda: clean_project(proj)),
        ("gcc", "gcc -O2 -c -o one.o f1.c", proj, None),
        ("pipe", "cat $(git ls-files '*.c') | grep -o '[a-z_]*' | sort | uniq -c "
                 "| sort -rn | head -5 >/dev/null", ROOT, None),
        ("git", "git --no-pager log -p >/dev/null", ROOT, None)]
    if not os.path.isdir(os.path.join(ROOT, ".git")):
        cases = [c for c in cases if c[2] != ROOT]
    cands = ([Profiler(k) for k in MINE if k == "libddprof"] +
             [Profiler("libddprof", extra=ALL_TYPES, label="libddprof-all")] +
             [Profiler(k) for k in PEERS if k == "async-profiler"])
    res = {"rounds": rounds, "rows": []}
    for name, cmd, cwd, before in cases:

        def measure(prof):
            if before:
                before()
            env = prof.env()
            env["PATH"] = "/usr/bin:/bin"
            t0 = time.perf_counter()
            p = subprocess.Popen(["/bin/bash", "-c", cmd], cwd=cwd, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
            files = 0
            if prof.dir:
                files = sum(len(fs) for _, _, fs in os.walk(prof.dir))
            return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "files": files,
                    "rc": p.returncode}

        # One warm-up pair each (page cache, the unwind cache directory).
        for c in cands:
            measure(c)
            c.cleanup()
        pairs = paired(cands, rounds, measure)
        for c in cands:
            ps = pairs[c.name]
            if not ps:
                continue
            extra = [(m["wall"] - b["wall"]) * 1e3 for _, b, m in ps]
            ratio = [m["cpu"] / b["cpu"] for _, b, m in ps if b["cpu"] > 0]
            row = {"case": name, "profiler": c.name, "pairs": len(ps),
                   "base_wall_ms": median([b["wall"] * 1e3 for _, b, _ in ps]),
                   "base_cpu_ms": median([b["cpu"] * 1e3 for _, b, _ in ps]),
                   "extra_wall_ms": median(extra), "extra_wall_ci": median_ci(extra),
                   "cpu_ratio": median(ratio), "cpu_ratio_ci": median_ci(ratio),
                   "files": median([m["files"] for _, _, m in ps]),
                   "failed": sum(1 for _, b, m in ps if m["rc"] != b["rc"])}
            res["rows"].append(row)
            print("  %-5s %-15s wall +%.2f ms (alone %.1f ms), CPU x%.3f, %s files" % (
                name, c.name, row["extra_wall_ms"], row["base_wall_ms"], row["cpu_ratio"],
                row["files"]))
    shutil.rmtree(proj, ignore_errors=True)
    write(resdir, "short.json", res)
