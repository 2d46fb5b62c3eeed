"""report.py's sections of the CPU profilers' benchmarks: CPU overhead (with its plot,
scripts/bench/overhead.svg) and accuracy.
"""
import math

from report_common import (BEFORE, VS_KEY, better_text, ci_text, fmt, mine_in, peers_in,
    peers_text, verdict, vs_peer)


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
