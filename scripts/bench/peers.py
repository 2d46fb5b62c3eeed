#!/usr/bin/python3
"""Process-level benchmarks: libddprof side by side with no agent and with its peers,
gperftools and async-profiler.

usage: peers.py RESULTS_DIR [--quick] [NAME...]
  NAME: run only these benchmarks (overhead, accuracy, spawn, startup, memory, micro, short,
  alloc, wall)

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
  short.json     what short-lived processes pay: make -j2, gcc -c, a pipeline, git log -p
  memory.json    extra peak RSS of 64 threads with ~10k distinct stacks
                 (build/bench/many_stacks), with the default ceiling and a small one
  micro.json     with a before build only: the handler's, the trie's and the
                 serializer's micro-benchmarks of both builds, alternated (bench_micro)
  alloc.json     the allocation profilers: a malloc/free micro-benchmark on 2 threads
                 (build/bench/alloc_churn) and a Python workload, without a profiler,
                 under libddprof with its allocation profiles off and on, heaptrack and
                 async-profiler's nativemem: time and peak RSS (peers_alloc.py)
  wall.json      the wall-clock and lock profilers: a mostly idle process of 10 and 1000
                 threads (CPU under libddprof's wall profile and async-profiler's wall
                 mode / without) and an uncontended mutex lock/unlock pair (libddprof's
                 lock profile off and on, async-profiler's nativelock) (peers_wall.py)
  base.json      which before build ran, if one was asked for

The code: this file runs the benchmarks; peers_common.py holds what they share (the
candidates and how a program runs under each, the pairing of runs, the statistics, the
results' files); peers_cpu.py the overhead and accuracy benchmarks, peers_process.py the
spawn, start-up and memory ones, peers_micro.py the before build's micro-benchmarks,
peers_alloc.py the allocation profilers' ones.

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
import os
import sys
import time

from peers_alloc import bench_alloc
from peers_common import ASPROF, BASE_DIR, BASE_REV, BEFORE, PEERS, write
from peers_cpu import bench_accuracy, bench_overhead
from peers_micro import bench_micro
from peers_process import bench_memory, bench_spawn, bench_startup
from peers_short import bench_short
from peers_wall import bench_wall


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
        ("spawn", bench_spawn), ("startup", bench_startup), ("memory", bench_memory),
        ("alloc", bench_alloc), ("wall", bench_wall), ("short", bench_short)]
    for name, fn in benches:
        if only and name not in only:
            continue
        t0 = time.monotonic()
        print("bench: %s" % name, flush=True)
        fn(resdir)
        print("  (%.0f s)" % (time.monotonic() - t0), flush=True)


if __name__ == "__main__":
    main()
