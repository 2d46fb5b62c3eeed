"""The CPU profilers' benchmarks of peers.py: overhead.json (fixed CPU work under each
profiler at several rates) and accuracy.json (a profile's CPU total against the kernel's).
"""
import os
import random
import statistics

from peers_common import (BEFORE, BENCH, Hung, MINE, PEERS, Profiler, QUICK, WORKLOADS,
    before_after, fields, fmt, grouped, median, median_ci, print_before_after, run,
    same_rounds, write)


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
