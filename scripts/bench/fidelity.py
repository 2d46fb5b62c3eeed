#!/usr/bin/python3
"""Fidelity on the programs users run: how much of each workload's CPU the profile
gives a complete stack (rooted) and a named leaf, under libddprof, perf (the ground
truth where it can unwind: `perf record -e cpu-clock --call-graph dwarf`) and
async-profiler (event=ctimer, cstack=dwarf), one run each, side by side.

usage: scripts/bench/fidelity.py [WORKLOAD...]   (run it when nothing else runs)
Prints a Markdown table for BENCHMARKS.md's "Fidelity" section.

Rooted: the outermost frame is where a process or thread begins (_start, clone3,
start_thread..., a Go runtime's goexit or mstart). Named: the leaf frame has a function
name (not "[incomplete]", not "module+0xoffset", not a bare address).
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, "build")
LIB = os.path.join(BUILD, "libddprof.so")
DUMP = os.path.join(BUILD, "pprof-dump")
ASPROF = os.environ.get("BENCH_ASPROF", "/work/shared/peers/async-profiler/libasyncProfiler.so")
PYTHON = "/usr/bin/python3"
ROOTS = {"_start", "__libc_start_main", "clone", "clone3", "start_thread",
         "runtime.goexit.abi0", "runtime.mstart.abi0", "runtime.rt0_go.abi0",
         "runtime.goexit", "runtime.mstart"}

PY_SCRIPT = """
import hashlib, json, time
end = time.process_time() + 2.0
d = b"x" * 65536
while time.process_time() < end:
    h = hashlib.sha256(d).hexdigest()
    json.dumps({"h": [h] * 50})
"""

WORKLOADS = {
    "python3 hashlib+json (2 s)": [PYTHON, "-c", PY_SCRIPT],
    "dlopen churn (2 s)": [os.path.join(BUILD, "workloads", "dlopen_churn"),
                           os.path.join(BUILD, "workloads", "libchurn.so"), "2"],
    # A Go program ends with the exit_group system call (no exit handler runs): it
    # lingers 2 s so that 1 s periods hold all its work.
    "Go cgo, 64 goroutines (2 s)": [os.path.join(BUILD, "workloads", "go-spin"), "2", "2"],
    "node --perf-basic-prof (2 s)": ["/usr/bin/node", "--perf-basic-prof",
                                     os.path.join(ROOT, "test", "workloads", "js_loop.js"), "2"],
    "no frame pointers, 4 threads (2 s)": [os.path.join(BUILD, "workloads", "omitfp_threads"),
                                           "4", "2"],
}


def named(frame):
    """async-profiler writes an unnamed frame as its module's path."""
    return not (frame.startswith("[") or frame.startswith("/") or
                re.match(r"^(0x)?[0-9a-f]+$", frame) or "+0x" in frame)


def shares(stacks):
    """stacks: [(frames leaf first, weight)] -> (rooted, named) shares."""
    total = sum(w for _, w in stacks) or 1
    rooted = sum(w for f, w in stacks if f and f[-1] in ROOTS)
    leaf = sum(w for f, w in stacks if f and named(f[0]))
    return rooted / total, leaf / total


def run_ours(argv, tmp):
    out = os.path.join(tmp, "ours")
    env = dict(os.environ, LD_PRELOAD=LIB, DD_PROFILING_OUTPUT_DIR=out,
               DD_PROFILING_CPU_HZ="1000", DD_PROFILING_UPLOAD_PERIOD="1",
               XDG_CACHE_HOME=os.path.join(tmp, "cache"))
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120)
    files = sorted(glob.glob(os.path.join(out, "*.pprof")))
    r = subprocess.run([DUMP, "--json", "--stacks"] + files, stdout=subprocess.PIPE, text=True)
    stacks = []
    for line in r.stdout.splitlines():
        p = json.loads(line)
        ti = [i for i, (t, _u) in enumerate(p["sample_types"]) if t == "cpu-time"][0]
        stacks += [(s["frames"], s["values"][ti]) for s in p["stacks"]
                   if s["frames"] != ["[profiler]"]]
    return shares(stacks)


def run_perf(argv, tmp):
    data = os.path.join(tmp, "perf.data")
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "1000", "--call-graph",
                    "dwarf", "-o", data, "--"] + argv, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=300)
    r = subprocess.run(["perf", "script", "-i", data, "-F", "comm,ip,sym"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                       timeout=600)
    stacks, cur = [], None
    for line in r.stdout.splitlines():
        if not line.strip():
            if cur is not None:
                stacks.append((cur, 1))
            cur = None
        elif not line.startswith("\t") and not line.startswith(" "):
            cur = []
        elif cur is not None:
            parts = line.split(None, 1)
            sym = parts[1].strip() if len(parts) > 1 else "[unknown]"
            sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
            cur.append("[unknown]" if sym == "[unknown]" else sym)
    if cur:
        stacks.append((cur, 1))
    return shares(stacks)


def run_asprof(argv, tmp):
    out = os.path.join(tmp, "asprof-%p.txt")
    env = dict(os.environ, LD_PRELOAD=ASPROF,
               ASPROF_COMMAND="start,event=ctimer,interval=1ms,cstack=dwarf,collapsed,total,"
                              "file=" + out)
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=120)
    stacks = []
    if not glob.glob(os.path.join(tmp, "asprof-*.txt")):
        raise RuntimeError("no profile")  # written at exit: a Go program's exit_group
    for f in glob.glob(os.path.join(tmp, "asprof-*.txt")):
        for line in open(f, errors="replace"):
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack or not n.isdigit():
                continue
            frames = stack.split(";")[::-1]  # collapsed is root first
            frames = [re.sub(r"_\[[a-z]\]$", "", fr) for fr in frames]
            if len(frames) > 1 and frames[-1] == "[unknown]" and frames[-2] in ROOTS:
                frames.pop()  # it puts a frame of its own above the thread's first
            stacks.append((frames, int(n)))
    return shares(stacks)


def main():
    names = [w for w in WORKLOADS if not sys.argv[1:] or any(a in w for a in sys.argv[1:])]
    print("| workload | libddprof rooted / named | perf --call-graph dwarf | async-profiler |")
    print("|---|---|---|---|")
    for name in names:
        argv = WORKLOADS[name]
        if not os.path.exists(argv[0]):
            continue
        row = []
        for fn in (run_ours, run_perf, run_asprof):
            if fn is run_asprof and not os.path.exists(ASPROF):
                row.append("absent")
                continue
            tmp = tempfile.mkdtemp(prefix="bench-fidelity-")
            try:
                r, n = fn(argv, tmp)
                row.append("%.1f%% / %.1f%%" % (100 * r, 100 * n))
            except Exception as e:  # noqa: BLE001 - a peer that fails is reported
                row.append("failed (%s)" % (e if isinstance(e, RuntimeError) else type(e).__name__))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        print("| %s | %s |" % (name, " | ".join(row)))


if __name__ == "__main__":
    main()
