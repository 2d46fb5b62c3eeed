#!/usr/bin/python3
"""Fidelity on the programs users run: how much of each workload's CPU the profile
gives a complete stack (rooted) and a named leaf, under libddprof, perf (the ground
truth where it can unwind: `perf record -e cpu-clock --call-graph dwarf`) and
async-profiler (event=ctimer, cstack=dwarf), one run each, side by side.

usage: scripts/bench/fidelity.py [--out FILE] [WORKLOAD...]   (run it when nothing else
runs; make bench does, into build/bench/results/fidelity.md)
Prints a Markdown table for BENCHMARKS.md's "Fidelity" section: per profiler, the rooted
and named shares and the seconds of CPU its profiles hold (all processes).

Rooted: the outermost frame is where a process or thread begins (_start, clone3,
start_thread..., a Go runtime's goexit or mstart). Named: the leaf frame has a function
name (not "[incomplete]", not "module+0xoffset", not a bare address).
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

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

# A WSGI app that hashes (libcrypto's assembly through _hashlib) for each request.
GUNICORN_APP = """
import hashlib
DATA = b"x" * 65536
def application(environ, start_response):
    h = b""
    for _ in range(100):
        h = hashlib.sha256(DATA + h).digest()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [h.hex().encode()]
"""
SERVE_S = 3.0


class Server:
    """Debian's gunicorn with these arguments, serving GUNICORN_APP to 3 clients for
    SERVE_S, then stopped by SIGTERM to its master (workers exit through exit)."""

    def __init__(self, args):
        self.args = args


WORKLOADS = {
    "gunicorn --preload, 2 sync workers (3 s of requests)":
        Server(["--preload", "-w", "2", "-k", "sync"]),
    "gunicorn, 2 sync workers (3 s of requests)": Server(["-w", "2", "-k", "sync"]),
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_of(ppid):
    kids = []
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % d) as f:
                if d.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == ppid:
                    kids.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return kids


def serve(server, prefix, env, tmp):
    """Runs server's gunicorn (prefix: a profiler's command before it) under load."""
    with open(os.path.join(tmp, "app.py"), "w") as f:
        f.write(GUNICORN_APP)
    port = free_port()
    argv = prefix + [PYTHON, "-m", "gunicorn", "--chdir", tmp, "-b", "127.0.0.1:%d" % port,
                     "--log-level", "warning"] + server.args + ["app:application"]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        stop = time.time() + SERVE_S

        def client():
            while time.time() < stop:
                try:
                    urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=30).read()
                except OSError:
                    time.sleep(0.01)

        threads = [threading.Thread(target=client) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        master = p.pid if not prefix else (children_of(p.pid) or [p.pid])[0]
        os.kill(master, signal.SIGTERM)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def execute(workload, prefix, env, tmp):
    if isinstance(workload, Server):
        serve(workload, prefix, env, tmp)
    else:
        subprocess.run(prefix + workload, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=300)


def named(frame):
    """async-profiler writes an unnamed frame as its module's path."""
    return not (frame.startswith("[") or frame.startswith("/") or
                re.match(r"^(0x)?[0-9a-f]+$", frame) or "+0x" in frame)


def shares(stacks, unit_s):
    """stacks: [(frames leaf first, weight)], unit_s: seconds per unit of weight ->
    (rooted, named) shares and the seconds of CPU the profile holds."""
    total = sum(w for _, w in stacks) or 1
    rooted = sum(w for f, w in stacks if f and f[-1] in ROOTS)
    leaf = sum(w for f, w in stacks if f and named(f[0]))
    return rooted / total, leaf / total, total * unit_s


def run_ours(argv, tmp):
    out = os.path.join(tmp, "ours")
    env = dict(os.environ, LD_PRELOAD=LIB, DD_PROFILING_OUTPUT_DIR=out,
               DD_PROFILING_CPU_HZ="1000", DD_PROFILING_UPLOAD_PERIOD="1",
               XDG_CACHE_HOME=os.path.join(tmp, "cache"))
    execute(argv, [], env, tmp)
    files = sorted(glob.glob(os.path.join(out, "*.pprof")))
    r = subprocess.run([DUMP, "--json", "--stacks"] + files, stdout=subprocess.PIPE, text=True)
    stacks = []
    for line in r.stdout.splitlines():
        p = json.loads(line)
        ti = [i for i, (t, _u) in enumerate(p["sample_types"]) if t == "cpu-time"][0]
        stacks += [(s["frames"], s["values"][ti]) for s in p["stacks"]
                   if s["frames"] != ["[profiler]"]]
    return shares(stacks, 1e-9)


def run_perf(argv, tmp):
    data = os.path.join(tmp, "perf.data")
    execute(argv, ["perf", "record", "-q", "-e", "cpu-clock", "-F", "1000", "--call-graph",
                   "dwarf", "-o", data, "--"], dict(os.environ), tmp)
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
    return shares(stacks, 1e-3)


def run_asprof(argv, tmp):
    out = os.path.join(tmp, "asprof-%p.txt")
    env = dict(os.environ, LD_PRELOAD=ASPROF,
               ASPROF_COMMAND="start,event=ctimer,interval=1ms,cstack=dwarf,collapsed,total,"
                              "file=" + out)
    execute(argv, [], env, tmp)
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
    return shares(stacks, 1e-9)


SECTION = """## Fidelity on real programs

`scripts/bench/fidelity.py` (part of `make bench`), %s at %s, one run of each profiler
per workload, at 1 kHz. Rooted: the share of the workload's CPU whose stack reaches the
process's or thread's first frame (a Go runtime's `goexit` or `mstart` included); named:
the share whose leaf frame has a function name; then the seconds of CPU the profiles
hold, every process of the workload together. perf (`perf record -e cpu-clock
--call-graph dwarf`, 8 KiB of stack per sample, following forks) is the ground truth
where it can unwind; async-profiler's native library ran with
`event=ctimer,cstack=dwarf`. Debian's python3 and libcrypto are stripped: most of their
leaves are local functions without a name for every profiler (13-17%% named). A Go
program ends with the `exit_group` system call: async-profiler, which writes its
profile at exit, writes none; libddprof's 1 s periods hold it (the workload lingers
2 s). gunicorn: 3 clients for 3 s against a WSGI app that hashes with `hashlib`, then
SIGTERM to the master; async-profiler profiles the master only (its workers, forked,
are not sampled).
"""


def main():
    args = sys.argv[1:]
    out = sys.stdout
    if args[:1] == ["--out"]:
        out = open(args[1], "w")
        args = args[2:]
    names = [w for w in WORKLOADS if not args or any(a in w for a in args)]
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         stdout=subprocess.PIPE, text=True).stdout.strip()
    out.write(SECTION % (time.strftime("%Y-%m-%d"), rev or "unknown") + "\n")
    out.write("| workload | libddprof rooted / named (CPU) | perf --call-graph dwarf | "
              "async-profiler |\n|---|---|---|---|\n")
    for name in names:
        argv = WORKLOADS[name]
        if not isinstance(argv, Server) and not os.path.exists(argv[0]):
            continue
        row = []
        for fn in (run_ours, run_perf, run_asprof):
            if fn is run_asprof and not os.path.exists(ASPROF):
                row.append("absent")
                continue
            tmp = tempfile.mkdtemp(prefix="bench-fidelity-")
            try:
                r, n, cpu = fn(argv, tmp)
                row.append("%.1f%% / %.1f%% (%.2f s)" % (100 * r, 100 * n, cpu))
            except Exception as e:  # noqa: BLE001 - a peer that fails is reported
                row.append("failed (%s)" % (e if isinstance(e, RuntimeError) else type(e).__name__))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        out.write("| %s | %s |\n" % (name, " | ".join(row)))
        out.flush()


if __name__ == "__main__":
    main()
