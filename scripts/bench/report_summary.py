"""report.py's summaries: the table of targets at the top of BENCHMARKS.md and the
before/after comparison of two builds.
"""
import os

from report_alloc import summary_rows as alloc_summary_rows
from report_wall import summary_rows as wall_summary_rows
from report_common import (VS_KEY, better_text, ci_text, fmt, load, peers_in, verdict,
    vs_peer)


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
    rows += alloc_summary_rows(load(res, "alloc.json"))
    rows += wall_summary_rows(load(res, "wall.json"))
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
