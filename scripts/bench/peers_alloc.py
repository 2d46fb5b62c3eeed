"""alloc.json of peers.py: the allocation profilers' benchmarks.

Candidates, each against no profiler in the same round:
  libddprof off   preloaded with its defaults: CPU profiling only, the allocation and
                  live heap profiles off (malloc does not pass through libddprof)
  libddprof on    DD_PROFILING_ALLOCATION_ENABLED=true and DD_PROFILING_HEAP_ENABLED=true
                  at the default mean interval (DD_PROFILING_HEAP_SAMPLE_SIZE, 512 KiB)
  heaptrack       Debian's heaptrack, run as its documentation says (`heaptrack -o FILE
                  PROGRAM ARGS`): every allocation and free is written to its
                  interpreter and compressor, which run beside the program; its script
                  waits for them, so the run's wall time is its full cost
  async-profiler nativemem
                  its native library with ASPROF_COMMAND=start,nativemem=524288,...:
                  sampled every 512 KiB on average, as libddprof is

Workloads:
  micro        build/bench/alloc_churn: 2 threads, PAIRS malloc/free pairs each, mixed
               sizes (16 B to 64 KiB, about 1.5 KB on average), 64 live blocks per
               thread, started after a pause of PAUSE_S: the steady cost. Its own timing
               gives the ns of a pair: wall (the work's wall time / the pairs of one
               thread) and CPU (the workers' CPU clocks / all pairs)
  micro-start  the same from the process's start, no pause: libddprof builds its unwind
               tables a second after start-up, and until then unwinds its allocation
               samples from the CFI in memory, which costs more a sample (CPU ns per
               pair, medians of 6 runs on a shared 2-core VM at load 5-15, so only a
               hint: no profiler ~61, hooks alone (a 1 GiB interval) ~70, on ~89 over
               2M pairs a thread; over 10M, on ~76 against ~65)
  python       Debian's /usr/bin/python3 (not the first python3 on PATH) running
               scripts/bench/alloc_workload.py: large lists and dicts built and dropped

Every run goes through build/bench/maxrss for its peak RSS (heaptrack's: its script's
and its helpers' too, the largest of them). Rounds are grouped (peers_common.grouped):
the baseline and each candidate of a group back to back in random order, so candidates
compare with each other within a round. On the micro-benchmark heaptrack costs
microseconds a pair (seconds a run), so there it has a group of its own with
`libddprof on` and fewer rounds, from the start only (it has no start-up phase; the
pause would only add seconds). Before the rounds, each peer runs each workload once,
small: a peer that fails there (not installed, crashed) is left out of that workload,
with the reason in alloc.json.

The before build is not run here: it predates allocation profiling.

async-profiler 4.5's nativemem crashed (SIGSEGV) in every run of Debian 12's python3
here, at its start-up (setlocale): a stack overflow of its free hook calling itself.
gdb showed the function it keeps as the real free is python3.11's free@plt (a non-PIE
executable, whose PLT entries are the functions' canonical addresses), which jumps
through the GOT slot it patched to its hook. The probe leaves it out of that workload.
"""
import json
import os
import re
import signal
import subprocess

from peers_common import (ASPROF_NATIVEMEM, BENCH, HEAPTRACK, HUNG, RUN_TIMEOUT, Crashed,
                          Hung, PEERS, PPROF_DUMP, Profiler, QUICK, ROOT, grouped, median,
                          median_ci, read_collapsed, run, write)

PYTHON = "/usr/bin/python3"
THREADS = 2
PAIRS = 200000 if QUICK else 2000000  # per thread: ~0.15-0.5 s without a profiler
LIVE = 64
PAUSE_S = 1.5  # micro: past libddprof's table build (1 s after start)
PY_ROUNDS, PY_N = (2, 300000) if QUICK else (12, 1000000)  # ~2.5-3 s without a profiler
CHURN = os.path.join(BENCH, "alloc_churn")
WORKLOADS = {
    "micro": [CHURN, str(THREADS), str(PAIRS), str(LIVE), str(PAUSE_S)],
    "micro-start": [CHURN, str(THREADS), str(PAIRS), str(LIVE), "0"],
    "python": [PYTHON, os.path.join(ROOT, "scripts", "bench", "alloc_workload.py"),
               str(PY_ROUNDS), str(PY_N)],
}
MICRO = ("micro", "micro-start")
# The probe before the rounds: the same programs, small.
PROBES = {"micro": [CHURN, "2", "1000"], "micro-start": [CHURN, "2", "1000"],
          "python": WORKLOADS["python"][:2] + ["1", "1000"]}
# The line each workload prints its timing on (the rest of stdout: heaptrack's script,
# the maxrss launcher).
RESULT_KEY = {"micro": "pairs_per_thread", "micro-start": "pairs_per_thread",
              "python": "rounds"}
# Rounds: one round's ratio varies by several % on these machines (the machine's drift;
# a 1 s Python run by 5-10%, now and then by 40%), so figures are medians of many, and
# the Python runs last a few seconds: a 3% target needs an interval narrower than that.
# heaptrack's rounds on the micro-benchmark take ~4-8 s (microseconds a pair).
ROUNDS = {"micro": 3 if QUICK else 21, "micro-start": 3 if QUICK else 21,
          "micro_heaptrack": 2 if QUICK else 6, "python": 2 if QUICK else 15}
KEYS = ("work_wall", "work_cpu", "proc_wall", "proc_cpu")
ON_ENV = {"DD_PROFILING_ALLOCATION_ENABLED": "true", "DD_PROFILING_HEAP_ENABLED": "true"}


def heap_bound_kib():
    """The live heap's memory bound (KiB): its table's default budget
    (CONFIG_DEFAULT_HEAP_TABLE, common/config.h) and its two stack stores' ceiling
    (LIVE_HEAP_STACKS_CEILING each, agent/alloc/live_heap.h), read from the headers."""
    total = 0
    for path, name, count in (("common/config.h", "CONFIG_DEFAULT_HEAP_TABLE", 1),
                              ("agent/alloc/live_heap.h", "LIVE_HEAP_STACKS_CEILING", 2)):
        with open(os.path.join(ROOT, path)) as f:
            m = re.search(r"#define %s \(+(?:size_t\))?(\d+)(?:ULL)? << 20\)" % name, f.read())
        if not m:
            raise RuntimeError("%s not found in %s" % (name, path))
        total += count * int(m.group(1)) * 1024
    return total


def candidates():
    return {"off": Profiler("libddprof", label="libddprof off"),
            "on": Profiler("libddprof", extra=ON_ENV, label="libddprof on"),
            "heaptrack": Profiler("heaptrack"),
            "asprof": Profiler("async-profiler", mode="nativemem",
                               label="async-profiler nativemem")}


def line_fields(out, key):
    """The 'k v k v ...' line of out that starts with key, as a dict of floats."""
    for line in out.splitlines():
        p = line.split()
        if p and p[0] == key:
            return {k: float(v) for k, v in zip(p[0::2], p[1::2])}
    raise RuntimeError("no %r line in the output: %r" % (key, out[-500:]))


def estimated_bytes(prof):
    """The bytes allocated as the last run's profiles estimate them: libddprof's
    alloc-space total; async-profiler's samples x its interval. None for the others."""
    if prof.label == "libddprof on":
        files = sorted(os.path.join(prof.dir, f) for f in os.listdir(prof.dir))
        if not files:
            return 0
        out = subprocess.run([PPROF_DUMP, "--json"] + files, check=True,
                             stdout=subprocess.PIPE).stdout.decode()
        total = 0
        for line in out.splitlines():
            d = json.loads(line)
            kinds = [t[0] for t in d["sample_types"]]
            if "alloc-space" in kinds:
                total += d["totals"][kinds.index("alloc-space")]
        return total
    if prof.kind == "async-profiler":
        return sum(read_collapsed(os.path.join(prof.dir, f))[0]
                   for f in os.listdir(prof.dir)) * ASPROF_NATIVEMEM
    return None


def measure(workload, argv, prof):
    out, wall, cpu, _ = run(prof, [os.path.join(BENCH, "maxrss")] + argv,
                            preload_var="BENCH_PRELOAD", program_at=1)
    f = line_fields(out, RESULT_KEY[workload])
    m = {"work_wall": f["wall_s"], "work_cpu": f["cpu_s"], "proc_wall": wall,
         "proc_cpu": cpu, "rss_kib": line_fields(out, "child_maxrss_kib")["child_maxrss_kib"]}
    if workload in MICRO:
        m["requested_bytes"] = f["bytes_per_pair"] * f["pairs_per_thread"] * f["threads"]
    if prof.kind != "none":
        m["estimated_bytes"] = estimated_bytes(prof)
    return m


def failure(e):
    """What a failed probe run did: crashed (with its signal: maxrss exits 128 + it),
    failed, or hung."""
    if isinstance(e, Crashed):
        m = re.search(r"(exited|died of signal) (\d+)$", str(e))
        if m:
            how, n = m.group(1), int(m.group(2))
            if how == "exited" and 128 < n < 128 + signal.NSIG:
                how, n = "died of signal", n - 128
            if how == "died of signal":
                try:
                    return "crashed (%s)" % signal.Signals(n).name
                except ValueError:
                    return "crashed (signal %d)" % n
            return "failed (exit status %d)" % n
    elif isinstance(e, Hung):
        return "hung (killed after %d s)" % RUN_TIMEOUT
    return "failed (%s)" % e


def probe(workload, cands):
    """The candidates that run the workload, small, without failing; and the others with
    the reason."""
    ok, left_out = [], []
    for c in cands:
        reason = None
        if c.kind == "heaptrack" and not os.path.exists(HEAPTRACK):
            reason = "%s not installed (Debian's heaptrack)" % HEAPTRACK
        elif c.kind == "async-profiler" and "async-profiler" not in PEERS:
            reason = "its library was not found (BENCH_ASPROF)"
        else:
            try:
                measure(workload, PROBES[workload], c)
            except (Hung, RuntimeError, OSError) as e:
                reason = "%s in a probe run (`%s`)" % (
                    failure(e), " ".join(os.path.basename(a) for a in PROBES[workload]))
            c.cleanup()
        if reason:
            print("  %s: %s left out: %s" % (workload, c.name, reason))
            left_out.append({"workload": workload, "profiler": c.name, "reason": reason})
        else:
            ok.append(c)
    return ok, left_out


def per_pair(workload, m):
    """The micro-benchmark's ns per pair: wall (one thread's), CPU (per pair of all
    threads), the whole run's wall (one thread's pairs)."""
    if workload not in MICRO:
        return {}
    return {"wall": m["work_wall"] * 1e9 / PAIRS, "cpu": m["work_cpu"] * 1e9 / (PAIRS * THREADS),
            "proc": m["proc_wall"] * 1e9 / PAIRS}


def row_of(workload, c, rs):
    """A candidate's figures over the rounds rs of its group ({name: measure} each)."""
    ps = [(r["none"], r[c.name]) for r in rs]
    row = {"workload": workload, "profiler": c.name, "rounds": len(ps),
           "hung": HUNG.get(c.name, 0), "ratio": {}, "ratio_ci": {}}
    for k in KEYS:
        xs = [m[k] / b[k] for b, m in ps]
        row["ratio"][k] = median(xs)
        row["ratio_ci"][k] = median_ci(xs)
        row["base_" + k] = median([b[k] for b, _ in ps])
        row[k] = median([m[k] for _, m in ps])
    if workload in MICRO:
        row["ns_per_pair"] = {}
        row["base_ns_per_pair"] = {}
        row["extra_ns"] = {}
        row["extra_ns_ci"] = {}
        for k in ("wall", "cpu", "proc"):
            xs = [per_pair(workload, m)[k] - per_pair(workload, b)[k] for b, m in ps]
            row["ns_per_pair"][k] = median([per_pair(workload, m)[k] for _, m in ps])
            row["base_ns_per_pair"][k] = median([per_pair(workload, b)[k] for b, _ in ps])
            row["extra_ns"][k] = median(xs)
            row["extra_ns_ci"][k] = median_ci(xs)
    rss = [m["rss_kib"] - b["rss_kib"] for b, m in ps]
    row["base_rss_kib"] = median([b["rss_kib"] for b, _ in ps])
    row["extra_rss_kib"] = median(rss)
    row["extra_rss_kib_ci"] = median_ci(rss)
    est = [m["estimated_bytes"] / m["requested_bytes"] for _, m in ps
           if m.get("estimated_bytes") is not None and m.get("requested_bytes")]
    row["estimated_over_requested"] = median(est)
    row["estimated_bytes"] = median([m["estimated_bytes"] for _, m in ps
                                     if m.get("estimated_bytes") is not None])
    return row


def vs(rs, a, b):
    """a / b within each round of rs (both ran in it): medians and intervals per key."""
    both = [r for r in rs if a in r and b in r]
    rel = {k: [r[a][k] / r[b][k] for r in both] for k in KEYS}
    return {"rounds": len(both), "ratio": {k: median(xs) for k, xs in rel.items()},
            "ratio_ci": {k: median_ci(xs) for k, xs in rel.items()}}


def run_workload(workload, res):
    cs = candidates()
    peers, left_out = probe(workload, [cs["asprof"]] + (
        [] if workload == "micro" else [cs["heaptrack"]]))
    res["left_out"] += left_out
    groups, rounds, names = [[cs["off"], cs["on"]]], [ROUNDS[workload]], ["main"]
    for p in peers:
        if workload == "micro-start" and p.kind == "heaptrack":
            # A group of its own (see the top), with a libddprof on of its own.
            groups.append([Profiler("libddprof", extra=ON_ENV, label="libddprof on"), p])
            rounds.append(ROUNDS["micro_heaptrack"])
            names.append("heaptrack")
        else:
            groups[0].append(p)
    res["rounds"][workload] = dict(zip(names, rounds))
    HUNG.clear()
    results = grouped(groups, rounds, lambda c: measure(workload, WORKLOADS[workload], c))
    on = None
    for gi, (group, rs) in enumerate(zip(groups, results)):
        for c in group:
            if gi > 0 and c.label == "libddprof on":
                continue  # only there to be compared with heaptrack within its rounds
            row = row_of(workload, c, rs)
            res["rows"].append(row)
            if c.label == "libddprof on":
                on = row
    if on is not None:
        on["vs"] = {}
        for group, rs in zip(groups, results):
            for p in group:
                if p.kind in ("heaptrack", "async-profiler"):
                    on["vs"][p.name] = vs(rs, "libddprof on", p.name)
    for row in res["rows"]:
        if row["workload"] == workload:
            print_row(row)


def print_row(r):
    if not r["rounds"]:
        print("  %-11s %-25s no round" % (r["workload"], r["profiler"]))
        return
    ratio = r["ratio"]
    text = "  %-11s %-25s work wall %.3f cpu %.3f  process wall %.3f cpu %.3f" % (
        r["workload"], r["profiler"], ratio["work_wall"], ratio["work_cpu"],
        ratio["proc_wall"], ratio["proc_cpu"])
    if "extra_ns" in r:
        text += "  %+.1f ns/pair (cpu %+.1f, whole run %+.1f; %.1f ns without)" % (
            r["extra_ns"]["wall"], r["extra_ns"]["cpu"], r["extra_ns"]["proc"],
            r["base_ns_per_pair"]["wall"])
    text += "  peak RSS %+.1f MiB" % (r["extra_rss_kib"] / 1024)
    if r.get("estimated_over_requested") is not None:
        text += "  profiled/requested bytes %.3f" % r["estimated_over_requested"]
    for peer, v in r.get("vs", {}).items():
        text += "\n  %-11s %-25s / %s: work wall %.3f cpu %.3f  process wall %.3f cpu %.3f" % (
            "", "", peer, v["ratio"]["work_wall"], v["ratio"]["work_cpu"],
            v["ratio"]["proc_wall"], v["ratio"]["proc_cpu"])
    print(text)


def heaptrack_version():
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", "heaptrack"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
                          ).stdout.decode().strip() or None


def bench_alloc(resdir):
    for prog in (CHURN, os.path.join(BENCH, "maxrss")):
        if not os.path.exists(prog):
            raise SystemExit("bench: %s is missing: make all %s (make bench builds it)" % (
                prog, os.path.relpath(prog, ROOT)))
    version = subprocess.run([PYTHON, "-c", "import sys; print(sys.version.split()[0])"],
                             stdout=subprocess.PIPE).stdout.decode().strip()
    res = {"threads": THREADS, "pairs_per_thread": PAIRS, "live_per_thread": LIVE,
           "pause_s": PAUSE_S, "workloads": list(WORKLOADS), "python": PYTHON,
           "python_rounds": PY_ROUNDS, "python_n": PY_N, "python_version": version,
           "asprof_interval": ASPROF_NATIVEMEM, "heaptrack_version": heaptrack_version(),
           "heap_bound_kib": heap_bound_kib(), "rounds": {}, "left_out": [], "rows": []}
    for workload in WORKLOADS:
        run_workload(workload, res)
    write(resdir, "alloc.json", res)
