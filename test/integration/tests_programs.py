"""Complete profiles of the programs users run: Debian's python3 with C extensions
loaded at run time, and gunicorn's workers with and without --preload.

A stack is complete when its outermost frame is where a process or thread begins
(tests_unwind.ROOTS); "[incomplete]" is where the unwinder gave up. Both are measured on
the application's CPU (the "[profiler]" frame left out).
"""
import os
import re
import threading
import time

import subprocess

from itest import (PRELOAD, PYTHON, Gunicorn, check, clean_env, dump, files_by_pid,
                   go_pprof_top, profile_files, run_profiled, value_index)
from tests_unwind import ROOTS

INCOMPLETE = "[incomplete]"


def shares(profs):
    """(application cpu-time ns, rooted ns, incomplete ns) over profs."""
    total = rooted = incomplete = 0
    for p in profs:
        ti = value_index(p, "cpu-time")
        for st in p["stacks"]:
            fr = st["frames"]
            if fr == ["[profiler]"]:
                continue
            v = st["values"][ti]
            total += v
            if fr and fr[-1] in ROOTS:
                rooted += v
            elif fr and fr[-1] == INCOMPLETE:
                incomplete += v
    return total, rooted, incomplete


def incomplete_leaves(profs, k=4):
    """The innermost frames of the heaviest incomplete stacks, for a failure message."""
    acc = {}
    for p in profs:
        ti = value_index(p, "cpu-time")
        for st in p["stacks"]:
            if st["frames"] and st["frames"][-1] == INCOMPLETE:
                key = " <- ".join(st["frames"][:3])
                acc[key] = acc.get(key, 0) + st["values"][ti]
    return "; ".join("%s (%.0f ms)" % (s, v / 1e6)
                     for s, v in sorted(acc.items(), key=lambda kv: -kv[1])[:k])


# C extensions loaded by import (dlopen of an absolute path) a moment before the loop
# that burns CPU in them and in the libraries they need (libcrypto, libz, libmpdec,
# libexpat): every one is mapped after start-up, so no table of the module thread's
# could exist yet unless the import built it.
PY_EXTENSIONS = """
import time
t0 = time.process_time()
import hashlib, json, zlib, decimal, pyexpat, binascii, _struct
data = b"x" * 8192
end = time.process_time() + 1.0
n = 0
while time.process_time() < end:
    h = hashlib.sha256(data).digest()
    z = zlib.compress(data + h, 6)
    s = json.dumps({"h": binascii.hexlify(h).decode(), "n": [n] * 20})
    d = decimal.Decimal(n) / decimal.Decimal(7)
    p = pyexpat.ParserCreate(); p.Parse("<a><b>%d</b></a>" % n, True)
    n += 1
print("rounds %d" % n)
print("cpu_seconds %.6f" % time.process_time())
"""


def test_python_c_extensions_are_rooted_from_their_first_sample(ctx):
    """A 1 s Python script that imports six C extensions and burns CPU in them at once
    (1 kHz): its only profile (written at exit) has <= 1% of its CPU in [incomplete] and
    >= 98% rooted; the extensions and libcrypto are named. Before tables were built in
    the dlopen caller's call, 65-85% was [incomplete]."""
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, cpu, _wall = run_profiled(
        [PYTHON, "-c", PY_EXTENSIONS],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000"})
    check(rc == 0, "python exit %d: %s" % (rc, stderr[-500:]))
    files = profile_files(out)
    check(len(files) == 1, "expected the one exit profile, got %s" % files)
    profs = dump(files, stacks=True)
    total, rooted, incomplete = shares(profs)
    check(total > 0.8 * cpu * 1e9, "profile has %.2f s of %.2f s CPU" % (total / 1e9, cpu))
    inc = 100.0 * incomplete / total
    root = 100.0 * rooted / total
    check(inc <= 1.0, "%.2f%% of the CPU in [incomplete] (%s)" % (inc, incomplete_leaves(profs)))
    check(root >= 98.0, "only %.2f%% rooted" % root)
    funcs = profs[0]["functions"]
    named = [f for f in funcs if "sha256" in f.lower() or f.startswith("EVP_")]
    check(named, "no libcrypto function named among %d functions" % len(funcs))
    check(any(f in funcs for f in ("deflate", "deflate_slow", "longest_match", "compress2")),
          "no zlib function named")
    top = go_pprof_top(files[0])
    check("_PyEval_EvalFrameDefault" in top, "go tool pprof does not read it:\n%s" % top[:800])
    return "cpu=%.2fs incomplete=%.2f%% rooted=%.2f%%" % (cpu, inc, root)


# libcrypto's assembly: SHA-512 and SHA-1 keep their caller's SP in a stack slot (CFA =
# *(rsp + n) + 8, a DWARF expression) and SHA-256 and MD5 in rax or rsi while they
# realign the stack (CFA = rax + 8): rules the unwinder evaluates in the handler.
PY_HASH_LOOPS = """
import hashlib, time
data = b"x" * (1 << 20)
end = time.process_time() + 2.0
while time.process_time() < end:
    for name in ("sha512", "sha256", "sha1", "md5", "sha3_256"):
        hashlib.new(name, data).digest()
print("cpu_seconds %.6f" % time.process_time())
"""


def test_hashlib_assembly_loops_are_rooted(ctx):
    """SHA-512, SHA-256, SHA-1, MD5 and SHA3 loops through hashlib for 2 s at 1 kHz: <= 1%
    of the CPU in [incomplete]; of the CPU whose leaf is libcrypto's code, >= 95% in
    stacks that go on through _hashlib (the walk crossed the assembly's frames), and
    SHA512_Update and SHA256_Update among the callers. 78% was [incomplete] before the
    unwinder evaluated the CFA expressions and other-register rules of OpenSSL's
    assembly. (Debian's libcrypto is stripped: its assembly's own functions are local
    symbols, so the leaves stay "[libcrypto.so.3]+offset" without debug symbols.)"""
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, cpu, _wall = run_profiled(
        [PYTHON, "-c", PY_HASH_LOOPS],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000"})
    check(rc == 0, "python exit %d: %s" % (rc, stderr[-500:]))
    profs = dump(profile_files(out), stacks=True)
    total, rooted, incomplete = shares(profs)
    check(total > 0.8 * cpu * 1e9, "profile has %.2f s of %.2f s CPU" % (total / 1e9, cpu))
    inc = 100.0 * incomplete / total
    check(inc <= 1.0, "%.2f%% of the CPU in [incomplete] (%s)" % (inc, incomplete_leaves(profs)))
    leaf = through = 0
    callers = set()
    for p in profs:
        ti = value_index(p, "cpu-time")
        for st in p["stacks"]:
            fr = st["frames"]
            if not fr or not fr[0].startswith("[libcrypto"):
                continue
            leaf += st["values"][ti]
            if any("_hashlib" in f for f in fr):
                through += st["values"][ti]
            callers.update(f for f in fr if f.endswith("_Update"))
    check(leaf > 0.5 * total, "only %.0f%% of the CPU in libcrypto" % (100.0 * leaf / total))
    check(through >= 0.95 * leaf, "only %.1f%% of libcrypto's leaves reach _hashlib"
          % (100.0 * through / leaf))
    for name in ("SHA512_Update", "SHA256_Update"):
        check(name in callers, "%s not among the callers: %s" % (name, sorted(callers)))
    return "cpu=%.2fs incomplete=%.2f%% rooted=%.2f%%; libcrypto leaves %.0f%% of the CPU, " \
        "%.1f%% of them through _hashlib" % (cpu, inc, 100.0 * rooted / total,
                                             100.0 * leaf / total, 100.0 * through / leaf)


# Each request hashes 6 MiB with libcrypto (through _hashlib, imported by the app: in
# the master before the fork with --preload, in each worker without it) and answers
# with the worker's pid and the wall time it served at.
GUNICORN_HASH_APP = '''
import hashlib, os, time
DATA = b"x" * 65536
def application(environ, start_response):
    h = b""
    for _ in range(100):
        h = hashlib.sha256(DATA + h).digest()
    body = ("%d %.6f %s\\n" % (os.getpid(), time.time(), h.hex()[:8])).encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]
'''

GUNICORN_CONFIGS = [
    ("sync --preload", ["--preload", "-w", "2", "-k", "sync"]),
    ("sync", ["-w", "2", "-k", "sync"]),
    ("gthread --preload", ["--preload", "-w", "2", "-k", "gthread", "--threads", "2"]),
    ("gthread", ["-w", "2", "-k", "gthread", "--threads", "2"]),
]


def serve_and_measure(ctx, name, args, seconds=4.0):
    """Runs gunicorn with args under 3 clients for seconds, 1 s periods at 1 kHz; returns
    (worker pid -> served wall times, profiles by pid, errors)."""
    out = os.path.join(ctx.dir, "out-" + name.replace(" ", "").replace("-", ""))
    served, errors = {}, []
    lock = threading.Lock()
    with Gunicorn(ctx, GUNICORN_HASH_APP, args,
                  {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_UPLOAD_PERIOD": "1",
                   "DD_PROFILING_CPU_HZ": "1000"}) as g:
        g.workers(2)
        stop = time.monotonic() + seconds

        def client():
            while time.monotonic() < stop:
                try:
                    pid, at, _h = g.get(30).split()
                    with lock:
                        served.setdefault(int(pid), []).append(float(at))
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    with lock:
                        errors.append(repr(e))

        clients = [threading.Thread(target=client) for _ in range(3)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        rc, stderr = g.stop()
    check(rc == 0, "%s: gunicorn exit %d: %s" % (name, rc, stderr[-800:]))
    check("libddprof" not in stderr, "%s: agent messages: %s" % (name, stderr[-800:]))
    return served, files_by_pid(out), errors


def test_gunicorn_workers_are_rooted_and_in_every_period_they_served(ctx):
    """Debian's gunicorn serving a WSGI app that hashes with hashlib (libcrypto), 2
    workers, sync and gthread, with and without --preload, 4 s of requests with 1 s
    periods at 1 kHz: in every configuration <= 1% of the workers' CPU is [incomplete],
    and every second a worker served a request in lies inside one of its own profiles.
    With --preload, 74% of the workers' CPU was [incomplete] before the master's
    dlopen built its tables."""
    results = []
    for name, args in GUNICORN_CONFIGS:
        served, by_pid, errors = serve_and_measure(ctx, name, args)
        check(not errors, "%s: %d requests failed: %s" % (name, len(errors), errors[:3]))
        check(len(served) == 2, "%s: %d workers served: %s" % (name, len(served), sorted(served)))
        total = rooted = incomplete = 0
        for pid, times in sorted(served.items()):
            files = by_pid.get(pid, [])
            check(files, "%s: worker %d served %d requests and has no profile"
                  % (name, pid, len(times)))
            profs = dump(files, stacks=True)
            spans = [(p["time_nanos"] / 1e9, (p["time_nanos"] + p["duration_nanos"]) / 1e9)
                     for p in profs]
            # 50 ms of slack: a request's time is read in the app, the period's bounds
            # in the agent, and the clocks are the same (CLOCK_REALTIME).
            missed = [t for t in times if not any(a - 0.05 <= t <= b + 0.05 for a, b in spans)]
            if missed:
                check(False, "%s: worker %d served at %d instants no profile covers "
                      "(first %.3f; profiles %s)" % (name, pid, len(missed), missed[0],
                                                     ["%.3f-%.3f" % s for s in spans]))
            t, r, i = shares(profs)
            total += t
            rooted += r
            incomplete += i
            if i > 0.01 * max(t, 1):
                check(False, "%s: worker %d has %.2f%% of its CPU in [incomplete]: %s"
                      % (name, pid, 100.0 * i / t, incomplete_leaves(profs)))
        check(total > 1e9, "%s: the workers' profiles hold %.2f s of CPU" % (name, total / 1e9))
        results.append("%s %.2f%% incomplete %.1f%% rooted (%.1f s)" % (
            name, 100.0 * incomplete / total, 100.0 * rooted / total, total / 1e9))
    return "; ".join(results)


def pool_workers_and_profiles(method, rc, stdout, stderr, out):
    """A pool script's run: it exited 0 without an agent message and printed its two
    workers' "worker PID CPU" lines, and each worker has profiles in out. Returns
    ({pid: cpu seconds}, profiles by pid)."""
    check(rc == 0, "%s: exit %d: %s" % (method, rc, stderr[-500:]))
    check("libddprof" not in stderr, "%s: agent messages: %s" % (method, stderr[-500:]))
    workers = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "worker":
            workers[int(parts[1])] = float(parts[2])
    check(len(workers) == 2, "%s: workers %s" % (method, workers))
    by_pid = files_by_pid(out)
    missing = sorted(p for p in workers if p not in by_pid)
    check(not missing, "%s: workers %s have no profile (profiles of %s)"
          % (method, missing, sorted(by_pid)))
    return workers, by_pid


# A pool's workers burn 50 ms of CPU per task and report their pid and their process's
# CPU clock with each result; the pool is closed and joined. With fork and forkserver
# the workers end with os._exit (no exit handlers, no destructor), with spawn with
# sys.exit.
PY_POOL = """
import multiprocessing as mp, os, sys, time
def task(n):
    end = time.process_time() + 0.05
    x = 0
    while time.process_time() < end:
        x += sum(i * i for i in range(1000))
    return os.getpid(), time.process_time()
if __name__ == "__main__":
    pool = mp.get_context(sys.argv[1]).Pool(2)
    res = pool.map(task, range(24), chunksize=1)
    pool.close()
    pool.join()
    cpu = {}
    for pid, t in res:
        cpu[pid] = max(cpu.get(pid, 0.0), t)
    for pid, t in sorted(cpu.items()):
        print("worker %d %.6f" % (pid, t))
"""


def test_pool_workers_that_end_with_os_exit_are_profiled(ctx):
    """multiprocessing.Pool(2) with the fork, forkserver and spawn start methods, 24
    tasks of 50 ms of CPU, closed and joined, at 1 kHz: every worker that ran a task has
    a profile, and the CPU of the workers' profiles is within 10% of what the workers'
    own clocks counted. Workers forked (directly or by the fork server) end with
    os._exit, which runs no exit handler: before _exit made the final profile, they were
    absent (0 of their CPU)."""
    results = []
    for method in ("fork", "forkserver", "spawn"):
        out = os.path.join(ctx.dir, "out-" + method)
        script = os.path.join(ctx.dir, "pool.py")  # spawn and forkserver import __main__
        with open(script, "w") as f:
            f.write(PY_POOL)
        rc, stdout, stderr, _cpu, _wall = run_profiled(
            [PYTHON, script, method],
            {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000"})
        workers, by_pid = pool_workers_and_profiles(method, rc, stdout, stderr, out)
        profiled = sum(shares(dump(by_pid[p], stacks=True))[0] for p in workers) / 1e9
        truth = sum(workers.values())
        ratio = profiled / truth
        check(abs(ratio - 1) <= 0.10, "%s: the workers' profiles hold %.3f s of the %.3f s "
              "their clocks counted (%.3f)" % (method, profiled, truth, ratio))
        results.append("%s %.3f of %.2f s" % (method, ratio, truth))
    return "; ".join(results)


def test_relative_output_dir_is_the_one_named_at_start(ctx):
    """DD_PROFILING_OUTPUT_DIR=rel in a program that computes, then does chdir("/")
    (as a daemon does) and computes again: its profile is in rel under the directory
    it started in, not in /rel."""
    script = ("import os, time\n"
              "def burn(s):\n"
              "    end = time.process_time() + s\n"
              "    while time.process_time() < end: pass\n"
              "burn(0.2); os.chdir('/'); burn(0.2)\n")
    env = clean_env({"LD_PRELOAD": PRELOAD, "DD_PROFILING_OUTPUT_DIR": "rel"})
    check(not os.path.exists("/rel"), "/rel exists before the test")
    r = subprocess.run([PYTHON, "-c", script], env=env, cwd=ctx.dir, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    stray = os.path.exists("/rel")
    if stray:
        subprocess.run(["rm", "-rf", "/rel"])
    check(r.returncode == 0, "python exit %d: %s" % (r.returncode, r.stderr[-300:]))
    check(not stray, "profiles went to /rel")
    files = profile_files(os.path.join(ctx.dir, "rel"))
    check(len(files) == 1, "profiles in %s/rel: %s" % (ctx.dir, files))
    return "written to %s" % files[0]


# A pool busy with 50 ms tasks is terminated after 1.5 s: Pool.terminate() sends its
# workers SIGTERM, whose action in them is the default one. Just before, the script
# reads each worker's CPU from /proc (utime + stime, in clock ticks).
PY_POOL_TERMINATE = """
import multiprocessing as mp, os, sys, time
def task(n):
    end = time.process_time() + 0.05
    x = 0
    while time.process_time() < end:
        x += sum(i * i for i in range(1000))
    return n
if __name__ == "__main__":
    pool = mp.get_context(sys.argv[1]).Pool(2)
    pending = pool.map_async(task, range(400), chunksize=1)
    time.sleep(1.5)
    hz = os.sysconf("SC_CLK_TCK")
    for p in pool._pool:
        with open("/proc/%d/stat" % p.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        print("worker %d %.3f" % (p.pid, (int(fields[11]) + int(fields[12])) / hz))
    pool.terminate()
    pool.join()
    print("codes", [p.exitcode for p in pool._pool])
"""


def test_terminated_pool_workers_are_profiled(ctx):
    """multiprocessing.Pool(2) with the fork, forkserver and spawn start methods, busy
    with 50 ms tasks, terminated after 1.5 s (SIGTERM, default action: the workers die
    of it, exit code -15), with DD_PROFILING_FLUSH_ON_SIGNAL=1: every worker has a profile, and their profiles hold their
    CPU as /proc counted it just before, within 10% (and 40 ms: they run on until the
    signal lands). Absent before the agent watched SIGTERM's default action."""
    results = []
    script = os.path.join(ctx.dir, "pool_terminate.py")
    with open(script, "w") as f:
        f.write(PY_POOL_TERMINATE)
    for method in ("fork", "forkserver", "spawn"):
        out = os.path.join(ctx.dir, "out-" + method)
        rc, stdout, stderr, _cpu, _wall = run_profiled(
            [PYTHON, script, method],
            {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
             "DD_PROFILING_FLUSH_ON_SIGNAL": "1"})
        check("codes [-15, -15]" in stdout, "%s: workers did not die of SIGTERM: %s"
              % (method, stdout))
        workers, by_pid = pool_workers_and_profiles(method, rc, stdout, stderr, out)
        for pid, truth in sorted(workers.items()):
            got = shares(dump(by_pid[pid], stacks=True))[0] / 1e9
            check(0.9 * truth <= got <= 1.1 * truth + 0.04,
                  "%s: worker %d's profiles hold %.3f s, /proc counted %.3f s"
                  % (method, pid, got, truth))
            results.append("%s %.2f/%.2f" % (method, got, truth))
    return "; ".join(results)


# A root parent forks two workers that switch to nobody (as nginx's do: setgid, then
# setuid), load a C extension and compute 0.4 s each, one of them in two periods; the
# output directory and the unwind cache are root's (0755, 0700). The parent waits for
# them, computing a little, and prints each worker's CPU as the kernel counted it.
PY_DROP = """
import os, resource, time
def burn(s):
    end = time.process_time() + s
    while time.process_time() < end:
        pass
burn(0.3)
workers = []
for i in range(2):
    pid = os.fork()
    if pid == 0:
        os.setgid(65534)
        os.setuid(65534)
        import _decimal
        burn(0.2)
        time.sleep(1.2 * i)
        burn(0.2)
        os._exit(0)
    workers.append(pid)
for pid in workers:
    _, status, ru = os.wait4(pid, 0)
    print("worker %d status %d cpu %.3f" % (pid, status, ru.ru_utime + ru.ru_stime))
burn(0.1)
"""


def test_workers_that_drop_root_reach_the_output_directory_silently(ctx):
    """A root parent forks two workers that switch to nobody, load a C extension and
    compute 0.4 s each: they cannot create files in the root-owned (0755) output
    directory nor use root's unwind cache, and nothing of that reaches the program's
    stderr (its log). Their profiles go to a spool made for nobody before the switch
    (.libddprof-spool/65534/) and the parent, still root, moves them into the directory:
    every worker's profiles are there, root's and 0600 like the parent's, holding its
    CPU within 10% of the kernel's count, and the spool is empty."""
    if os.geteuid() != 0:
        return "skipped: needs root (a process that drops its privileges)"
    out = os.path.join(ctx.dir, "out")
    os.makedirs(out)
    os.chmod(out, 0o755)
    rc, stdout, stderr, _cpu, _wall = run_profiled(
        [PYTHON, "-c", PY_DROP], {"DD_PROFILING_OUTPUT_DIR": out,
                                  "DD_PROFILING_UPLOAD_PERIOD": "1",
                                  "XDG_CACHE_HOME": os.path.join(ctx.dir, "cache")})
    workers = {int(m.group(1)): (int(m.group(2)), float(m.group(3))) for m in
               re.finditer(r"worker (\d+) status (\d+) cpu ([\d.]+)", stdout)}
    check(rc == 0 and len(workers) == 2 and all(st == 0 for st, _ in workers.values()),
          "exit %d: %r %r" % (rc, stdout, stderr))
    check("libddprof" not in stderr, "printed into the program's stderr: %r" % stderr)
    by_pid = files_by_pid(out)
    spool = os.path.join(out, ".libddprof-spool", "65534")
    left = os.listdir(spool) if os.path.isdir(spool) else None
    check(left == [], "the spool for nobody: %r (expected made, then emptied)" % left)
    results = []
    for pid, (_st, truth) in sorted(workers.items()):
        check(pid in by_pid, "worker %d has no profile in the directory: %s (spool %r)"
              % (pid, sorted(by_pid), left))
        for f in by_pid[pid]:
            st = os.stat(f)
            check(st.st_uid == 0 and st.st_mode & 0o777 == 0o600,
                  "%s: uid %d mode %o" % (f, st.st_uid, st.st_mode & 0o777))
        got = shares(dump(by_pid[pid], stacks=True))[0] / 1e9
        check(0.9 * truth <= got <= 1.1 * truth + 0.02,
              "worker %d's profiles hold %.3f s, the kernel counted %.3f s" % (pid, got, truth))
        results.append("%d: %d profiles, %.2f/%.2f s" % (pid, len(by_pid[pid]), got, truth))
    check(len(by_pid) == 3, "profiles of %s, expected the parent and 2 workers" % sorted(by_pid))
    return "stderr clean; spool emptied; " + "; ".join(results)
