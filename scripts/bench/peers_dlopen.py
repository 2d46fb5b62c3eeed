#!/usr/bin/python3
"""What a dlopen costs under each profiler: libddprof builds the unwind tables of what a
dlopen by path maps in the caller's own call (preload/preload.c), from the unwind cache
when it holds them ($XDG_CACHE_HOME/libddprof), else from the files' .eh_frame.

usage: scripts/bench/peers_dlopen.py [ROUNDS]   (run it when nothing else runs)

Cases, each a fresh process per round, interleaved round by round:
  alone           no profiler
  libddprof cold  an empty unwind cache: every table built from .eh_frame
  libddprof warm  the cache filled by an earlier run
  async-profiler  its native library (event=ctimer, cstack=dwarf: it reads the DWARF of
                  each library its dlopen hook sees), when /work/shared/peers has it
Workloads: dlopen of libLLVM-15 (and its 15 dependencies), of libcrypto, and a Python
import of ten C extensions (decimal, ssl, sqlite3...). Prints a Markdown table: medians,
the ratio to alone, what the profiler adds, and that per MiB of .eh_frame mapped.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(ROOT, "build", "libddprof.so")
HELPER = os.path.join(ROOT, "build", "bench", "dlopen_cost")
ASPROF = os.environ.get("BENCH_ASPROF", "/work/shared/peers/async-profiler/libasyncProfiler.so")
PYTHON = "/usr/bin/python3"
IMPORTS = "decimal, ssl, sqlite3, pyexpat, hashlib, json, zlib, bz2, lzma, ctypes"
PY = ("import time, sys\nt = time.perf_counter_ns()\nimport %s\n"
      "print('load import %%d' %% (time.perf_counter_ns() - t))\n"
      "import os\n[print('mapped', l.split()[-1]) for l in open('/proc/self/maps') "
      "if l.split()[-1].startswith('/')]\n" % IMPORTS)
WORKLOADS = [
    ("dlopen libLLVM-15", [HELPER, "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1"]),
    ("dlopen libcrypto", [HELPER, "/lib/x86_64-linux-gnu/libcrypto.so.3"]),
    ("python3 import of 10 C extensions", [PYTHON, "-c", PY]),
]


def eh_frame_bytes(path):
    r = subprocess.run(["readelf", "-SW", path], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    for line in r.stdout.splitlines():
        if " .eh_frame " in line:
            return int(line.split("]")[1].split()[4], 16)
    return 0


def run(argv, env):
    r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit("%s failed: %s" % (argv, r.stderr[-500:]))
    ns = sum(int(l.split()[-1]) for l in r.stdout.splitlines() if l.startswith("load "))
    mapped = {l.split(None, 1)[1] for l in r.stdout.splitlines() if l.startswith("mapped ")}
    return ns, mapped


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    if not os.path.exists(HELPER):
        os.makedirs(os.path.dirname(HELPER), exist_ok=True)
        subprocess.run(["cc", "-O2", "-o", HELPER,
                        os.path.join(ROOT, "scripts/bench/dlopen_cost.c"), "-ldl"], check=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("DD_")}
    warm = tempfile.mkdtemp(prefix="bench-dlopen-warm-")
    cases = [("alone", {}), ("libddprof cold", {"LD_PRELOAD": LIB}),
             ("libddprof warm", {"LD_PRELOAD": LIB, "XDG_CACHE_HOME": warm})]
    if os.path.exists(ASPROF):
        cases.append(("async-profiler", {
            "LD_PRELOAD": ASPROF,
            "ASPROF_COMMAND": "start,event=ctimer,interval=10ms,cstack=dwarf,collapsed,"
                              "file=/dev/null"}))
    print("| workload | .eh_frame mapped | case | median | ratio | added | added per MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, argv in WORKLOADS:
        env = dict(base, LD_PRELOAD=LIB, XDG_CACHE_HOME=warm)
        _, mapped = run(argv, env)  # fills the warm cache
        eh = sum(eh_frame_bytes(p) for p in mapped) / (1 << 20)
        times = {c: [] for c, _ in cases}
        for _ in range(rounds):
            for c, extra in cases:
                env = dict(base, **extra)
                cold = None
                if c == "libddprof cold":
                    cold = tempfile.mkdtemp(prefix="bench-dlopen-cold-")
                    env["XDG_CACHE_HOME"] = cold
                ns, _ = run(argv, env)
                times[c].append(ns / 1e6)
                if cold:
                    shutil.rmtree(cold, ignore_errors=True)
        alone = statistics.median(times["alone"])
        for c, _ in cases:
            m = statistics.median(times[c])
            added = m - alone
            print("| %s | %.2f MiB | %s | %.1f ms | %.3f | %+.1f ms | %s |" % (
                name, eh, c, m, m / alone, added,
                "" if c == "alone" else "%+.1f ms" % (added / eh if eh else 0)))
    shutil.rmtree(warm, ignore_errors=True)


if __name__ == "__main__":
    main()
