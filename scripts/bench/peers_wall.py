"""wall.json of peers.py: the wall-clock and lock profilers' benchmarks.

Candidates, each against no profiler in the same round (peers_common.grouped):
  libddprof off    preloaded with its defaults (CPU profiling only: no wall or lock
                   hooks)
  libddprof wall   DD_PROFILING_WALL_ENABLED=true at the default interval (10 ms: 100 Hz)
  libddprof lock   DD_PROFILING_LOCK_ENABLED=true (lock micro-benchmark only)
  async-profiler wall
                   ASPROF_COMMAND=start,event=wall,interval=10ms,...: every thread
                   sampled on a wall clock at 100 Hz (it signals the threads)
  async-profiler nativelock
                   ASPROF_COMMAND=start,nativelock=10ms,...: its pthread mutex hooks

Workloads:
  idle-10, idle-1000
                   build/workloads/wall_threads idle N 3: N threads waiting in
                   pthread_cond_timedwait (woken every 100 ms) and one thread burning
                   CPU, 3 s: a mostly idle server. The figure is the process's CPU
                   (wait4's rusage, every thread) under a profiler / without.
  lock-pair        build/bench/lock_pair: uncontended pthread_mutex_lock/unlock pairs
                   on one thread; the figure is the extra ns a pair (its own clock).
"""
import os

from peers_common import (BENCH, HUNG, PEERS, QUICK, ROOT, Profiler, grouped, median,
                          median_ci, run, write)

WALL_THREADS = os.path.join(ROOT, "build", "workloads", "wall_threads")
LOCK_PAIR = os.path.join(BENCH, "lock_pair")
SECONDS = "1" if QUICK else "3"
WORKLOADS = {"idle-10": [WALL_THREADS, "idle", "10", SECONDS],
             "idle-1000": [WALL_THREADS, "idle", "1000", SECONDS]}
PAIRS = "20000000" if QUICK else "200000000"
ROUNDS = 2 if QUICK else 8


class AsprofMode(Profiler):
    """async-profiler in a mode of its own (wall, nativelock): its command given."""

    def __init__(self, label, command):
        super().__init__("async-profiler", label=label)
        self.command_args = command

    def env(self):
        env = super().env()
        env["ASPROF_COMMAND"] = ",".join(
            ["start"] + self.command_args + ["collapsed", "total",
                                             "file=%s" % os.path.join(self.dir, "%p.txt")])
        return env


def candidates(kind):
    c = [Profiler("libddprof", label="libddprof off")]
    if kind == "wall":
        c.append(Profiler("libddprof", label="libddprof wall",
                          extra={"DD_PROFILING_WALL_ENABLED": "true"}))
        if "async-profiler" in PEERS:
            c.append(AsprofMode("async-profiler wall", ["event=wall", "interval=10ms"]))
    else:
        c.append(Profiler("libddprof", label="libddprof lock",
                          extra={"DD_PROFILING_LOCK_ENABLED": "true"}))
        if "async-profiler" in PEERS:
            c.append(AsprofMode("async-profiler nativelock", ["nativelock=10ms"]))
    return c


def bench_wall(resdir):
    HUNG.clear()
    rows = []
    for wl, argv in WORKLOADS.items():
        def measure(c, argv=argv):
            _out, _wall, cpu, _rss = run(c, argv)
            return cpu
        rounds = grouped([candidates("wall")], [ROUNDS], measure)[0]
        for c in candidates("wall"):
            ratios = [r[c.name] / r["none"] for r in rounds if c.name in r and r["none"]]
            rows.append({"workload": wl, "profiler": c.name, "rounds": len(ratios),
                         "cpu_ratio": median(ratios), "cpu_ratio_ci": median_ci(ratios),
                         "cpu_s": median([r[c.name] for r in rounds if c.name in r]),
                         "none_cpu_s": median([r["none"] for r in rounds])})
            if c.name == "libddprof wall":
                # The wall profile's own cost, paired within each round against
                # libddprof with its defaults (which leaves out the drift between
                # rounds that the ratios to the run without a profiler carry).
                own = [r[c.name] / r["libddprof off"] for r in rounds
                       if c.name in r and r.get("libddprof off")]
                rows[-1]["own_ratio"] = median(own)
                rows[-1]["own_ratio_ci"] = median_ci(own)
        print("  %s: %s" % (wl, ", ".join("%s %.4f" % (r["profiler"], r["cpu_ratio"] or 0)
                                          for r in rows if r["workload"] == wl)), flush=True)

    def measure_pair(c):
        out, _wall, _cpu, _rss = run(c, [LOCK_PAIR, PAIRS])
        return float(next(l.split()[1] for l in out.splitlines()
                          if l.startswith("ns_per_pair")))
    rounds = grouped([candidates("lock")], [ROUNDS], measure_pair)[0]
    for c in candidates("lock"):
        extra = [r[c.name] - r["none"] for r in rounds if c.name in r]
        rows.append({"workload": "lock-pair", "profiler": c.name, "rounds": len(extra),
                     "extra_ns": median(extra), "extra_ns_ci": median_ci(extra),
                     "ns": median([r[c.name] for r in rounds if c.name in r]),
                     "none_ns": median([r["none"] for r in rounds])})
    print("  lock-pair: %s" % ", ".join("%s %+.2f ns" % (r["profiler"], r["extra_ns"] or 0)
                                        for r in rows if r["workload"] == "lock-pair"),
          flush=True)
    write(resdir, "wall.json", {"rows": rows, "hung": dict(HUNG), "rounds": ROUNDS,
                                "seconds": float(SECONDS), "pairs": int(PAIRS)})
