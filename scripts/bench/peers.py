#!/usr/bin/python3
"""Process-level benchmarks: libddprof side by side with no agent and with its peers,
gperftools and async-profiler.

usage: peers.py RESULTS_DIR [--quick]

Every figure comes from paired runs: a run without any profiler and a run under a
profiler, back to back in random order, repeated; the figure is the median of the
per-pair ratios, so slow drifts of a shared machine hit both sides of each pair.
Writes one JSON file per benchmark into RESULTS_DIR (rendered by report.py):

  overhead.json  fixed CPU work on 2 threads (build/bench/fixed_work): wall and CPU
                 time under a profiler / without, at several sampling rates
  accuracy.json  profile CPU-time total / kernel CPU time (test/workloads/cpu_split),
                 1 to 64 threads, 99 Hz and 1 kHz
  spawn.json     thread create+join/s, fork+exit+wait/s (build/bench/bench_spawn) and
                 the fork_storm workload's fork rate, under a profiler / without
  startup.json   extra wall time of /bin/true under LD_PRELOAD
  memory.json    extra peak RSS of 64 threads with ~10k distinct stacks
                 (build/bench/many_stacks), with the default ceiling and a small one
  micro.json     with a before build only: the handler's, the trie's and the
                 serializer's micro-benchmarks of both builds, alternated (bench_micro)
  base.json      which before build ran, if one was asked for

The before build ("libddprof-before"): libddprof as it was at an older revision
(BENCH_BASE_REV, built by scripts/bench/build-base into BENCH_BASE_DIR; scripts/bench/run
sets both). Wherever libddprof runs it runs too, as one more candidate interleaved with
the others, so that the machine's drift hits both builds alike. Each benchmark then adds
to its JSON file a list "before_after" of figures (before_after()): after and before
with their 95% intervals, and the interval of after / before (or after - before) paired
by round. Without a before build, the benchmarks run as before and write no such list.

The peers (PEERS), run wherever a profiler is compared (overhead, accuracy, spawn except
the fork after an upload, which is libddprof's own uploader's case, start-up, memory):

gperftools is Debian's libgoogle-perftools4 (libprofiler.so.0, started by CPUPROFILE);
its profile is read from its documented binary format (a header of 64-bit words
0, 3, 0, period_us, 0, then records count, depth, pcs...), the same data
`google-pprof --raw` prints.

async-profiler is its native library (ASPROF, a 4.5 build kept in /work/shared/peers;
see its README there), started by ASPROF_COMMAND=start,event=ctimer,... : `ctimer` arms
one timer_create CPU timer per thread, the mode closest to libddprof's. The interval is
given in ns (1e9 / hz; its default, without a rate, is 10 ms: 100 Hz). Its profile is
`collapsed,total`: one line per distinct stack (by frame names), `frame;...;frame N`,
N the stack's CPU ns, in one file per process (`%p`: a forked child that exits writes
its own, with the samples it inherited). It prints "Profiling started" and "[INFO] ..."
lines on stdout: run() drops them before the programs' own output is parsed.
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

    def __init__(self, kind, hz=None, extra=None, files=True):
        self.kind = kind  # "none", a key of LIBS, or one of PEERS
        self.hz = hz
        self.extra = extra or {}
        self.files = files  # libddprof: profiles to files (else its default exporter)
        self.dir = None

    @property
    def name(self):
        return self.kind if self.hz is None else "%s@%d" % (self.kind, self.hz)

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


def run(prof, argv, timeout=RUN_TIMEOUT, preload_var="LD_PRELOAD"):
    """Runs argv under prof: (stdout, wall seconds, process CPU seconds, maxrss KiB).
    Raises Hung when it has to be killed (gperftools and async-profiler sometimes
    deadlock in fork), Crashed
    when it fails under a profiler (signal or exit status).
    preload_var: the variable that gets the profiler's library (see maxrss.c)."""
    env = prof.env()
    if preload_var != "LD_PRELOAD" and "LD_PRELOAD" in env:
        env[preload_var] = env.pop("LD_PRELOAD")
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


OVERHEAD_KEYS = ("work_wall", "work_cpu", "proc_wall", "proc_cpu")
OVERHEAD_LABELS = {"work_wall": "work wall", "work_cpu": "work CPU",
                   "proc_wall": "process wall", "proc_cpu": "process CPU"}
# overhead.json: a libddprof row's within-round ratios to each peer and to the before
# build, under these keys (and KEY + "_ci"); "vs_gperftools" predates async-profiler and
# keeps its name.
VS_KEY = {"gperftools": "vs_gperftools", "async-profiler": "vs_asprof",
          "libddprof-before": "vs_before"}


def bench_overhead(resdir):
    rates = [19, 99, 250, 1000]
    millions = 200 if QUICK else 600
    # One round's ratio (a run under a profiler / the baseline run next to it) has a
    # standard deviation of 1.1 to 2% on these machines (40 rounds at 99 Hz and at 1 kHz,
    # stop 21), and longer runs hardly lower it (1.2% at 4x the work): the machine's
    # speed drifts from run to run. Both profilers cost ~0.1-0.5% here, so the median
    # of 11 rounds (standard error ~0.5%) decided the targets by chance. The target
    # rates get 33 rounds (~0.3%); 19 Hz and 250 Hz, only plotted, keep 11. Each round
    # runs the baseline, libddprof (and its before build), gperftools and async-profiler
    # back to back: the comparison with a peer is the median of their ratio within a
    # round (vs_gperftools, vs_asprof, vs_before).
    rounds = [2 if QUICK else (33 if hz in (99, 1000) else 11) for hz in rates]
    groups = [[Profiler(k, hz) for k in MINE + PEERS] for hz in rates]

    def measure(prof):
        out, wall, cpu, _ = run(prof, [os.path.join(BENCH, "fixed_work"), "2", str(millions)])
        f = fields(out)
        return {"work_wall": f["wall_s"], "work_cpu": f["cpu_s"], "proc_wall": wall,
                "proc_cpu": cpu}

    results = grouped(groups, rounds, measure)
    res = {"threads": 2, "millions_per_thread": millions, "rounds": max(rounds),
           "rows": []}
    for group, rs in zip(groups, results):
        for c in group:
            ps = [(r["none"], r[c.name]) for r in rs]
            row = {"profiler": c.kind, "hz": c.hz, "rounds": len(ps),
                   "base_work_wall": median([b["work_wall"] for b, _ in ps]),
                   "ci": {}, "per_round": {}}
            for k in OVERHEAD_KEYS:
                xs = [m[k] / b[k] for b, m in ps]
                row[k] = median(xs)
                row["ci"][k] = median_ci(xs)
                row["per_round"][k] = xs
                if len(xs) > 1:
                    row.setdefault("sd", {})[k] = statistics.stdev(xs)
            # Wall time outside the work (start-up, exit flush), beyond the baseline's.
            row["outside_ms"] = median([((m["proc_wall"] - m["work_wall"]) -
                                         (b["proc_wall"] - b["work_wall"])) * 1e3
                                        for b, m in ps])
            if c.kind == "libddprof":
                for g in group:
                    if g.kind not in VS_KEY:
                        continue
                    rel = {k: [r[c.name][k] / r[g.name][k] for r in rs]
                           for k in OVERHEAD_KEYS}
                    row[VS_KEY[g.kind]] = {k: median(xs) for k, xs in rel.items()}
                    row[VS_KEY[g.kind] + "_ci"] = {k: median_ci(xs) for k, xs in rel.items()}
            res["rows"].append(row)
    if BEFORE:
        # The target rates: each key's ratio to the baseline for both builds, and their
        # ratio within each round (vs_before's values).
        res["before_after"] = [
            before_after("overhead.%d.%s" % (hz, k),
                         "CPU overhead %d Hz, %s" % (hz, OVERHEAD_LABELS[k]),
                         [r["libddprof@%d" % hz][k] / r["none"][k] for r in rs],
                         [r["libddprof-before@%d" % hz][k] / r["none"][k] for r in rs],
                         [r["libddprof@%d" % hz][k] / r["libddprof-before@%d" % hz][k]
                          for r in rs], "lower")
            for hz, rs in zip(rates, results) if hz in (99, 1000) for k in OVERHEAD_KEYS]
    write(resdir, "overhead.json", res)
    for r in res["rows"]:
        if r["work_wall"] is None:
            continue
        vs = "".join("  / %s: work wall %.3f cpu %.3f" % (
            peer, r[key]["work_wall"], r[key]["work_cpu"])
            for peer, key in VS_KEY.items() if r.get(key) and r[key]["work_wall"])
        print("  %-16s %5d Hz  work wall %.3f cpu %.3f  process wall %.3f cpu %.3f%s" %
              (r["profiler"], r["hz"], r["work_wall"], r["work_cpu"], r["proc_wall"],
               r["proc_cpu"], vs))
    print_before_after(res.get("before_after", []))


def bench_accuracy(resdir):
    """Two workloads: cpu_split (the integration tests' accuracy workload: each thread
    burns a CPU time) and fixed_work (the same amount of work per thread, calibrated to
    the same CPU time; reports its working threads' own CPU clocks). The denominator is
    the kernel's CPU time of the whole process from wait4 (start-up and exit included,
    so the profiler's own thread too: libddprof profiles it as "[profiler]"); fixed_work
    adds the working threads' clocks alone."""
    threads = [1, 4, 16, 64]
    secs = 0.1 if QUICK else 0.4
    reps = 1 if QUICK else 3
    out, _, _, _ = run(Profiler("none"), [os.path.join(BENCH, "fixed_work"), "1", "200"])
    f = fields(out)
    millions = 200 * secs / f["cpu_s"]  # iterations for `secs` of CPU per thread
    kinds = MINE + PEERS
    # Run by run, every profiler in random order (the same thread count and repetition),
    # so that the builds' runs of a repetition can be paired.
    cpu_split = {}  # (kind, hz, threads, rep) -> profile / kernel
    fixed = {}  # (kind, hz, threads) -> (profile / process, profile / working threads)
    for hz in (99, 1000):
        for n in threads:
            for rep in range(reps):
                for kind in random.sample(kinds, len(kinds)):
                    prof = Profiler(kind, hz)
                    try:
                        out, _, cpu, _ = run(prof, [os.path.join(WORKLOADS, "cpu_split"),
                                                    str(n), str(secs)])
                        kernel = cpu * 1e9
                        total, _, _ = prof.profile_cpu_ns()
                        cpu_split[(kind, hz, n, rep)] = total / kernel
                        prof.cleanup()
                        if rep > 0:  # the diagnostic figure: one run (time budget)
                            continue
                        out, _, cpu, _ = run(prof, [os.path.join(BENCH, "fixed_work"), str(n),
                                                    "%.1f" % millions])
                        f = fields(out)
                        total, _, _ = prof.profile_cpu_ns()
                        fixed[(kind, hz, n)] = (total / (cpu * 1e9), total / (f["cpu_s"] * 1e9))
                    except Hung as e:
                        print("  %s (run left out)" % e)
                    prof.cleanup()
    rows = []
    for hz in (99, 1000):
        for kind in kinds:
            for n in threads:
                ratios = [cpu_split[(kind, hz, n, rep)] for rep in range(reps)
                          if (kind, hz, n, rep) in cpu_split]
                fw = fixed.get((kind, hz, n), (None, None))
                rows.append({"profiler": kind, "hz": hz, "threads": n,
                             "ratio": median(ratios), "runs": ratios,
                             "ratio_fixed": fw[0], "ratio_threads": fw[1]})
                print("  %-16s %5d Hz %3d threads  profile/kernel %s; fixed_work: "
                      "/process %s, /working threads %s" %
                      (kind, hz, n, fmt(median(ratios)), fmt(fw[0]), fmt(fw[1])))
    res = {"cpu_seconds_per_thread": secs, "reps": reps, "rows": rows}
    if BEFORE:
        # The error |profile / kernel - 1| in %, every thread count and repetition of a
        # rate; paired: the two builds' runs of the same thread count and repetition
        # (an error's ratio would explode near 0: their difference, in points).
        res["before_after"] = []
        for hz in (99, 1000):
            err = {k: {(n, rep): abs(cpu_split[(k, hz, n, rep)] - 1) * 100
                       for n in threads for rep in range(reps) if (k, hz, n, rep) in cpu_split}
                   for k in MINE}
            res["before_after"].append(before_after(
                "accuracy.%d" % hz, "accuracy %d Hz, error (profile / kernel vs 1)" % hz,
                list(err["libddprof"].values()), list(err["libddprof-before"].values()),
                [a - b for a, b in same_rounds(err["libddprof"], err["libddprof-before"])],
                "lower", how="difference", unit="%"))
    write(resdir, "accuracy.json", res)
    print_before_after(res.get("before_after", []))


def fmt(x):
    return "n/a" if x is None else "%.3f" % x


def bench_spawn(resdir):
    rounds = 2 if QUICK else 7
    n_threads = 3000 if QUICK else 20000
    n_forks = 200 if QUICK else 1000
    n_storm = 100 if QUICK else 300
    cands = [Profiler(k) for k in MINE + PEERS]
    res = {"rounds": rounds, "threads": n_threads, "forks": n_forks, "storm": n_storm,
           "rows": []}
    # The steady state of a process that forks after it has uploaded over HTTP: a local
    # intake, a 1 s upload period, 1.5 s of warm-up before the forks (without the agent
    # the same warm-up is run). libddprof's own case: the peers do not upload (their
    # plain fork case is the one to compare with).
    intake_dir = tempfile.mkdtemp(prefix="ddprof-bench-intake-")
    port_file = os.path.join(intake_dir, "port")
    intake = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "intake_server.py"),
                               "--out", os.path.join(intake_dir, "out"), "--port", "0",
                               "--port-file", port_file],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if os.path.exists(port_file):
            break
        time.sleep(0.05)
    with open(port_file) as f:
        url = "http://127.0.0.1:%s" % f.read().strip()
    uploading = [Profiler(k, extra={"DD_TRACE_AGENT_URL": url,
                                    "DD_PROFILING_UPLOAD_PERIOD": "1"}) for k in MINE]
    res["after_upload_warmup_s"] = 1.5
    # Thread create+join swings by +-0.1 from run to run on these machines (gperftools,
    # which does nothing per thread, got 0.82 and 0.93 in two runs): its runs take half
    # a second, so it gets three times the pairs. One fork pair's ratio has a standard
    # deviation of 0.1-0.15 here (0.62 to 1.04 within 8 pairs at one commit): with 14
    # pairs the median moved 0.79-0.83 between full runs of the same code, so the fork
    # cases get 30 (a 95% interval of about +-0.04; shown in the report).
    fork_rounds = 6 if QUICK else 30
    cases = [("threads", [os.path.join(BENCH, "bench_spawn"), "threads", str(n_threads)], cands,
              rounds * 3),
             ("fork", [os.path.join(BENCH, "bench_spawn"), "fork", str(n_forks)], cands,
              fork_rounds),
             ("fork_after_upload",
              [os.path.join(BENCH, "bench_spawn"), "fork", str(n_forks), "1.5"], uploading,
              fork_rounds),
             ("fork_storm", [os.path.join(WORKLOADS, "fork_storm"), str(n_storm)], cands)]
    if BEFORE:
        res["before_after"] = []
    try:
        spawn_cases(res, rounds, cases)
    finally:
        intake.kill()
        intake.wait()
        shutil.rmtree(intake_dir, ignore_errors=True)
    write(resdir, "spawn.json", res)
    print_before_after(res.get("before_after", []))


# The spawn cases' names in the before/after figures.
SPAWN_LABELS = {"threads": "thread create+join", "fork": "fork+exit+wait",
                "fork_after_upload": "fork+exit+wait, after an upload",
                "fork_storm": "fork_storm"}


def spawn_cases(res, rounds, cases):
    for case, argv, cands, *more in cases:
        case_rounds = more[0] if more else rounds
        def measure(prof, argv=argv):
            # A normal run takes a few seconds; gperftools sometimes deadlocks in fork.
            # So does async-profiler 4.5 (about 1 run of `bench_spawn fork 200` in 12 here):
            # a forked child spins for ever in its library's destructor (__cxa_finalize,
            # at exit), on a lock another thread of the parent held at the fork. Every
            # child of it that exits writes its own profile file.
            out, _, _, _ = run(prof, argv, timeout=SPAWN_TIMEOUT)
            return fields(out)["rate"]

        HUNG.clear()
        pairs = paired(cands, case_rounds, measure)
        for c in cands:
            ps = pairs[c.name]
            ratios = [m / b for _, b, m in ps]
            row = {"case": case, "profiler": c.kind, "base_rate": median([b for _, b, _ in ps]),
                   "rate": median([m for _, _, m in ps]), "ratio": median(ratios),
                   "ratio_ci": median_ci(ratios), "ratios": ratios,
                   "pairs": len(ps), "hung": HUNG.get(c.name, 0)}
            res["rows"].append(row)
            if not ps:
                print("  %-17s %-16s every run hung" % (case, c.kind))
                continue
            print("  %-17s %-16s %9.0f/s vs %9.0f/s  ratio %.3f  (%d hung)" %
                  (case, c.kind, row["rate"], row["base_rate"], row["ratio"], row["hung"]))
        if "libddprof-before" in pairs:
            # Each build's ratio to its own baseline run; paired: the two builds' rates
            # within a round (their baselines only add noise to that).
            a, b = ({r: (m / base, m) for r, base, m in pairs[k]}
                    for k in ("libddprof", "libddprof-before"))
            res["before_after"].append(before_after(
                "spawn." + case, SPAWN_LABELS[case], [x[0] for x in a.values()],
                [x[0] for x in b.values()], [x[1] / y[1] for x, y in same_rounds(a, b)],
                "higher"))


def bench_startup(resdir):
    n = 60 if QUICK else 400
    # libddprof as a user gets it: no environment, its default exporter (the Datadog
    # agent on localhost:8126, never reached: /bin/true ends before any upload).
    cands = [Profiler(k, files=False) for k in MINE] + [Profiler(k) for k in PEERS]
    true = shutil.which("true") or "/bin/true"

    def measure(prof):
        env = prof.env()
        t0 = time.perf_counter()
        # stdout too: async-profiler prints "Profiling started" there.
        pid = os.posix_spawn(true, [true], env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, "/dev/null", os.O_WRONLY, 0)])
        os.waitpid(pid, 0)
        return time.perf_counter() - t0

    pairs = paired(cands, n, measure)
    rows = []
    for c in cands:
        ps = pairs[c.name]
        rows.append({"profiler": c.kind, "base_ms": median([b for _, b, _ in ps]) * 1e3,
                     "extra_ms": median([m - b for _, b, m in ps]) * 1e3})
        print("  %-16s /bin/true +%.3f ms (baseline %.3f ms)" %
              (c.kind, rows[-1]["extra_ms"], rows[-1]["base_ms"]))
    res = {"runs": n, "rows": rows}
    if BEFORE:
        # Extra ms of each build over its own baseline run; paired: the difference of the
        # two builds' times within a round.
        a, b = ({r: ((m - base) * 1e3, m * 1e3) for r, base, m in pairs[k]}
                for k in ("libddprof", "libddprof-before"))
        res["before_after"] = [before_after(
            "startup", "start-up (/bin/true), extra", [x[0] for x in a.values()],
            [x[0] for x in b.values()], [x[1] - y[1] for x, y in same_rounds(a, b)],
            "lower", how="difference", unit="ms")]
    write(resdir, "startup.json", res)
    print_before_after(res.get("before_after", []))


def bench_memory(resdir):
    secs = 0.05 if QUICK else 0.5
    rounds = 1  # long runs (~16 s each in full) and a steady figure
    # With a before build, the two builds at the default ceiling run in more rounds (just
    # the two, in random order): an interval of their ratio needs 6 pairs.
    pair_rounds = (3 if QUICK else 6) if BEFORE else 0
    hz = 1000
    cands, labels = [], []
    for k in MINE:
        cands += [Profiler(k, hz), Profiler(k, hz, {"DD_PROFILING_MAX_MEMORY": "256KiB"})]
        labels += ["default ceiling (64 MiB)", "ceiling 256 KiB"]
    pair = [i for i, c in enumerate(cands) if not c.extra]  # the builds' default ceilings
    cands += [Profiler(k, hz) for k in PEERS]
    labels += [""] * len(PEERS)
    res = {"threads": 64, "cpu_seconds_per_thread": secs, "hz": hz, "rounds": rounds,
           "pair_rounds": pair_rounds, "rows": []}
    base = Profiler("none")
    # Through build/bench/maxrss: a peak RSS read here would include this runner's.
    argv = [os.path.join(BENCH, "maxrss"), os.path.join(BENCH, "many_stacks"), "64", str(secs)]

    def peak(prof):
        """(peak RSS KiB from start to exit, peak at the end of main: before the
        profiler's exit flush)"""
        out, _, _, _ = run(prof, argv, preload_var="BENCH_PRELOAD")
        f = fields(out)
        return f["child_maxrss_kib"], f["maxrss_kib"]
    samples = [[] for _ in cands]
    brss = None
    for ri in range(max(rounds, pair_rounds)):
        # One baseline per round (the runs are long; the pair's extra rounds reuse the
        # last one: the program's own peak hardly moves); candidates in random order.
        if ri < rounds or brss is None:
            try:
                brss = peak(base)
            except Hung as e:
                print("  %s (round left out)" % e)
                continue
        order = list(range(len(cands))) if ri < rounds else list(pair)
        random.shuffle(order)
        for i in order:
            c = cands[i]
            try:
                rss = peak(c)
            except Hung as e:
                print("  %s (run left out)" % e)
                c.cleanup()
                continue
            _, stacks, dropped = c.profile_cpu_ns()
            samples[i].append((brss[0], rss[0], stacks, dropped, rss[1] - brss[1], ri))
            c.cleanup()
    for i, c in enumerate(cands):
        s = samples[i]
        row = {"profiler": c.kind, "config": labels[i],
               "base_kib": median([x[0] for x in s]),
               "extra_kib": median([x[1] - x[0] for x in s]),
               "extra_run_kib": median([x[4] for x in s]),
               "stacks": median([x[2] for x in s]),
               "dropped": median([x[3] for x in s]), "runs": len(s)}
        res["rows"].append(row)
        if s:
            print("  %-16s %-24s +%.1f MiB (+%.1f MiB before exit; baseline %.1f MiB), "
                  "%d stacks, %d dropped" %
                  (c.kind, row["config"], row["extra_kib"] / 1024, row["extra_run_kib"] / 1024,
                   row["base_kib"] / 1024, row["stacks"], row["dropped"]))
    if BEFORE:
        # Extra peak RSS (MiB) of each build; paired: their ratio within a round.
        a, b = ({x[5]: (x[1] - x[0]) / 1024 for x in samples[i]} for i in pair)
        res["before_after"] = [before_after(
            "memory", "memory, 64 threads, default ceiling: extra peak RSS",
            list(a.values()), list(b.values()), [x / y for x, y in same_rounds(a, b)],
            "lower", unit="MiB")]
    write(resdir, "memory.json", res)
    print_before_after(res.get("before_after", []))


MICRO_TIMEOUT = 300  # seconds; a --quick run takes 0.5-6 s


def micro_lines(out):
    """{"name arg": value} from lines "name arg value ..." (bench_handler: unwinder, depth,
    ns per sample; bench_trie: mode, threads, puts/s), without comments and the kernel's
    signal delivery (the same code in both builds)."""
    vals = {}
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 3 and not p[0].startswith("#") and p[0] != "signal-delivery":
            vals["%s %s" % (p[0], p[1])] = float(p[2])
    return vals


def micro_serialize(out):
    """bench_serialize's cold and warm times (ms) from its "key value ..." line."""
    f = fields(out)
    return {"cold": f["cold_ms"], "warm": f["warm_ms"]}


# The micro-benchmarks compared: name, program, its parser, the unit (and the factor from
# the program's values to it), which way is better, the label of a key, the keys compared.
# The trie's figures at 1 and 2 threads only: at the --quick size, more threads than the 2
# cores give rates that swing by several times from run to run (thread start-up and
# scheduling, not the trie).
MICRO = (("handler", "bench_handler", micro_lines, "ns", 1, "lower",
          lambda key: "handler %s, depth %s" % tuple(key.split()), lambda key: True),
         ("trie", "bench_trie", micro_lines, "M puts/s", 1e-6, "higher",
          lambda key: "trie %s, %s thread(s)" % tuple(key.split()),
          lambda key: int(key.split()[1]) <= 2),
         ("serialize", "bench_serialize", micro_serialize, "ms", 1, "lower",
          lambda key: "serialization, %s" % key, lambda key: True))


def bench_micro(resdir):
    """The micro-benchmarks (scripts/bench/run runs the current build's at full size for
    their tables) of both builds, alternated: each round runs both builds' program in
    random order, at the --quick size (0.5-6 s a run where the full size takes 3-60 s,
    so that rounds are many and a round's two runs are seconds apart). Their figure:
    the median over the rounds of each build's value, paired: their ratio in a round."""
    rounds = 3 if QUICK else 8
    dirs = {"libddprof": BENCH, "libddprof-before": os.path.join(BASE_DIR, "build", "bench")}
    res = {"rounds": rounds, "size": "--quick", "before_after": []}
    for name, prog, parse, unit, scale, better, label, compared in MICRO:
        paths = {k: os.path.join(d, prog) for k, d in dirs.items()}
        if not os.path.exists(paths["libddprof-before"]):
            print("  %s: the before build has no %s: left out" % (name, prog))
            continue
        runs = {k: [] for k in paths}
        for _ in range(rounds):
            for k in random.sample(list(paths), len(paths)):
                out = subprocess.run([paths[k], "--quick"], env=base_env(),
                                     stdout=subprocess.PIPE, check=True,
                                     timeout=MICRO_TIMEOUT).stdout.decode()
                runs[k].append(parse(out))
        after, before = runs["libddprof"], runs["libddprof-before"]
        for key in after[0]:
            if not compared(key) or not all(key in r for r in after + before):
                continue
            a, b = [r[key] * scale for r in after], [r[key] * scale for r in before]
            res["before_after"].append(before_after(
                "%s.%s" % (name, key.replace(" ", ".")), label(key), a, b,
                [x / y for x, y in zip(a, b)], better, unit=unit))
    write(resdir, "micro.json", res)
    print_before_after(res["before_after"])


def main():
    resdir = sys.argv[1]
    os.makedirs(resdir, exist_ok=True)
    only = [a for a in sys.argv[2:] if not a.startswith("--")]
    if "async-profiler" not in PEERS:
        print("bench: %s not found: async-profiler left out (set BENCH_ASPROF)" % ASPROF)
    if BASE_REV:
        commit = ""
        if BEFORE:
            with open(os.path.join(BASE_DIR, ".commit")) as f:
                commit = f.read().strip()
            print("bench: before column: libddprof at %s (%s)" % (BASE_REV, BASE_DIR))
        write(resdir, "base.json", {"rev": BASE_REV, "commit": commit, "built": bool(BEFORE)})
    benches = ([("micro", bench_micro)] if BEFORE else []) + [
        ("overhead", bench_overhead), ("accuracy", bench_accuracy),
        ("spawn", bench_spawn), ("startup", bench_startup), ("memory", bench_memory)]
    for name, fn in benches:
        if only and name not in only:
            continue
        t0 = time.monotonic()
        print("bench: %s" % name, flush=True)
        fn(resdir)
        print("  (%.0f s)" % (time.monotonic() - t0), flush=True)


if __name__ == "__main__":
    main()
