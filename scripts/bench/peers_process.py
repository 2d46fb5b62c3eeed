"""The process benchmarks of peers.py: spawn.json (thread create+join, fork+exit+wait,
fork_storm), startup.json (/bin/true under LD_PRELOAD) and memory.json (peak RSS with
~10k distinct stacks).
"""
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from peers_common import (BEFORE, BENCH, HUNG, Hung, MINE, PEERS, Profiler, QUICK, ROOT,
    SPAWN_TIMEOUT, WORKLOADS, before_after, fields, median, median_ci, paired,
    print_before_after, run, same_rounds, write)


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
