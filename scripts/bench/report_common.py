"""What report.py's sections (the report_*.py modules) share: loading a result, the
verdicts and number formats, the peers and builds present in a result, the machine's and
the peers' descriptions.
"""
import json
import os
import platform
import subprocess


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


def ci_text(ci):
    return "%.3f-%.3f" % tuple(ci) if ci else "n/a"


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
