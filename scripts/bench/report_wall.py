"""The wall-clock and lock profilers' section of BENCHMARKS.md (wall.json of
peers_wall.py), and its rows of the targets table."""
from report_common import verdict

WALL_LIMIT = 1.01  # wall on at 100 Hz, mostly idle 1000-thread server: at most 1% CPU
PAIR_LIMIT_NS = 3.0  # lock profiling on: an uncontended lock/unlock pair


def ci_text(ci, spec="%.4f"):
    return ("%s to %s" % (spec % ci[0], spec % ci[1])) if ci else "n/a"


def row(w, workload, profiler):
    return next((r for r in w["rows"] if r["workload"] == workload and
                 r["profiler"] == profiler), None)


def own_cost(w, workload):
    """The wall profile's own cost: CPU with it on / with libddprof's defaults (its CPU
    profile, always on), both against the same runs without a profiler."""
    on, off = row(w, workload, "libddprof wall"), row(w, workload, "libddprof off")
    if on and on.get("own_ratio") is not None:
        return on["own_ratio"]  # paired within each round (peers_wall.py)
    if not on or not off or on["cpu_ratio"] is None or not off["cpu_ratio"]:
        return None
    return on["cpu_ratio"] / off["cpu_ratio"]


def wall_ok(w):
    r = row(w, "idle-1000", "libddprof wall")
    own = own_cost(w, "idle-1000")
    if not r or own is None:
        return None
    ok = own <= WALL_LIMIT
    ap = row(w, "idle-1000", "async-profiler wall")
    if ap and ap["cpu_ratio"] is not None:
        ok = ok and r["cpu_ratio"] < ap["cpu_ratio"]
    return ok


def threads_ok(w):
    """1000 idle threads cost about what 10 cost: the wall profile's own costs within 1%
    of each other."""
    a, b = own_cost(w, "idle-10"), own_cost(w, "idle-1000")
    if a is None or b is None:
        return None
    return abs(b - a) <= 0.01


def lock_on_ok(w):
    r = row(w, "lock-pair", "libddprof lock")
    return None if not r or r["extra_ns"] is None else r["extra_ns"] <= PAIR_LIMIT_NS


def lock_off_ok(w):
    r = row(w, "lock-pair", "libddprof off")
    if not r or not r["extra_ns_ci"]:
        return None
    return r["extra_ns_ci"][0] <= 0 <= r["extra_ns_ci"][1]


def summary_rows(w):
    if not w:
        return []
    i1000 = row(w, "idle-1000", "libddprof wall")
    ap = row(w, "idle-1000", "async-profiler wall")
    on = row(w, "lock-pair", "libddprof lock")
    off = row(w, "lock-pair", "libddprof off")

    def f(r, key, spec="%.4f"):
        return spec % r[key] if r and r.get(key) is not None else "n/a"

    def g(x):
        return "n/a" if x is None else "%.4f" % x

    def own_ci(workload):
        r = row(w, workload, "libddprof wall")
        ci = r.get("own_ratio_ci") if r else None
        return " (CI %s, paired by round)" % ci_text(ci) if ci else ""
    return [
        ("wall profiling at 100 Hz, mostly idle 1000-thread process: its own CPU cost "
         "(wall on / libddprof's defaults); all of libddprof and async-profiler's wall "
         "mode / no profiler",
         "%s%s; %s (async-profiler %s)" % (g(own_cost(w, "idle-1000")), own_ci("idle-1000"),
                                           f(i1000, "cpu_ratio"), f(ap, "cpu_ratio")),
         "<= %.2f; below async-profiler's" % WALL_LIMIT, verdict(wall_ok(w))),
        ("wall profiling: its own cost with 1000 idle threads vs 10",
         "%s vs %s" % (g(own_cost(w, "idle-1000")), g(own_cost(w, "idle-10"))),
         "within 0.01", verdict(threads_ok(w))),
        ("lock profiling on: uncontended pthread_mutex_lock/unlock pair",
         f(on, "extra_ns", "%+.2f ns"), "<= +%.0f ns" % PAIR_LIMIT_NS, verdict(lock_on_ok(w))),
        ("lock profiling off: the same pair",
         "%s (CI %s)" % (f(off, "extra_ns", "%+.2f ns"),
                         ci_text(off and off["extra_ns_ci"], "%+.2f")),
         "within noise (CI holds 0)", verdict(lock_off_ok(w))),
    ]


def wall_section(w):
    out = ["## Wall-clock and lock profiling", "",
           "Medians of %d rounds; in each round every candidate and a run without a "
           "profiler, in random order (scripts/bench/peers_wall.py says what runs)." % w["rounds"],
           "",
           "Process CPU (every thread, wait4's rusage) of `wall_threads idle N %g`: N "
           "threads in pthread_cond_timedwait woken every 100 ms and one burning CPU, "
           "under a profiler / without." % w["seconds"], "",
           "| workload | profiler | CPU ratio | 95% interval | CPU s | none CPU s |",
           "|---|---|---|---|---|---|"]
    for r in w["rows"]:
        if r["workload"].startswith("idle"):
            out.append("| %s | %s | %s | %s | %.3f | %.3f |" % (
                r["workload"], r["profiler"],
                "%.4f" % r["cpu_ratio"] if r["cpu_ratio"] is not None else "n/a",
                ci_text(r["cpu_ratio_ci"]), r["cpu_s"] or 0, r["none_cpu_s"] or 0))
    out += ["", "Uncontended pthread_mutex_lock/unlock pairs on one thread "
            "(`build/bench/lock_pair %d`), ns a pair:" % w["pairs"], "",
            "| profiler | ns a pair | extra ns | 95% interval |", "|---|---|---|---|"]
    for r in w["rows"]:
        if r["workload"] == "lock-pair":
            out.append("| %s | %.2f | %+.2f | %s |" % (
                r["profiler"], r["ns"] or 0, r["extra_ns"] or 0,
                ci_text(r["extra_ns_ci"], "%+.2f")))
    if w.get("hung"):
        out += ["", "Runs killed or crashed (left out): %r" % w["hung"]]
    return "\n".join(out) + "\n"
