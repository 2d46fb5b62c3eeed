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
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

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


def clean_env(extra):
    """This environment without the agent's own variables (the caller's DD_* would
    change what a test measures), with the tests' unwind cache, and extra."""
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("DD_") or k.startswith("PYROSCOPE_"):
            del env[k]
    env["XDG_CACHE_HOME"] = CACHE_HOME
    env.update(extra)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children_of(ppid):
    """The pids whose parent is ppid (from /proc)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == ppid:
            pids.append(int(d))
    return pids


class Gunicorn:
    """Debian's gunicorn serving app_source (written as app.py in ctx.dir) on a free
    port under the agent, with env (its DD_* variables) and args (workers, worker
    class...). As a context: started and answering on entry, killed on exit if still
    running; stop() is the clean end (SIGTERM) a test judges."""

    def __init__(self, ctx, app_source, args, env):
        self.ctx = ctx
        with open(os.path.join(ctx.dir, "app.py"), "w") as f:
            f.write(app_source)
        self.url = "http://127.0.0.1:%d/" % free_port()
        self.argv = [PYTHON, "-m", "gunicorn"] + list(args) + [
            "-b", self.url[len("http://"):-1], "--chdir", ctx.dir, "app:application"]
        self.env = clean_env({"LD_PRELOAD": PRELOAD})
        self.env.update(env)
        self.master = None

    def __enter__(self):
        self.master = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.get(5)
                return self
            except OSError:
                if self.master.poll() is not None:
                    raise AssertionError("gunicorn exited: %s"
                                         % self.master.stderr.read().decode()[-1000:])
                check(time.monotonic() < deadline, "gunicorn did not answer within 30 s")
                time.sleep(0.1)

    def get(self, timeout):
        """One request: the body, as text."""
        with urllib.request.urlopen(self.url, timeout=timeout) as r:
            return r.read().decode()

    def hammer(self, clients, each, pause=0.0):
        """clients threads sending each requests (pause seconds before each one): the
        bodies of the answers, and the failures (every one reported, none raised)."""
        bodies, errors = [], []
        lock = threading.Lock()

        def client():
            for _ in range(each):
                time.sleep(pause)
                try:
                    body = self.get(30)
                    with lock:
                        bodies.append(body)
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    with lock:
                        errors.append(repr(e))

        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return bodies, errors

    def workers(self, n, timeout=10.0):
        """The master's children once there are n (the first answer may come before
        the last worker is forked), or those there are after timeout."""
        deadline = time.monotonic() + timeout
        kids = children_of(self.master.pid)
        while len(kids) < n and time.monotonic() < deadline:
            time.sleep(0.05)
            kids = children_of(self.master.pid)
        return sorted(kids)

    def stop(self, timeout=30):
        """SIGTERM to the master: (exit status, its stderr). Fails the test if it does
        not exit within timeout."""
        self.master.send_signal(signal.SIGTERM)
        try:
            rc = self.master.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.master.kill()
            raise AssertionError("gunicorn master did not exit within %d s of SIGTERM"
                                 % timeout)
        return rc, self.master.stderr.read().decode()

    def __exit__(self, *exc):
        if self.master.poll() is None:
            self.master.kill()
            self.master.wait()
        return False


def kill_group(p):
    """SIGKILL to the process group p leads (started with start_new_session)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_profiled(argv, env_extra, timeout=120, preload=True):
    """Runs argv under the agent; returns (rc, stdout, stderr, cpu_seconds, wall)."""
    env = clean_env({"LD_PRELOAD": PRELOAD} if preload else {})
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


def go_pprof_top(path, sample_index="cpu-time"):
    env = dict(os.environ)
    env.setdefault("HOME", tempfile.gettempdir())
    env["PPROF_TMPDIR"] = tempfile.gettempdir()
    r = subprocess.run(["go", "tool", "pprof", "-top", "-sample_index=" + sample_index, path],
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


def numbers(stdout):
    """The "name integer" lines a workload prints, as a dict."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and re.fullmatch(r"-?\d+", parts[1]):
            out[parts[0]] = int(parts[1])
    return out


def files_by_pid(outdir):
    """The profiles written to outdir, grouped by the pid in their names."""
    by_pid = {}
    for f in profile_files(outdir):
        by_pid.setdefault(int(re.search(r"libddprof_(\d+)_", f).group(1)), []).append(f)
    return by_pid


def profile_files(outdir, pid=None):
    pat = "libddprof_%s_*.pprof" % (pid if pid is not None else "*")
    return sorted(glob.glob(os.path.join(outdir, pat)))


class Ctx:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ddprof-it-")

    def close(self):
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
