"""What the process-level benchmarks (peers.py and its peers_*.py modules) share: the
programs and libraries compared and how a program runs under each (Profiler, run), the
pairing of runs with a baseline (paired, grouped), the statistics (median, median_ci,
before_after) and the results' files (write). peers.py says how and why.
"""
import json
import os
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIBDDPROF = os.path.join(ROOT, "build", "libddprof.so")
GPERF = "/usr/lib/x86_64-linux-gnu/libprofiler.so.0"
ASPROF = os.environ.get("BENCH_ASPROF",
                        "/work/shared/peers/async-profiler/libasyncProfiler.so")
# async-profiler is not in Debian: without its library (BENCH_ASPROF elsewhere), the
# benchmarks run with gperftools alone (and say so).
PEERS = ("gperftools",) + (("async-profiler",) if os.path.exists(ASPROF) else ())
# The allocation profilers' peers (peers_alloc.py): heaptrack (Debian's `heaptrack`, run
# through its own script, which starts its interpreter and compressor beside the program
# and waits for them) and async-profiler's `nativemem` mode.
HEAPTRACK = "/usr/bin/heaptrack"
# async-profiler's nativemem sampling interval in bytes: libddprof's default
# DD_PROFILING_HEAP_SAMPLE_SIZE (512 KiB).
ASPROF_NATIVEMEM = 524288
# The before build (see the top): its library, and its own unwind table cache (the two
# builds never read or replace each other's tables, whatever their formats; each
# cache is warm after the build's first process, as the current one's is).
BASE_DIR = os.environ.get("BENCH_BASE_DIR", "")
BASE_REV = os.environ.get("BENCH_BASE_REV", "")
LIBS = {"libddprof": LIBDDPROF,
        "libddprof-before": os.path.join(BASE_DIR, "build", "libddprof.so")}
BASE_CACHE = os.path.join(BASE_DIR, "unwind-cache")
BEFORE = ("libddprof-before",) if BASE_DIR and os.path.exists(LIBS["libddprof-before"]) \
    else ()
# The builds of libddprof measured: the current one, and the before build when there is one.
MINE = ("libddprof",) + BEFORE
BENCH = os.path.join(ROOT, "build", "bench")
WORKLOADS = os.path.join(ROOT, "build", "workloads")
PPROF_DUMP = os.path.join(ROOT, "build", "pprof-dump")

QUICK = "--quick" in sys.argv
random.seed(6)


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("DD_") or k.startswith("PYROSCOPE_") or
                   k.startswith("CPUPROFILE") or k.startswith("ASPROF") or
                   k == "LD_PRELOAD")}
    return env


class Profiler:
    """One candidate: how to run a program under it, and how to read its profiles."""

    def __init__(self, kind, hz=None, extra=None, files=True, label=None, mode=None):
        self.kind = kind  # "none", a key of LIBS, one of PEERS, or "heaptrack"
        self.hz = hz
        self.extra = extra or {}
        self.files = files  # libddprof: profiles to files (else its default exporter)
        self.label = label  # its name, when a kind runs twice in a group (alloc: off, on)
        self.mode = mode  # async-profiler: "nativemem" (allocations) instead of ctimer
        self.dir = None

    @property
    def name(self):
        if self.label:
            return self.label
        return self.kind if self.hz is None else "%s@%d" % (self.kind, self.hz)

    def command(self):
        """What goes before the profiled program's argv: heaptrack's own script."""
        if self.kind == "heaptrack":
            return [HEAPTRACK, "-o", os.path.join(self.dir, "heaptrack")]
        return []

    def env(self):
        env = base_env()
        if self.kind == "none":
            return env
        self.dir = tempfile.mkdtemp(prefix="ddprof-bench-")
        if self.kind in LIBS:
            env["LD_PRELOAD"] = LIBS[self.kind]
            if self.kind == "libddprof-before":
                env["DD_PROFILING_UNWIND_CACHE_DIR"] = BASE_CACHE
            if self.files:
                env["DD_PROFILING_OUTPUT_DIR"] = self.dir
            env["DD_PROFILING_LOG_LEVEL"] = "error"
            if self.hz:
                env["DD_PROFILING_CPU_HZ"] = str(self.hz)
        elif self.kind == "gperftools":
            env["LD_PRELOAD"] = GPERF
            env["CPUPROFILE"] = os.path.join(self.dir, "gperf.prof")
            if self.hz:
                env["CPUPROFILE_FREQUENCY"] = str(self.hz)
        elif self.kind == "async-profiler" and self.mode == "nativemem":
            # Its collapsed counts are then samples (each about ASPROF_NATIVEMEM bytes).
            env["LD_PRELOAD"] = ASPROF
            env["ASPROF_COMMAND"] = "start,nativemem=%d,collapsed,file=%s" % (
                ASPROF_NATIVEMEM, os.path.join(self.dir, "%p.txt"))
        elif self.kind == "heaptrack":
            pass  # command(): its script sets LD_PRELOAD itself
        elif self.kind == "async-profiler":
            env["LD_PRELOAD"] = ASPROF
            cmd = ["start", "event=ctimer"]
            if self.hz:
                cmd.append("interval=%d" % round(1e9 / self.hz))  # ns
            cmd += ["collapsed", "total", "file=%s" % os.path.join(self.dir, "%p.txt")]
            env["ASPROF_COMMAND"] = ",".join(cmd)
        else:
            raise ValueError("unknown profiler %r" % self.kind)
        env.update(self.extra)
        return env

    def profile_cpu_ns(self):
        """CPU time the profiles written by the last run account for, and their
        number of distinct stacks (pprof samples / gperftools records / async-profiler
        collapsed lines) and of dropped samples (libddprof's `[dropped]`)."""
        total, stacks, dropped = 0, 0, 0
        if self.kind in LIBS:
            files = sorted(os.path.join(self.dir, f) for f in os.listdir(self.dir))
            if files:
                out = subprocess.run([PPROF_DUMP, "--json"] + files, check=True,
                                     stdout=subprocess.PIPE).stdout.decode()
                for line in out.splitlines():
                    d = json.loads(line)
                    total += d["totals"][1]
                    stacks += d.get("num_samples", 0)
                    drop = d.get("functions", {}).get("[dropped]")
                    if drop:
                        dropped += drop["self"][0]
        elif self.kind == "gperftools":
            total, stacks = read_gperftools(os.path.join(self.dir, "gperf.prof"))
        elif self.kind == "async-profiler":
            for f in sorted(os.listdir(self.dir)):
                t, n = read_collapsed(os.path.join(self.dir, f))
                total += t
                stacks += n
        return total, stacks, dropped

    def cleanup(self):
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def read_gperftools(path):
    """(sampled CPU ns, records) of a gperftools CPU profile."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return 0, 0
    words = struct.unpack("<%dQ" % (len(data) // 8), data[:len(data) // 8 * 8])
    hdr_words = words[1]
    period_us = words[3]
    i = 2 + hdr_words
    total, records = 0, 0
    while i + 1 < len(words):
        count, depth = words[i], words[i + 1]
        if count == 0 and depth == 1:  # trailer
            break
        total += count * period_us * 1000
        records += 1
        i += 2 + depth
    return total, records


def read_collapsed(path):
    """(sampled CPU ns, distinct stacks) of an async-profiler `collapsed,total` file."""
    total, stacks = 0, 0
    try:
        with open(path, errors="replace") as f:
            for line in f:
                head, _, n = line.rstrip("\n").rpartition(" ")
                if head and n.isdigit():
                    total += int(n)
                    stacks += 1
    except OSError:
        pass
    return total, stacks


class Hung(Exception):
    """The program did not finish in time (killed); the pair is left out and counted."""


class Crashed(Hung):
    """The program died of a signal or failed (a child of bench_spawn or fork_storm
    dying makes it exit 1) under a profiler: left out and counted like a hang. A failure
    of the baseline itself is an error (RuntimeError)."""


# What async-profiler prints on stdout (its start, and "[INFO] No samples were collected"
# from every forked child that exits without samples of its own): not the program's.
ASPROF_NOISE = re.compile(r"^(Profiling started|Profiling stopped|\[(INFO|WARN|ERROR)\] .*)$")


RUN_TIMEOUT = 30 if QUICK else 120  # seconds; every program here takes a few
SPAWN_TIMEOUT = 10  # seconds; the spawn benchmarks take 2 at most when they do not hang


def run(prof, argv, timeout=RUN_TIMEOUT, preload_var="LD_PRELOAD", program_at=0):
    """Runs argv under prof: (stdout, wall seconds, process CPU seconds, maxrss KiB).
    Raises Hung when it has to be killed (gperftools and async-profiler sometimes
    deadlock in fork), Crashed
    when it fails under a profiler (signal or exit status).
    preload_var: the variable that gets the profiler's library (see maxrss.c).
    program_at: where the profiled program starts in argv (1 after the maxrss launcher):
    a profiler run by a command of its own (heaptrack) is put there."""
    env = prof.env()
    if preload_var != "LD_PRELOAD" and "LD_PRELOAD" in env:
        env[preload_var] = env.pop("LD_PRELOAD")
    argv = argv[:program_at] + prof.command() + argv[program_at:]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    killed = []

    def kill():
        killed.append(True)
        try:
            os.killpg(p.pid, 9)
        except OSError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    timer.cancel()
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if killed:
        raise Hung("%s under %s hung" % (argv[0], prof.name))
    if p.returncode != 0 and prof.kind != "none":
        raise Crashed("%s under %s %s" % (argv[0], prof.name, (
            "died of signal %d" % -p.returncode) if p.returncode < 0 else
            "exited %d" % p.returncode))
    if p.returncode != 0:
        raise RuntimeError("%s under %s exited %d" % (argv, prof.name, p.returncode))
    out = out.decode()
    if prof.kind == "async-profiler":
        out = "".join(l for l in out.splitlines(True) if not ASPROF_NOISE.match(l.rstrip("\n")))
    return out, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def fields(text):
    """'k v k v ...' -> dict of floats where they parse."""
    parts = text.split()
    d = {}
    for k, v in zip(parts[0::2], parts[1::2]):
        try:
            d[k] = float(v)
        except ValueError:
            d[k] = v
    return d


def median(xs):
    return statistics.median(xs) if xs else None


def paired(cands, rounds, measure):
    """For each round, each candidate is run next to a fresh baseline run (order within
    the pair and of the candidates random). measure(prof) -> dict of numbers.
    Returns {cand.name: [(round, base, cand) ...]} (round: its index, which pairs the
    candidates' measures of a round with each other)."""
    base = Profiler("none")
    pairs = {c.name: [] for c in cands}
    hung = {c.name: 0 for c in cands}  # in this call (HUNG counts per benchmark)
    for ri in range(rounds):
        # A candidate that hung in each of its first GIVE_UP_AFTER runs here (gperftools
        # in the fork cases, every time on these machines) is not run again: each hang
        # costs the time limit.
        order = [c for c in cands if pairs[c.name] or hung[c.name] < GIVE_UP_AFTER]
        random.shuffle(order)
        for c in order:
            try:
                if random.random() < 0.5:
                    b = measure(base)
                    m = measure(c)
                else:
                    m = measure(c)
                    b = measure(base)
                pairs[c.name].append((ri, b, m))
            except Hung as e:
                print("  %s (%s, pair left out)" % (e, "crashed" if isinstance(e, Crashed)
                                                  else "killed"))
                HUNG[c.name] = HUNG.get(c.name, 0) + 1
                hung[c.name] += 1
                if not pairs[c.name] and hung[c.name] == GIVE_UP_AFTER:
                    print("  %s hung in each of its %d runs: not run again here"
                          % (c.name, GIVE_UP_AFTER))
            c.cleanup()
    return pairs


GIVE_UP_AFTER = 3


HUNG = {}  # candidate name -> runs killed (or crashed), per benchmark (reset by each)


def write(resdir, name, obj):
    with open(os.path.join(resdir, name), "w") as f:
        json.dump(obj, f, indent=1)


def median_ci(xs):
    """The median's 95% confidence interval, free of any assumption on the spread: the
    order statistics of ranks (n - 1.96 sqrt(n)) / 2 and 1 + (n + 1.96 sqrt(n)) / 2
    (1-based), None below 6 values."""
    n = len(xs)
    if n < 6:
        return None
    s = sorted(xs)
    half = 1.96 * n ** 0.5
    lo = max(1, int((n - half) / 2))
    hi = min(n, int(-(-(1 + (n + half) / 2) // 1)))
    return [s[lo - 1], s[hi - 1]]


def before_after(figure, label, after, before, paired_values, better, how="ratio", unit=""):
    """One figure of the two builds, for the report's before/after table.
    after, before: the figure's values over the rounds (or runs) of each build, whose
    medians and 95% intervals (median_ci) are shown side by side; paired_values: the
    after / before ratio (how="ratio") or after - before difference (how="difference")
    of the two builds' measures within each round, the comparison itself. better: "lower"
    or "higher". `worse` is True when that interval lies wholly on the worse side of no
    change (1, or 0), None without an interval (fewer than 6 pairs)."""
    ci = median_ci(paired_values)
    same = 1.0 if how == "ratio" else 0.0
    worse = None
    if ci:
        worse = ci[0] > same if better == "lower" else ci[1] < same
    return {"figure": figure, "label": label, "unit": unit, "better": better,
            "after": median(after), "after_ci": median_ci(after),
            "before": median(before), "before_ci": median_ci(before),
            "how": how, "value": median(paired_values), "ci": ci,
            "pairs": len(paired_values), "worse": worse}


def same_rounds(a, b):
    """[(a[r], b[r])] for the rounds r in both dicts (a run that hung leaves its round
    out of one build only)."""
    return [(a[r], b[r]) for r in sorted(a.keys() & b.keys())]


def num(x):
    return "n/a" if x is None else "%.4g" % x


def ci_text(ci):
    return "%s to %s" % (num(ci[0]), num(ci[1])) if ci else "n/a"


def print_before_after(figs):
    for f in figs:
        print("  before/after %-44s after %s (%s)  before %s (%s)  %s %s (%s, %d "
              "pairs): %s" % (
                  f["label"], num(f["after"]), ci_text(f["after_ci"]), num(f["before"]),
                  ci_text(f["before_ci"]), "after/before" if f["how"] == "ratio" else
                  "after-before", num(f["value"]), ci_text(f["ci"]), f["pairs"],
                  {True: "WORSE", False: "not worse", None: "no interval"}[f["worse"]]))


def grouped(groups, rounds, measure):
    """Like paired, but each round runs a baseline with every candidate of a group (one
    group per rate: libddprof, its before build and its PEERS), all in random order: the
    candidates of a group share their baseline, and compare with each other directly in
    the same round, without the noise of two baselines. rounds: one count per group (a group
    with fewer rounds sits out the last ones; the groups still alternate at random).
    Returns, per group, a list of {name: measure} per round (Hung runs leave their
    round out)."""
    base = Profiler("none")
    out = [[] for _ in groups]
    for ri in range(max(rounds)):
        live = [gi for gi in range(len(groups)) if ri < rounds[gi]]
        for gi in random.sample(live, len(live)):
            members = [base] + list(groups[gi])
            random.shuffle(members)
            got = {}
            try:
                for c in members:
                    got[c.name] = measure(c)
                    c.cleanup()
            except Hung as e:
                print("  %s (%s, round left out)" % (e, "crashed" if isinstance(e, Crashed)
                                                   else "killed"))
                HUNG[c.name] = HUNG.get(c.name, 0) + 1
                c.cleanup()
                continue
            out[gi].append(got)
    return out


def fmt(x):
    return "n/a" if x is None else "%.3f" % x
