#!/usr/bin/python3
"""Turns the raw results of scripts/bench/run into BENCHMARKS.md (written to stdout).

usage: report.py RESULTS_DIR
Each benchmark writes a plain-text file into RESULTS_DIR; this script renders what it
finds, with the machine and the date, so the figures are always regenerated together.
"""
import datetime
import json
import math
import os
import platform
import subprocess
import sys


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = os.cpu_count()
    kernel = platform.release()
    return "%s, %d cores, Linux %s" % (cpu, cores, kernel)


def handler_section(path):
    rows = []
    header = ""
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                header = line[1:].strip()
                continue
            parts = line.split()
            if len(parts) >= 4:
                rows.append(parts)
    out = ["## Handler cost per sample", "",
           "What one sample costs inside the signal handler: unwind the interrupted stack "
           "and record it in the stack trie (`scripts/bench/bench_handler.c`). Same "
           "recursion, captured once, unwound and recorded 200k times; median of 7 runs. "
           "`fp`: frame-pointer unwinder on code with frame pointers (the baseline); "
           "`dwarf`: the DWARF CFI unwinder on the same stack; `dwarf-nofp`: the DWARF "
           "unwinder on the same recursion built without frame pointers; "
           "`dwarf-nofp-no-table`: the same before any unwind table is built (a process "
           "whose profiler thread has not started yet), every frame's rule read from the "
           "module's `.eh_frame_hdr` in memory (`agent/unwind/boot_cfi.c`; 4000 walks, ratio "
           "against `fp` measured alongside). The kernel's "
           "signal delivery to a no-op handler is shown for scale (every profiler pays "
           "it). Target: < 2 us at depth 10 with DWARF.", ""]
    if header:
        out += ["Unwind tables of this process: %s." % header, ""]
    out += ["| unwinder | depth | frames | ns per sample | ratio vs fp |",
            "|---|---|---|---|---|"]
    for name, depth, ns, ratio, *rest in rows:
        if name == "signal-delivery":
            continue
        frames = rest[0] if rest else ""
        out.append("| %s | %s | %s | %.0f | %.2f |" % (name, depth, frames, float(ns),
                                                       float(ratio)))
    for name, depth, ns, ratio, *rest in rows:
        if name == "signal-delivery":
            out += ["", "Kernel signal delivery + return (raise to a no-op handler): "
                    "%.0f ns." % float(ns)]
    return "\n".join(out) + "\n"



def load(res, name):
    path = os.path.join(res, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def verdict(ok):
    if ok is None:
        return "n/a"
    return "met" if ok else "**missed**"


def fmt(x, spec="%.3f"):
    return "n/a" if x is None else spec % x


# The peers libddprof is compared with, in the order shown; overhead.json keeps a libddprof
# row's within-round ratios to each under these keys (and KEY + "_ci"). Results from before
# async-profiler have gperftools alone: only the peers present in a result are shown.
PEERS = ("gperftools", "async-profiler")
VS_KEY = {"gperftools": "vs_gperftools", "async-profiler": "vs_asprof"}


def peers_in(rows):
    return [p for p in PEERS if any(r["profiler"] == p for r in rows)]


# libddprof built at an older revision (scripts/bench/build-base), run beside the current
# build when the run had one (base.json says which revision).
BEFORE = "libddprof-before"


def mine_in(rows):
    """The builds of libddprof in these rows: "libddprof", and the before build if it ran."""
    return ["libddprof"] + ([BEFORE] if any(r["profiler"] == BEFORE for r in rows) else [])


def peers_text(peers, conj="and"):
    """'gperftools', 'gperftools and async-profiler'"""
    return (", ".join(peers[:-1]) + " %s " % conj + peers[-1]) if len(peers) > 1 else \
        "".join(peers)


def better_text(peers):
    """The overhead target against the peers."""
    if len(peers) > 1:
        return "at or below the better of %s" % peers_text(peers)
    return "at or below %s" % (peers[0] if peers else "the peers")


def vs_peer(r, g, peer="gperftools"):
    """libddprof / the peer for each figure: measured within each round when the run
    recorded it, else from the two separate medians (older results)."""
    keys = ("work_wall", "work_cpu", "proc_wall", "proc_cpu")
    vs = r.get(VS_KEY[peer])
    if vs and vs.get("work_wall") is not None:
        return vs
    if g and g.get("work_wall"):
        return {k: r[k] / g[k] for k in keys}
    return {}


def rounds_text(ov):
    """'33 at 99 Hz, 11 at 19 Hz' from the rows (older results: one count for all)."""
    by = {}
    for r in ov["rows"]:
        if r["profiler"] == "libddprof":
            by.setdefault(r.get("rounds", ov["rounds"]), []).append("%d" % r["hz"])
    return "; ".join("%d at %s Hz" % (n, ", ".join(hz)) for n, hz in sorted(by.items(),
                                                                           reverse=True))


def overhead_section(ov, svg_name):
    rows = ov["rows"]
    peers = peers_in(rows)
    by = {(r["profiler"], r["hz"]): r for r in rows}
    targets = {99: 1.01, 1000: 1.03}
    out = ["## CPU overhead", "",
           "Fixed work, not fixed time: %d threads each run %d million iterations of the "
           "same loop (`scripts/bench/fixed_work.c`), so a profiler's cost shows as more "
           "time for the same work. `work`: wall time of the work and CPU time of the "
           "working threads (signal handling is charged to them); `process`: the whole "
           "process's wall and CPU time (rusage), which adds the profiler's own threads, "
           "its start-up and its exit flush (for libddprof: symbolize, encode and write "
           "the final profile), a fixed cost per process that weighs more the shorter the "
           "run (here ~%.2f s of work). Each round runs the baseline (no profiler), "
           "%s at one rate back to back in random order; each "
           "figure is the median over the rounds (%s) of (run with profiler / "
           "baseline of the same round), and `/ peer` the median of (libddprof / that "
           "peer in the same round), which leaves out the baseline's noise. "
           "Targets (libddprof): <= 1.01 at 99 Hz, <= 1.03 at 1 kHz, %s at "
           "the same rate (`/ peer` at most 1 against each), judged on wall and CPU."
           % (ov["threads"], ov["millions_per_thread"],
              min(r["base_work_wall"] for r in rows), peers_text(mine_in(rows) + peers),
              rounds_text(ov),
              better_text(peers)), "",
           "`outside work`: extra wall time of the process outside the work (start-up, "
           "exit), in ms.", "",
           "| profiler | Hz | work wall | work CPU | process wall | process CPU | "
           "outside work (ms) | " +
           "".join("/ %s: work wall, CPU | process wall, CPU | " % p for p in peers) +
           "target (work) | target (process) |",
           "|---|---|---|---|---|---|---|" + "---|---|" * len(peers) + "---|---|"]
    for r in rows:
        t_work = t_proc = None
        rels = {}
        if r["profiler"] == "libddprof" and r["work_wall"] is not None:
            rels = {p: vs_peer(r, by.get((p, r["hz"])), p) for p in peers}
            lim = targets.get(r["hz"])

            def ok(kw, kc):
                good = lim is None or max(r[kw], r[kc]) <= lim
                for rel in rels.values():
                    if rel.get(kw) is not None:
                        good = good and rel[kw] <= 1 and rel[kc] <= 1
                return good
            if lim is not None or any(rels.values()):
                t_work = ok("work_wall", "work_cpu")
                t_proc = ok("proc_wall", "proc_cpu")
        cells = []
        for p in peers:
            rel = rels.get(p) or {}
            cells += ["%s, %s" % (fmt(rel.get("work_wall")), fmt(rel.get("work_cpu")))
                      if rel else "",
                      "%s, %s" % (fmt(rel.get("proc_wall")), fmt(rel.get("proc_cpu")))
                      if rel else ""]
        out.append("| %s | %d | %s | %s | %s | %s | %s | %s%s | %s |" % (
            r["profiler"], r["hz"], fmt(r["work_wall"]), fmt(r["work_cpu"]),
            fmt(r["proc_wall"]), fmt(r["proc_cpu"]), fmt(r.get("outside_ms"), "%.0f"),
            "".join(c + " | " for c in cells),
            verdict(t_work) if r["profiler"] == "libddprof" else "",
            verdict(t_proc) if r["profiler"] == "libddprof" else ""))
    out += spread_table(rows, targets)
    out += ["", "![CPU overhead versus sampling rate](%s)" % svg_name, ""]
    return "\n".join(out) + "\n"


def ci_text(ci):
    return "%.3f-%.3f" % tuple(ci) if ci else "n/a"


def spread_table(rows, targets):
    """How far the medians above can be trusted: per libddprof row with per-round data,
    the rounds, the standard deviation of one round's ratio and the median's 95%
    confidence interval (order statistics), and whether each target's verdict could
    flip within it."""
    mine = [r for r in rows if r["profiler"] == "libddprof" and r.get("ci")]
    if not mine:
        return []
    peers = peers_in(rows)
    out = ["", "Spread: one round's ratio varies by the `sd` below (the machine's speed "
           "drifts from run to run), more than any of the profilers costs at these rates; "
           "`95% CI` is the median's confidence interval (order statistics of the "
           "rounds). A verdict marked *noise* would flip somewhere within its interval.",
           "", "| Hz | rounds | sd work wall, CPU | 95% CI work wall | work CPU | " +
           "".join("/ %s wall | / %s CPU | " % (p, p) for p in peers) + "verdict's margin |",
           "|---|---|---|---|---|" + "---|---|" * len(peers) + "---|"]
    for r in mine:
        sd = r.get("sd", {})
        ci = r["ci"]
        pcis = [(p, r.get(VS_KEY[p] + "_ci") or {}) for p in peers]
        lim = targets.get(r["hz"])
        flips = []
        for k in ("work_wall", "work_cpu"):
            if lim is not None and ci.get(k) and ci[k][0] <= lim < ci[k][1]:
                flips.append("%s vs %.2f" % (k.replace("_", " "), lim))
            for p, gci in pcis:
                if gci.get(k) and gci[k][0] <= 1 < gci[k][1]:
                    flips.append("%s vs %s" % (k.replace("_", " "), p))
        margin = ("*noise*: " + ", ".join(flips)) if flips else "outside the interval"
        out.append("| %d | %d | %s, %s | %s | %s | %s%s |" % (
            r["hz"], r.get("rounds", 0), fmt(sd.get("work_wall")), fmt(sd.get("work_cpu")),
            ci_text(ci.get("work_wall")), ci_text(ci.get("work_cpu")),
            "".join("%s | %s | " % (ci_text(gci.get("work_wall")), ci_text(gci.get("work_cpu")))
                    for _, gci in pcis), margin))
    return out


def overhead_svg(ov):
    """A line chart of the work CPU and wall ratios versus rate (log x), by hand."""
    W, H, L, R, T, B = 660, 360, 60, 190, 30, 45
    rows = [r for r in ov["rows"] if r["work_cpu"] is not None]
    rates = sorted({r["hz"] for r in rows})
    targets = [(hz, lim) for hz, lim in ((99, 1.01), (1000, 1.03)) if hz in rates]
    vals = [r[k] for r in rows for k in ("work_cpu", "work_wall")] + [1.0] + \
        [lim for _, lim in targets]
    lo = min(vals)
    hi = max(vals)
    pad = max(0.005, (hi - lo) * 0.1)
    lo, hi = lo - pad, hi + pad
    lx0, lx1 = math.log10(rates[0]), math.log10(rates[-1])

    def x(hz):
        return L + (math.log10(hz) - lx0) / ((lx1 - lx0) or 1) * (W - L - R)

    def y(v):
        return T + (hi - v) / (hi - lo) * (H - T - B)

    e = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
         'font-family="sans-serif" font-size="12">' % (W, H),
         '<rect width="%d" height="%d" fill="white"/>' % (W, H),
         '<text x="%d" y="18" font-size="14">CPU overhead of fixed work, 2 threads '
         '(ratio to no profiler)</text>' % L]
    step = 10 ** math.floor(math.log10((hi - lo) / 4))
    for m in (1, 2, 5):
        if (hi - lo) / (step * m) <= 8:
            step *= m
            break
    v = math.ceil(lo / step) * step
    while v <= hi:
        e.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' %
                 (L, W - R, y(v), y(v)))
        e.append('<text x="%d" y="%.1f" text-anchor="end">%.3f</text>' % (L - 5, y(v) + 4, v))
        v += step
    e.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#888" '
             'stroke-dasharray="4 3"/>' % (L, W - R, y(1.0), y(1.0)))
    for hz, lim in targets:  # libddprof's targets: a short bar at each
        e.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#2ca02c" '
                 'stroke-width="3"/>' % (x(hz) - 14, x(hz) + 14, y(lim), y(lim)))
        e.append('<text x="%.1f" y="%.1f" text-anchor="middle" fill="#2ca02c">target '
                 '%.2f</text>' % (x(hz), y(lim) - 6, lim))
    for hz in rates:
        e.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' %
                 (x(hz), H - B + 16, hz))
    e.append('<text x="%d" y="%d" text-anchor="middle">sampling rate (Hz, log scale)'
             '</text>' % ((L + W - R) // 2, H - 8))
    series = [("libddprof", "work_cpu", "#1f77b4", ""), ("libddprof", "work_wall", "#1f77b4",
                                                         "5 3"),
              ("gperftools", "work_cpu", "#d62728", ""), ("gperftools", "work_wall",
                                                          "#d62728", "5 3"),
              ("async-profiler", "work_cpu", "#ff7f0e", ""),
              ("async-profiler", "work_wall", "#ff7f0e", "5 3"),
              (BEFORE, "work_cpu", "#9467bd", ""), (BEFORE, "work_wall", "#9467bd", "5 3")]
    ly = T + 10
    for prof, key, color, dash in series:
        pts = sorted((r["hz"], r[key]) for r in rows if r["profiler"] == prof)
        if not pts:
            continue
        e.append('<polyline fill="none" stroke="%s" stroke-width="2" stroke-dasharray="%s" '
                 'points="%s"/>' % (color, dash, " ".join("%.1f,%.1f" % (x(h), y(v))
                                                          for h, v in pts)))
        for h, v in pts:
            e.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (x(h), y(v), color))
        e.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2" '
                 'stroke-dasharray="%s"/>' % (W - R + 10, W - R + 35, ly, ly, color, dash))
        e.append('<text x="%d" y="%d">%s %s</text>' % (W - R + 40, ly + 4, prof,
                                                        "CPU" if key == "work_cpu" else "wall"))
        ly += 18
    e.append("</svg>")
    return "\n".join(e) + "\n"


def accuracy_section(acc):
    rows = acc["rows"]
    by = {(r["profiler"], r["hz"], r["threads"]): r for r in rows}
    threads = sorted({r["threads"] for r in rows})
    profs = mine_in(rows) + peers_in(rows)
    out = ["## Accuracy", "",
           "Profile CPU-time total / the kernel's CPU time of the whole process, from "
           "wait4 (`test/workloads/cpu_split`: every thread burns %.2g s of CPU; start-up "
           "and exit included, so the profiler's own work too). libddprof: sum of "
           "`cpu-time` over its profiles, whose `[profiler]` frame holds the CPU of its own "
           "thread (symbolizing, compressing, uploading, unwind tables) "
           "(`build/pprof-dump --json`); gperftools: its sample count x its period (read "
           "from its profile file)%s. Median of %d runs. Target (libddprof): within 2%% in "
           "every case. gperftools uses one process-wide ITIMER_PROF, whose signals the "
           "kernel coalesces above its tick rate%s." % (
               acc["cpu_seconds_per_thread"],
               "; async-profiler: the sum of its `collapsed,total` counts (CPU ns per "
               "stack)" if "async-profiler" in profs else "", acc["reps"],
               "; async-profiler's `ctimer`, like libddprof, one timer_create CPU timer "
               "per thread" if "async-profiler" in profs else ""), "",
           "The second table runs `scripts/bench/fixed_work.c` (the same CPU per thread, "
           "one run) and divides the same profile total by the process's CPU (`/process`, "
           "wait4) and by the working threads' own CPU clocks (`/threads`, which leave out "
           "the profiler's thread and the exit: above 1 by its share).", "",
           "| threads | " + "".join("%s %s | " % (p, hz) for hz in ("99 Hz", "1 kHz")
                                    for p in profs) + "target |",
           "|---|" + "---|" * (2 * len(profs)) + "---|"]

    def get(prof, hz, n, key):
        r = by.get((prof, hz, n))
        return r.get(key) if r else None

    for n in threads:
        mine = [get("libddprof", hz, n, "ratio") for hz in (99, 1000)]
        ok = None if None in mine else all(abs(v - 1) <= 0.02 for v in mine)
        out.append("| %d | %s%s |" % (
            n, "".join(fmt(get(p, hz, n, "ratio")) + " | " for hz in (99, 1000)
                       for p in profs), verdict(ok)))
    if any(r.get("ratio_threads") is not None for r in rows):
        out += ["", "| threads | profiler | Hz | /process | /threads |", "|---|---|---|---|---|"]
        for hz in (99, 1000):
            for prof in profs:
                for n in threads:
                    out.append("| %d | %s | %d | %s | %s |" % (
                        n, prof, hz, fmt(get(prof, hz, n, "ratio_fixed")),
                        fmt(get(prof, hz, n, "ratio_threads"))))
    return "\n".join(out) + "\n"


def trie_section(path):
    data = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                data[(parts[0], int(parts[1]))] = float(parts[2])
    threads = sorted({t for _, t in data})
    out = ["## Stack trie", "",
           "Puts per second through `profiles_record` (what the signal handler calls), "
           "stacks of 16 pcs (`scripts/bench/bench_trie.c`). `existing`: each thread "
           "re-records 64 stacks it recorded before (lookups and atomic adds only, the "
           "steady state); `new`: every put is a stack never seen (allocation + CAS); "
           "`existing, trie only`: as `existing` but `trie_put` and the node's counters "
           "alone, without the profile's counters shared by all threads (writer count, "
           "totals), to show what those cost. The "
           "same total number of puts is split over the threads; median of 5 runs. This "
           "machine has %d cores, so more threads than that cannot go faster; the "
           "`scaling` columns are puts/s relative to 1 thread." % os.cpu_count(), "",
           "| threads | existing puts/s | scaling | new puts/s | scaling | "
           "existing, trie only | scaling |", "|---|---|---|---|---|---|---|"]
    for t in threads:
        cells = []
        for mode in ("existing", "new", "existing-trie"):
            v, v1 = data.get((mode, t)), data.get((mode, 1))
            cells += [fmt(v and v / 1e6, "%.2f M"), fmt(v and v1 and v / v1, "%.2f")]
        out.append("| %d | %s |" % (t, " | ".join(cells)))
    return "\n".join(out) + "\n"


def spawn_section(sp):
    names = {"threads": "thread create+join /s", "fork": "fork+exit+wait /s",
             "fork_after_upload": "fork+exit+wait /s, after an HTTP upload",
             "fork_storm": "fork_storm workload forks/s"}
    has_asprof = any(r["profiler"] == "async-profiler" for r in sp["rows"])
    # fork_storm: issue 5's storm test asks >= 0.7 of the run without the agent.
    targets = {"threads": 0.9, "fork": 0.8, "fork_after_upload": 0.8, "fork_storm": 0.7}
    out = ["## Threads and fork", "",
           "`threads`: %d threads created and joined one after another; `fork`: %d children "
           "forked, each calling exit(0), waited for one after another "
           "(`scripts/bench/bench_spawn.c`); `fork_storm`: `test/workloads/fork_storm %d` "
           "(children malloc, write and exit); `fork, after an HTTP upload`: the same forks "
           "after 1.5 s of warm-up with a 1 s upload period to a local intake, so the "
           "profiler has uploaded (its steady state; the baseline runs the same warm-up). "
           "A thread burns CPU meanwhile, so the "
           "profiler is sampling. Default rates (libddprof 99 Hz, gperftools 100 Hz%s). "
           "Median over %d rounds of with/without pairs (threads: %d, its runs are "
           "short and its ratio swings most; the two fork cases: %d: one fork pair's ratio "
           "varies by 0.1-0.15 on these machines). `95%% CI`: the median ratio's confidence "
           "interval (order statistics of the pairs); a verdict marked *noise* would flip "
           "within it. A run that has not finished "
           "after a time limit is killed and counted as hung (so is one that fails under a "
           "profiler: killed by a signal, or a child failed), and its pair is left out; "
           "a profiler whose first 3 runs of a case all hang is not run again in it. "
           "Targets (libddprof): threads >= 0.9, fork >= 0.8, fork_storm >= 0.7.%s"
           % (sp["threads"], sp["forks"], sp["storm"],
              ", async-profiler 100 Hz" if has_asprof else "", sp["rounds"],
              max([r.get("pairs", 0) for r in sp["rows"] if r["case"] == "threads"] or [0]),
              max([r.get("pairs", 0) for r in sp["rows"] if r["case"] == "fork_after_upload"]
                  or [0]),
              " The fork after an upload is libddprof's own case (the peers do not "
              "upload). async-profiler writes a profile file (and prints a line) at the "
              "exit of every forked child." if has_asprof else ""),
           "",
           "| case | profiler | rate | without | ratio | 95% CI | hung | target |",
           "|---|---|---|---|---|---|---|---|"]
    for r in sp["rows"]:
        ok = None
        if r["profiler"] == "libddprof" and r["ratio"] is not None:
            ok = r["ratio"] >= targets[r["case"]]
        ci = r.get("ratio_ci")
        noise = ok is not None and ci and ci[0] <= targets[r["case"]] < ci[1]
        out.append("| %s | %s | %s | %s | %s | %s | %d | %s |" % (
            names[r["case"]], r["profiler"], fmt(r["rate"], "%.0f"), fmt(r["base_rate"], "%.0f"),
            fmt(r["ratio"]), ci_text(ci), r.get("hung", 0),
            (verdict(ok) + (" (*noise*)" if noise else "")) if r["profiler"] == "libddprof"
            else ""))
    return "\n".join(out) + "\n"


def startup_section(st):
    out = ["## Start-up", "",
           "Extra wall time of `/bin/true` under LD_PRELOAD (posix_spawn to waitpid), "
           "median of %d paired differences. libddprof runs with its defaults (its "
           "default exporter, the Datadog agent, which `/bin/true` never reaches; only "
           "`DD_PROFILING_LOG_LEVEL=error`), gperftools with CPUPROFILE set%s. libddprof's "
           "constructor starts no thread: its uploader starts at the process's first need, "
           "which `/bin/true` never has. Target (libddprof): <= 1 ms." % (
               st["runs"], ", async-profiler with ASPROF_COMMAND (`ctimer`, collapsed "
               "profile to a file)" if any(r["profiler"] == "async-profiler"
                                           for r in st["rows"]) else ""), "",
           "| profiler | without (ms) | extra (ms) | target |", "|---|---|---|---|"]
    for r in st["rows"]:
        ok = r["extra_ms"] <= 1.0 if r["profiler"] == "libddprof" else None
        out.append("| %s | %.3f | %.3f | %s |" % (r["profiler"], r["base_ms"], r["extra_ms"],
                                                 verdict(ok) if ok is not None else ""))
    return "\n".join(out) + "\n"


def memory_section(mem):
    rows = mem["rows"]
    out = ["## Memory", "",
           "Extra peak RSS of "
           "%d threads each burning %.2g s of CPU with a fresh call path per ~50 us "
           "(`scripts/bench/many_stacks.c`: nearly every sample is a new stack), sampled at "
           "%d Hz, against the same program without a profiler; median of %d pairs%s. "
           "`extra`: peak from start to exit, the exit flush included (ru_maxrss, taken by "
           "`scripts/bench/maxrss.c`: Linux carries a peak RSS across exec, so the runner "
           "cannot read it itself); `before exit`: peak at the end of main, so the difference "
           "between the two is what serializing the final profile (symbolizer, libdw, pprof "
           "and gzip buffers) adds. "
           "`stacks`: distinct stacks in the profiles (pprof samples; gperftools: its "
           "records%s). Targets (libddprof): <= 16 MiB with the default ceiling; with the "
           "smallest ceiling (256 KiB), new stacks are dropped (counted in `[dropped]`) and "
           "the extra RSS is no larger (n/a when the ceiling was not reached). The kernel "
           "checks CPU timers at its ticks, so at most about tick rate x cores samples, "
           "hence new stacks, per second."
           % (mem["threads"], mem["cpu_seconds_per_thread"], mem["hz"], mem["rounds"],
              " (the two builds of libddprof at the default ceiling: %d runs each, against "
              "the first round's baseline)" % mem["pair_rounds"] if mem.get("pair_rounds")
              else "",
              "; async-profiler: its collapsed lines, stacks told apart by frame names"
              if any(r["profiler"] == "async-profiler" for r in rows) else ""), "",
           "| profiler | ceiling | without (MiB) | extra (MiB) | extra before exit (MiB) | "
           "stacks | dropped samples | target |", "|---|---|---|---|---|---|---|---|"]
    default = next((r for r in rows if r["profiler"] == "libddprof" and "default" in
                    r["config"]), None)
    for r in rows:
        ok = None
        if r["profiler"] == "libddprof" and r["extra_kib"] is not None:
            if "default" in r["config"]:
                ok = r["extra_kib"] <= 16 * 1024
            elif default and default["extra_kib"] is not None and r["dropped"]:
                ok = r["extra_kib"] <= default["extra_kib"]
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["profiler"], r["config"] or "-", fmt(r["base_kib"] and r["base_kib"] / 1024,
                                                   "%.1f"),
            fmt(None if r["extra_kib"] is None else r["extra_kib"] / 1024, "%.1f"),
            fmt(None if r.get("extra_run_kib") is None else r["extra_run_kib"] / 1024, "%.1f"),
            fmt(r["stacks"], "%d"), fmt(r["dropped"], "%d"),
            verdict(ok) if r["profiler"] == "libddprof" else ""))
    return "\n".join(out) + "\n"


def serialize_section(path):
    with open(path) as f:
        parts = f.read().split()
    d = dict(zip(parts[0::2], parts[1::2]))
    out = ["## Serialization", "",
           "Time for the uploader thread (never an application thread) to turn a profile "
           "of %s distinct stacks (12 pcs each, from %s distinct pcs of the program's own "
           "code, 8 threads) into gzip-compressed pprof: `pprof_build` = symbolize, "
           "encode, gzip (`scripts/bench/bench_serialize.c`). Cold: a new symbolizer "
           "(the first profile of a process); warm: the same symbolizer again (later "
           "profiles). Median of 3." % (d.get("stacks"), d.get("pool")), "",
           "| stacks | locations | cold (ms) | warm (ms) | pprof raw (KiB) | gzip (KiB) |",
           "|---|---|---|---|---|---|",
           "| %s | %s | %s | %s | %.0f | %.0f |" % (
               d.get("stacks"), d.get("locations"), d.get("cold_ms"), d.get("warm_ms"),
               int(d.get("raw_bytes", 0)) / 1024, int(d.get("gz_bytes", 0)) / 1024)]
    return "\n".join(out) + "\n"


def main():
    res = sys.argv[1]
    svg = sys.argv[2] if len(sys.argv) > 2 else None
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    asprof = has_asprof(res)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL).stdout.decode().strip() or "unknown"
    parts = ["# Benchmarks", "",
             "Regenerated by `make bench` (not part of `make check`). Machine: %s. "
             "Date: %s, commit %s. Absolute times are noisy on these shared machines; "
             "compare the ratios, which are measured side by side in the same run. "
             "Peers: no profiler (the baseline)%s gperftools' libprofiler %s "
             "(`LD_PRELOAD=libprofiler.so.0 CPUPROFILE=... CPUPROFILE_FREQUENCY=hz`)%s. "
             "libddprof runs with its defaults: its unwind table cache "
             "(`$HOME/.cache/libddprof`, `DD_PROFILING_UNWIND_CACHE_DIR`) is warm after its "
             "first run, as on a host that has run the program before (the first process "
             "builds libc's table, ~5-12 ms of CPU on the profiler's thread; later ones load it)."
             % (machine(), now, rev, "," if asprof else " and", gperf_version(),
                " and async-profiler %s's native library (`LD_PRELOAD=libasyncProfiler.so "
                "ASPROF_COMMAND=start,event=ctimer,interval=NS,collapsed,total,file=...`, "
                "NS = 1e9 / rate; `ctimer`: one timer_create CPU timer per thread, its "
                "mode closest to libddprof's)" % asprof_version() if asprof else
                ""), ""]
    base = load(res, "base.json")
    if base and base["built"]:
        parts += ["`libddprof-before`: libddprof as it was at %s (commit %s), built from that "
                  "revision's sources by its own Makefile (`scripts/bench/build-base`; "
                  "`make bench BENCH_BASE_REV=<rev>` picks another), run like libddprof (with "
                  "an unwind table cache of its own) and interleaved with the others in every "
                  "benchmark: [Before and after](#before-and-after) compares the two figure by "
                  "figure." % (base["rev"], base["commit"][:12]), ""]
    if os.path.exists(os.path.join(res, "quick")):
        parts += ["**Quick run (`scripts/bench/run --quick`): few, short runs; the figures "
                  "below are a smoke test, not measurements.**", ""]
    ov = load(res, "overhead.json")
    summary = summary_section(res, ov)
    if summary:
        parts.append(summary)
    if base:
        parts.append(before_after_section(res, base))
    if ov:
        svg_name = os.path.relpath(svg, os.getcwd()) if svg else "overhead.svg"
        parts.append(overhead_section(ov, svg_name))
        if svg:
            with open(svg, "w") as f:
                f.write(overhead_svg(ov))
    acc = load(res, "accuracy.json")
    if acc:
        parts.append(accuracy_section(acc))
    handler = os.path.join(res, "handler.txt")
    if os.path.exists(handler):
        parts.append(handler_section(handler))
    trie = os.path.join(res, "trie.txt")
    if os.path.exists(trie):
        parts.append(trie_section(trie))
    sp = load(res, "spawn.json")
    if sp:
        parts.append(spawn_section(sp))
    st = load(res, "startup.json")
    if st:
        parts.append(startup_section(st))
    mem = load(res, "memory.json")
    if mem:
        parts.append(memory_section(mem))
    ser = os.path.join(res, "serialize.txt")
    if os.path.exists(ser):
        parts.append(serialize_section(ser))
    # Paired comparisons made by hand (two builds side by side), kept across runs.
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            parts.append(f.read())
    sys.stdout.write("\n".join(parts))


def summary_section(res, ov):
    """One line per target: libddprof's figure and whether it is met."""
    rows = []
    if ov:
        by = {(r["profiler"], r["hz"]): r for r in ov["rows"]}
        peers = peers_in(ov["rows"])
        for hz, lim in ((99, 1.01), (1000, 1.03)):
            m = by.get(("libddprof", hz))
            if not m or m["work_wall"] is None:
                continue
            worst = max(m["work_wall"], m["work_cpu"])
            ok = worst <= lim
            own, rels, cis = [], [], []
            for p in peers:
                g = by.get((p, hz))
                rel = vs_peer(m, g, p)
                if rel and rel.get("work_wall") is not None:
                    ok = ok and rel["work_wall"] <= 1 and rel["work_cpu"] <= 1
                own.append("%s %s, %s" % (p, fmt(g and g["work_wall"]),
                                          fmt(g and g["work_cpu"])))
                rels.append("libddprof / %s %s, %s" % (p, fmt(rel.get("work_wall")),
                                                       fmt(rel.get("work_cpu"))))
                gci = m.get(VS_KEY[p] + "_ci") or {}
                if gci.get("work_wall"):
                    cis.append("/ %s %s, %s" % (p, ci_text(gci.get("work_wall")),
                                                ci_text(gci.get("work_cpu"))))
            spread = ("; 95%% CI of libddprof %s over %d rounds" % (
                "; ".join(cis), m["rounds"]) if cis else "")
            rows.append(("CPU overhead %d Hz (work wall, CPU)" % hz,
                         "%.3f, %.3f (%s; %s%s); whole process %.3f, %.3f" % (
                             m["work_wall"], m["work_cpu"], "; ".join(own), "; ".join(rels),
                             spread, m["proc_wall"], m["proc_cpu"]),
                         "<= %.2f and %s" % (lim, better_text(peers)), verdict(ok)))
    acc = load(res, "accuracy.json")
    if acc:
        mine = [r for r in acc["rows"] if r["profiler"] == "libddprof" and r["ratio"]]
        if mine:
            worst = max(mine, key=lambda r: abs(r["ratio"] - 1))
            rows.append(("accuracy (worst case)", "%.3f (%d threads, %d Hz)" % (
                worst["ratio"], worst["threads"], worst["hz"]), "within 2%",
                         verdict(abs(worst["ratio"] - 1) <= 0.02)))
    handler = os.path.join(res, "handler.txt")
    if os.path.exists(handler):
        with open(handler) as f:
            for line in f:
                p = line.split()
                if len(p) >= 3 and p[0] == "dwarf" and p[1] == "10":
                    ns = float(p[2])
                    rows.append(("handler, DWARF, depth 10", "%.0f ns" % ns, "< 2 us",
                                 verdict(ns < 2000)))
    sp = load(res, "spawn.json")
    if sp:
        for r in sp["rows"]:
            if r["profiler"] != "libddprof":
                continue
            lim = {"threads": 0.9, "fork_storm": 0.7}.get(r["case"], 0.8)
            rows.append(({"threads": "thread create+join",
                          "fork_storm": "fork_storm (children malloc, write, exit)",
                          "fork_after_upload": "fork+exit+wait, after an upload"}.get(
                              r["case"], "fork+exit+wait"),
                         fmt(r["ratio"]) + (" (CI %s)" % ci_text(r["ratio_ci"])
                                            if r.get("ratio_ci") else ""), ">= %.1f" % lim,
                         verdict(None if r["ratio"] is None else r["ratio"] >= lim)))
    st = load(res, "startup.json")
    if st:
        for r in st["rows"]:
            if r["profiler"] == "libddprof":
                rows.append(("start-up (/bin/true)", "+%.3f ms" % r["extra_ms"], "<= 1 ms",
                             verdict(r["extra_ms"] <= 1.0)))
    mem = load(res, "memory.json")
    if mem:
        for r in mem["rows"]:
            if r["profiler"] == "libddprof" and "default" in r["config"] and \
                    r["extra_kib"] is not None:
                rows.append(("memory, 64 threads (%d stacks)" % r["stacks"],
                             "+%.1f MiB" % (r["extra_kib"] / 1024), "<= 16 MiB",
                             verdict(r["extra_kib"] <= 16 * 1024)))
    if not rows:
        return ""
    out = ["## Targets", "", "| figure | libddprof | target | |", "|---|---|---|---|"]
    out += ["| %s | %s | %s | %s |" % r for r in rows]
    return "\n".join(out) + "\n"


# The benchmarks' results in the order of this document, each with its list of figures
# of both builds (peers.py's before_after()).
BEFORE_AFTER_FILES = ("overhead.json", "accuracy.json", "micro.json", "spawn.json",
                      "startup.json", "memory.json")
# How a figure's values are written, by unit (ms: from 10 on, one decimal).
UNIT_FMT = {"": "%.3f", "%": "%.2f%%", "ms": "%.3f ms", "MiB": "%.1f MiB", "ns": "%.0f ns",
            "M puts/s": "%.2f M/s"}


def before_after_section(res, base):
    """Every figure measured for both builds, side by side with their 95% intervals, and
    whether after is worse than before beyond the interval of their paired comparison
    (the intervals are peers.py's median_ci, computed there)."""
    out = ["## Before and after", ""]
    if not base["built"]:
        return "\n".join(out + [
            "Not measured: libddprof at %s did not build (`build/bench/base.log`)." %
            base["rev"]]) + "\n"
    figs = []
    for name in BEFORE_AFTER_FILES:
        d = load(res, name)
        if d:
            figs += d.get("before_after", [])

    def val(x, unit, signed=False):
        if x is None:
            return "n/a"
        spec = UNIT_FMT[unit] if unit != "ms" or abs(x) < 10 else "%.1f ms"
        return (spec.replace("%", "%+", 1) if signed else spec) % x

    def interval(ci, unit):
        return "n/a" if not ci else "%s to %s" % (val(ci[0], unit), val(ci[1], unit))

    def change(f, x):
        """A value of the paired comparison: a ratio as it is, a difference signed."""
        return val(x, "") if f["how"] == "ratio" else val(x, f["unit"], signed=True)

    def change_ci(f):
        return "n/a" if not f["ci"] else "%s to %s" % tuple(change(f, x) for x in f["ci"])
    worse = [f for f in figs if f["worse"]]
    open_ = [f for f in figs if f["worse"] is None]
    out += ["`before`: libddprof at %s; `after`: this commit; both measured in this run, "
            "interleaved round by round. Each figure is its median over the rounds, as in "
            "its section below, with the 95%% interval of that median (order statistics), "
            "except: the handler's, the trie's and the serializer's, the median of %s "
            "alternated `--quick` runs of each build's program (the trie at 1 and 2 "
            "threads); accuracy, the error |profile / kernel - 1| in %% over every thread "
            "count and run at the rate. `after / before`: the median over the rounds of "
            "the ratio of the two builds' measures within a round, which leaves out the "
            "drift between rounds; for accuracy (a ratio of errors near 0 means nothing) "
            "and start-up (ms), their difference `after - before`. **worse**: its 95%% "
            "interval lies wholly on the worse side of no change (above 1 or 0 for costs, "
            "below 1 for rates); *n/a*: fewer than 6 pairs, no interval. Each interval "
            "misses by chance at most 2.5%% of the time on the worse side: with %d "
            "figures, up to about %.1f flagged per run by chance alone, so a flagged figure "
            "is re-measured before it is believed." % (
                base["rev"], (load(res, "micro.json") or {}).get("rounds", "n/a"),
                len(figs), len(figs) * 0.025), "",
            "**Worse than before beyond the 95%% interval: %s** (of the %d figures with "
            "an interval; %d more without one)." % (
                "; ".join("%s (%s, 95%% CI %s)" % (f["label"], change(f, f["value"]),
                                                   change_ci(f)) for f in worse)
                or "none", len(figs) - len(open_), len(open_)), "",
            "| figure | before (%s) | 95%% CI | after | 95%% CI | after / before "
            "(after - before) | 95%% CI | pairs | worse? |" % base["rev"],
            "|---|---|---|---|---|---|---|---|---|"]
    for f in figs:
        u = f["unit"]
        out.append("| %s | %s | %s | %s | %s | %s | %s | %d | %s |" % (
            f["label"].replace("|", "\\|"), val(f["before"], u), interval(f["before_ci"], u),
            val(f["after"], u), interval(f["after_ci"], u), change(f, f["value"]), change_ci(f),
            f["pairs"], {True: "**worse**", False: "no", None: "*n/a*"}[f["worse"]]))
    return "\n".join(out) + "\n"


def has_asprof(res):
    """Whether the results include async-profiler (older ones have gperftools alone)."""
    for name in ("overhead.json", "accuracy.json", "spawn.json", "startup.json",
                 "memory.json"):
        d = load(res, name)
        if d and any(r["profiler"] == "async-profiler" for r in d["rows"]):
            return True
    return False


def asprof_version():
    """From the README next to the library peers.py uses (BENCH_ASPROF overrides it)."""
    lib = os.environ.get("BENCH_ASPROF",
                         "/work/shared/peers/async-profiler/libasyncProfiler.so")
    try:
        with open(os.path.join(os.path.dirname(lib), "README.md")) as f:
            for word in f.readline().split():
                if word[:1].isdigit():
                    return word.rstrip(",")
    except OSError:
        pass
    return "(version unknown)"


def gperf_version():
    v = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libgoogle-perftools4"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
    return v.strip() or "(version unknown)"


if __name__ == "__main__":
    main()
