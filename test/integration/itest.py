"""Shared helpers of the integration tests (run by run.py).

Each test runs a workload from build/workloads under the agent, decodes every profile
it wrote with our own decoder (build/pprof-dump --json) and with a real consumer
(`go tool pprof -top`), and checks what a user relies on, with numbers.

Tests live in tests_*.py modules: every function named test_* taking a Ctx.
"""
import glob
import json
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, "build")
# The library under test: build/libddprof.so, or another build of it named by
# DDPROF_TEST_LIB (make asan: build/asan/libddprof.so). DDPROF_TEST_PRELOAD_FIRST is
# what LD_PRELOAD must load before it (the ASan runtime, which has to come first in a
# process); tests set LD_PRELOAD to PRELOAD, plus their own libraries after it.
LIB = os.environ.get("DDPROF_TEST_LIB") or os.path.join(BUILD, "libddprof.so")
PRELOAD = " ".join(p for p in (os.environ.get("DDPROF_TEST_PRELOAD_FIRST", ""), LIB) if p)
DUMP = os.path.join(BUILD, "pprof-dump")
# Debian's Python (gunicorn, Python workloads): the first python3 on PATH is another build.
PYTHON = "/usr/bin/python3"
WORKLOADS = os.path.join(BUILD, "workloads")
VERBOSE = "-v" in sys.argv
# The agent keeps unwind tables in $XDG_CACHE_HOME/libddprof by default: the tests share
# one of their own (later tests load what earlier ones built, as processes on a host
# do), never the user's.
CACHE_HOME = tempfile.mkdtemp(prefix="ddprof-it-cache-")


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def kill_group(p):
    """SIGKILL to the process group p leads (started with start_new_session)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_profiled(argv, env_extra, timeout=120, preload=True):
    """Runs argv under the agent; returns (rc, stdout, stderr, cpu_seconds, wall)."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("DD_") or k.startswith("PYROSCOPE_"):
            del env[k]
    if preload:
        env["LD_PRELOAD"] = PRELOAD
    env["XDG_CACHE_HOME"] = CACHE_HOME
    env.update(env_extra)
    t0 = time.monotonic()
    # Its own process group: on a timeout the whole group is killed, so that a hung
    # fork child holding the output pipes cannot hang the run.
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    out, err = b"", b""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        raise TestFailure("%s did not finish within %d s: %r %r"
                          % (argv, timeout, out[-300:], err[-300:]))
    wall = time.monotonic() - t0
    # The kernel's CPU accounting of the child (user + system), from wait4's rusage.
    # communicate() already reaped it, so ask the workload itself as well.
    cpu = None
    m = re.search(rb"cpu_seconds ([0-9.]+)", out)
    if m:
        cpu = float(m.group(1))
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), cpu, wall


def dump(files, stacks=False):
    args = [DUMP, "--json"] + (["--stacks"] if stacks else []) + list(files)
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    check(r.returncode == 0, "pprof-dump failed on %s: %s" % (files, r.stderr.decode()))
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]


def go_pprof_top(path):
    env = dict(os.environ)
    env.setdefault("HOME", tempfile.gettempdir())
    env["PPROF_TMPDIR"] = tempfile.gettempdir()
    r = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=cpu-time", path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, env=env)
    check(r.returncode == 0, "go tool pprof -top failed on %s: %s" % (path, r.stderr.decode()))
    return r.stdout.decode()


PROFILER_FRAME = "[profiler]"


def profiler_ns(profs, ti):
    """cpu-time of the profiler's own thread ("[profiler]" samples)."""
    return sum(p["functions"].get(PROFILER_FRAME, {"self": [0, 0]})["self"][ti] for p in profs)


def app_total(profs, ti):
    """cpu-time of the application's samples: all but "[profiler]". Workloads report
    their own CPU before they exit, so it leaves out the exit flush that profiles the
    profiler."""
    return sum(p["totals"][ti] for p in profs) - profiler_ns(profs, ti)


def value_index(prof, name):
    for i, (t, _u) in enumerate(prof["sample_types"]):
        if t == name:
            return i
    raise TestFailure("sample type %s missing: %s" % (name, prof["sample_types"]))


def profile_files(outdir, pid=None):
    pat = "libddprof_%s_*.pprof" % (pid if pid is not None else "*")
    return sorted(glob.glob(os.path.join(outdir, pat)))


class Ctx:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ddprof-it-")

    def close(self):
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
