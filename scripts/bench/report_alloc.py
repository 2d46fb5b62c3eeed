"""report.py's section of the allocation profilers' benchmarks (alloc.json, written by
peers_alloc.py), and their lines in the targets' table.

Targets (libddprof), each judged on every figure named:
  off     within noise of no profiler: the 95% interval of the ratio holds 1, micro-
          benchmark work wall and CPU, Python whole process wall and CPU. An interval
          wholly below 1 misses too: the program ran differently beside the agent (as when
          the agent's freed buffers raised glibc's mmap threshold for the whole process)
  on      at most +10 ns per malloc/free pair on the micro-benchmark (wall and CPU), in
          its steady state (after a pause) and from the process's start, each
  on      at most 3% on the Python workload (whole process, wall and CPU)
  on      below each peer that ran: libddprof on / the peer within a round < 1, on the
          work's and the whole process's wall and CPU, on both workloads
  on      extra peak RSS within the live heap's bound (its table and its two stack stores)
"""
from report_common import fmt, verdict

OFF, ON = "libddprof off", "libddprof on"
PAIR_LIMIT_NS = 10.0
PY_LIMIT = 1.03
KEYS = ("work_wall", "work_cpu", "proc_wall", "proc_cpu")
KEY_LABELS = {"work_wall": "work wall", "work_cpu": "work CPU", "proc_wall": "process wall",
              "proc_cpu": "process CPU"}
WORKLOADS = ("micro", "micro-start", "python")
MICRO = ("micro", "micro-start")
# The figures each target of libddprof off is judged on, per workload.
OFF_KEYS = {"micro": ("work_wall", "work_cpu"), "micro-start": ("work_wall", "work_cpu"),
            "python": ("proc_wall", "proc_cpu")}
WORKLOAD_LABELS = {"micro": "malloc/free micro-benchmark (after a pause)",
                   "micro-start": "malloc/free micro-benchmark (from the start)",
                   "python": "Python workload"}


def ci_text(ci, spec="%.3f"):
    return ("%s to %s" % (spec % ci[0], spec % ci[1])) if ci else "n/a"


def row(al, workload, profiler):
    return next((r for r in al["rows"] if r["workload"] == workload and
                 r["profiler"] == profiler and r["rounds"]), None)


def off_ok(al, workload):
    """Within noise: each judged figure's interval holds 1; None without intervals."""
    r = row(al, workload, OFF)
    if not r:
        return None
    cis = [r["ratio_ci"].get(k) for k in OFF_KEYS[workload]]
    if None in cis:
        return None
    return all(ci[0] <= 1 <= ci[1] for ci in cis)


def pair_ok(al, workload):
    r = row(al, workload, ON)
    if not r or r["extra_ns"]["wall"] is None:
        return None
    return max(r["extra_ns"]["wall"], r["extra_ns"]["cpu"]) <= PAIR_LIMIT_NS


def python_ok(al):
    r = row(al, "python", ON)
    if not r:
        return None
    return max(r["ratio"]["proc_wall"], r["ratio"]["proc_cpu"]) <= PY_LIMIT


def peers_ok(al):
    """Below every peer that ran, on every figure; None when no peer ran."""
    oks = []
    for workload in WORKLOADS:
        r = row(al, workload, ON)
        for v in (r or {}).get("vs", {}).values():
            if v["rounds"]:
                oks.append(all(v["ratio"][k] < 1 for k in KEYS))
    return all(oks) if oks else None


def memory_ok(al):
    oks = [r["extra_rss_kib"] <= al["heap_bound_kib"] for r in
           (row(al, w, ON) for w in WORKLOADS) if r]
    return all(oks) if oks else None


def all_of(oks):
    """False when a verdict is missed, else None when one is unknown (or there is none),
    else True."""
    oks = list(oks)
    if False in oks:
        return False
    if not oks or None in oks:
        return None
    return True


def noise(value, ci, limit):
    """' (*noise*)' when the limit lies within the interval."""
    return " (*noise*)" if ci and ci[0] <= limit < ci[1] else ""


def summary_rows(al):
    """Lines of the targets' table: (figure, libddprof, target, verdict)."""
    if not al:
        return []
    rows = []
    offs = []
    for w in WORKLOADS:
        r = row(al, w, OFF)
        if r:
            offs.append("%s %s" % (w, ", ".join("%s %s (CI %s)" % (
                KEY_LABELS[k], fmt(r["ratio"][k]), ci_text(r["ratio_ci"][k]))
                for k in OFF_KEYS[w])))
    if offs:
        rows.append(("allocation profiling off (preloaded) / no profiler", "; ".join(offs),
                     "within noise (95% CI holds 1)",
                     verdict(all_of(off_ok(al, w) for w in WORKLOADS if row(al, w, OFF)))))
    for w, when in (("micro", "steady, after a pause of %g s" % al.get("pause_s", 0)),
                    ("micro-start", "from the process's start")):
        r = row(al, w, ON)
        if r:
            rows.append(("allocation profiling on: extra ns per malloc/free pair (%s)" % when,
                         "%+.1f wall (CI %s), %+.1f CPU (CI %s)" % (
                             r["extra_ns"]["wall"], ci_text(r["extra_ns_ci"]["wall"], "%+.1f"),
                             r["extra_ns"]["cpu"], ci_text(r["extra_ns_ci"]["cpu"], "%+.1f")),
                         "<= +10 ns", verdict(pair_ok(al, w))))
    r = row(al, "python", ON)
    if r:
        rows.append(("allocation profiling on: Python workload (process wall, CPU)",
                     "%s (CI %s), %s (CI %s)" % (
                         fmt(r["ratio"]["proc_wall"]), ci_text(r["ratio_ci"]["proc_wall"]),
                         fmt(r["ratio"]["proc_cpu"]), ci_text(r["ratio_ci"]["proc_cpu"])),
                     "<= 1.03", verdict(python_ok(al))))
    worst = []
    for w in WORKLOADS:
        for peer, v in (row(al, w, ON) or {}).get("vs", {}).items():
            if v["rounds"]:
                worst.append("%s / %s %s" % (w, peer, fmt(max(v["ratio"][k] for k in KEYS))))
    left = ["%s: %s left out" % (x["workload"], x["profiler"]) for x in al["left_out"]]
    if worst or left:
        rows.append(("allocation profiling on / peers (highest of its 4 figures)",
                     "; ".join(worst + left), "< 1 against each", verdict(peers_ok(al))))
    mem = [(w, row(al, w, ON)) for w in WORKLOADS]
    if any(r for _, r in mem):
        rows.append(("allocation profiling on: extra peak RSS", "; ".join(
            "%s %+.1f MiB" % (w, r["extra_rss_kib"] / 1024) for w, r in mem if r),
                     "<= %.0f MiB" % (al["heap_bound_kib"] / 1024), verdict(memory_ok(al))))
    return rows


def alloc_section(al):
    rounds = al["rounds"]
    out = ["## Allocation profiling", "",
           "libddprof with its allocation profiles off (`libddprof off`: preloaded with its "
           "defaults, CPU profiling only; malloc does not pass through it) and on "
           "(`libddprof on`: `DD_PROFILING_ALLOCATION_ENABLED=true` and "
           "`DD_PROFILING_HEAP_ENABLED=true`, one sample per 512 KiB on average), side by "
           "side with no profiler and two peers: heaptrack %s (`heaptrack -o FILE program`: "
           "every allocation and free traced and written to its interpreter and "
           "compressor, which its script waits for; the whole run's wall is its full "
           "cost) and async-profiler's native memory mode (`ASPROF_COMMAND=start,"
           "nativemem=%d,collapsed,file=...`: sampled at the same mean interval). "
           "The before build predates allocation profiling and is not run here." % (
               al.get("heaptrack_version") or "", al["asprof_interval"]), "",
           "Workloads: `micro`, `scripts/bench/alloc_churn.c`: %d threads each make %d "
           "malloc/free pairs of mixed sizes (31 in 32 from 16 B to 4 KiB, 1 in 32 from "
           "4 KiB to 64 KiB, log-uniform, a fixed-seed generator; ~1.5 KB a pair) with %d "
           "live blocks each, after a pause of %g s: the steady cost (libddprof builds its "
           "unwind tables a second after start-up; until then it unwinds allocation "
           "samples from the CFI in memory, which costs more a sample); `micro-start`, "
           "the same without the pause; `python`, Debian's `%s` (%s) running "
           "`scripts/bench/alloc_workload.py %d %d` (lists of ints grown by append, "
           "`[None] * n`, dict comprehensions, bytes objects of 64 B to 2 KiB, built and "
           "dropped). Every round runs the baseline (no profiler) and each candidate back "
           "to back in random order (rounds: micro %s, micro-start %s, python %s); each "
           "figure is the median over the rounds of (candidate / baseline of the same "
           "round), or of their difference, with its 95%% interval (order statistics; n/a "
           "below 6 rounds). heaptrack takes seconds a run on the micro-benchmark: there "
           "it runs in rounds of its own with libddprof on and the baseline, from the "
           "start only. `work`: the "
           "program's own timing of its work; `process`: the whole run (rusage of the "
           "process and its children: start-up, exit, a profiler's helpers). Peak RSS: "
           "`scripts/bench/maxrss.c` (heaptrack: the largest of its script, interpreter "
           "and program)." % (
               al["threads"], al["pairs_per_thread"], al["live_per_thread"],
               al.get("pause_s", 0), al["python"],
               al.get("python_version", ""), al["python_rounds"], al["python_n"],
               rounds_text(rounds.get("micro")), rounds_text(rounds.get("micro-start")),
               rounds_text(rounds.get("python"))), "",
           "Targets (libddprof): off within noise of no profiler (the ratio's interval "
           "holds 1, so that a speed-up beyond noise misses too; micro work wall and CPU, python process wall and CPU); on at most "
           "+10 ns per malloc/free pair (wall and CPU; after the pause and from the start, "
           "each); on at most 3%% on the Python "
           "workload (process wall and CPU); on below each peer on every figure (libddprof "
           "on / the peer within a round); on: extra peak RSS within the live heap's "
           "bound, %.0f MiB (its table's default budget and its two stack stores' ceiling). "
           "A verdict marked *noise* would flip within its interval." % (
               al["heap_bound_kib"] / 1024), ""]
    for x in al["left_out"]:
        out += ["**%s left out of the %s**: %s" % (x["profiler"], WORKLOAD_LABELS.get(
            x["workload"], x["workload"]), x["reason"]), ""]
    out += micro_table(al) + [""] + python_table(al) + [""] + vs_table(al)
    return "\n".join(out) + "\n"


def rounds_text(groups):
    if not groups:
        return "n/a"
    return ", ".join("%d" % n if g == "main" else "%d with %s" % (n, g)
                     for g, n in groups.items())


def micro_table(al):
    out = ["### malloc/free micro-benchmark", "",
           "`run`: after the pause (steady) or from the start. ns per pair: wall, the "
           "work's wall time / one thread's pairs; CPU, the "
           "workers' CPU clocks / all pairs; whole run, the process's wall / one thread's "
           "pairs (after the pause, the whole run's figures include it). "
           "`profiled / requested`: the bytes the profiles estimate (libddprof: "
           "`alloc-space`; async-profiler: samples x interval) over the bytes the program "
           "asked for.", "",
           "| run | profiler | ns/pair without (wall, CPU) | extra ns/pair wall | 95% CI | extra "
           "CPU | 95% CI | extra, whole run | work wall ratio | 95% CI | extra peak RSS "
           "(MiB) | profiled / requested | rounds | target |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in al["rows"]:
        if r["workload"] not in MICRO or not r["rounds"]:
            continue
        w = r["workload"]
        target = ""
        if r["profiler"] == ON:
            target = "+10 ns: %s%s" % (verdict(pair_ok(al, w)), noise(
                r["extra_ns"]["wall"], r["extra_ns_ci"]["wall"], PAIR_LIMIT_NS) or noise(
                r["extra_ns"]["cpu"], r["extra_ns_ci"]["cpu"], PAIR_LIMIT_NS))
        elif r["profiler"] == OFF:
            target = "within noise: %s" % verdict(off_ok(al, w))
        out.append("| %s | %s | %.1f, %.1f | %+.1f | %s | %+.1f | %s | %+.1f | %s | %s | %+.1f | "
                   "%s | %d | %s |" % (
                       "after %g s" % al.get("pause_s", 0) if w == "micro" else "from start",
                       r["profiler"], r["base_ns_per_pair"]["wall"],
                       r["base_ns_per_pair"]["cpu"], r["extra_ns"]["wall"],
                       ci_text(r["extra_ns_ci"]["wall"], "%+.1f"), r["extra_ns"]["cpu"],
                       ci_text(r["extra_ns_ci"]["cpu"], "%+.1f"), r["extra_ns"]["proc"],
                       fmt(r["ratio"]["work_wall"]), ci_text(r["ratio_ci"]["work_wall"]),
                       r["extra_rss_kib"] / 1024, fmt(r.get("estimated_over_requested")),
                       r["rounds"], target))
    return out


def python_table(al):
    out = ["### Python workload", "",
           "| profiler | process wall | 95% CI | process CPU | 95% CI | work wall | work "
           "CPU | without (s, process wall) | extra peak RSS (MiB) | rounds | target |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in al["rows"]:
        if r["workload"] != "python" or not r["rounds"]:
            continue
        target = ""
        if r["profiler"] == ON:
            target = "<= 1.03: %s%s" % (verdict(python_ok(al)), noise(
                r["ratio"]["proc_wall"], r["ratio_ci"]["proc_wall"], PY_LIMIT) or noise(
                r["ratio"]["proc_cpu"], r["ratio_ci"]["proc_cpu"], PY_LIMIT))
        elif r["profiler"] == OFF:
            target = "within noise: %s" % verdict(off_ok(al, "python"))
        out.append("| %s | %s | %s | %s | %s | %s | %s | %.2f | %+.1f | %d | %s |" % (
            r["profiler"], fmt(r["ratio"]["proc_wall"]), ci_text(r["ratio_ci"]["proc_wall"]),
            fmt(r["ratio"]["proc_cpu"]), ci_text(r["ratio_ci"]["proc_cpu"]),
            fmt(r["ratio"]["work_wall"]), fmt(r["ratio"]["work_cpu"]), r["base_proc_wall"],
            r["extra_rss_kib"] / 1024, r["rounds"], target))
    return out


def vs_table(al):
    out = ["### libddprof on against the peers", "",
           "libddprof on / the peer, the median over the rounds where both ran (the "
           "baseline left out). Target: below 1 on every figure, against each peer. Peak "
           "RSS: libddprof on's extra over no profiler, against the bound of %.0f MiB: %s." % (
               al["heap_bound_kib"] / 1024, verdict(memory_ok(al))), "",
           "| workload | peer | rounds | " + " | ".join(
               "%s | 95%% CI" % KEY_LABELS[k] for k in KEYS) + " | target |",
           "|---|---|---|" + "---|---|" * len(KEYS) + "---|"]
    for w in WORKLOADS:
        for peer, v in (row(al, w, ON) or {}).get("vs", {}).items():
            if not v["rounds"]:
                continue
            ok = all(v["ratio"][k] < 1 for k in KEYS)
            out.append("| %s | %s | %d | %s | %s |" % (
                w, peer, v["rounds"], " | ".join(
                    "%s | %s" % (fmt(v["ratio"][k]), ci_text(v["ratio_ci"][k]))
                    for k in KEYS), verdict(ok)))
    return out
