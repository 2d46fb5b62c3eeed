"""Wall-clock profiling (DD_PROFILING_WALL_ENABLED): every thread's wall time charged to
the stack and state (running, or the call it waited in) where it was spent, against the
program's own clock; no blocking call of the program interrupted; the program's blocking
calls left alone when the profile is off. Workload: test/workloads/wall_threads.c, which
prints its own truth."""
import os
import re
import subprocess
import tempfile

from itest import (WORKLOADS, check, dump, files_by_pid, numbers, profile_files, run_profiled,
                   value_index)

WALL = os.path.join(WORKLOADS, "wall_threads")


def run_wall(ctx, name, args, env=None):
    out = os.path.join(ctx.dir, name)
    e = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_WALL_ENABLED": "true"}
    e.update(env or {})
    rc, stdout, stderr, _cpu, _wall = run_profiled([WALL] + args, e)
    check(rc == 0, "wall_threads %s: exit %d: %s" % (args, rc, stderr))
    check("warning" not in stderr, "unexpected warning: %s" % stderr)
    files = profile_files(out)
    check(files, "no profile written for wall_threads %s" % args)
    return stdout, dump(files, stacks=True), files


def wall_by(profs, key):
    """wall-time summed by key(sample) over every profile."""
    out = {}
    for p in profs:
        i = value_index(p, "wall-time")
        for s in p["stacks"]:
            v = s["values"][i]
            if v:
                k = key(s)
                out[k] = out.get(k, 0) + v
    return out


def go_total(path, index):
    env = dict(os.environ)
    env.setdefault("HOME", tempfile.gettempdir())
    env["PPROF_TMPDIR"] = tempfile.gettempdir()
    r = subprocess.run(["go", "tool", "pprof", "-raw", "-sample_index=" + index, path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, env=env)
    check(r.returncode == 0, "go tool pprof -raw failed on %s: %s" % (path, r.stderr.decode()))
    lines = r.stdout.decode().splitlines()
    header = lines.index("Samples:") + 1
    col = [c.split("/")[0].replace("[dflt]", "") for c in lines[header].split()].index(index)
    total = 0
    for line in lines[header + 1:lines.index("Locations")]:
        m = re.match(r"\s*([\d\s]+): \d+", line)
        if m:
            total += int(m.group(1).split()[col])
    return total


def test_wall_profile_charges_each_thread_its_wall_time_and_state(ctx):
    """Four threads for 3 s: one burning CPU, one sleeping in nanosleep, one blocked in
    read on a pipe, one in pthread_cond_wait. Each thread's wall-time within 5% of the
    lifetime the program measured, at least 95% of it in its expected state on a stack
    through its own function; go tool pprof reads the same total."""
    stdout, profs, files = run_wall(ctx, "states", ["states", "3"])
    lives = {m.group(1): (int(m.group(2)), int(m.group(3)))
             for m in re.finditer(r"^thread (\S+) (\d+) (\d+)$", stdout, re.M)}
    check(len(lives) == 4, "lifetimes: %r" % stdout)
    expect = {"burn_cpu": "running", "sleep_loop": "nanosleep", "read_pipe": "read",
              "wait_cond": "pthread_cond_wait"}
    per_tid = wall_by(profs, lambda s: s["labels"].get("thread id"))
    right = wall_by(profs, lambda s: (s["labels"].get("thread id"), s["labels"].get("state"),
                                      any(f in expect for f in s["frames"])))
    ratios = {}
    for fn, (tid, life) in lives.items():
        got = per_tid.get(tid, 0)
        ratios[fn] = got / life
        check(abs(ratios[fn] - 1) <= 0.05, "%s (tid %d): wall-time %d ns of %d ns lived = %.4f"
              % (fn, tid, got, life, ratios[fn]))
        good = right.get((tid, expect[fn], True), 0)
        check(good >= 0.95 * got, "%s: %.1f%% of its wall-time in state %s on its stack: %r"
              % (fn, 100.0 * good / max(got, 1), expect[fn],
                 {k: v for k, v in right.items() if k[0] == tid}))
    ours = sum(per_tid.values())
    theirs = sum(go_total(f, "wall-time") for f in files)
    check(abs(theirs - ours) <= 0.001 * ours, "go tool pprof total %d vs ours %d" % (theirs, ours))
    return "wall-time / lifetime: " + ", ".join("%s %.4f" % (k, v) for k, v in ratios.items())


def test_waits_across_upload_periods_are_charged_in_each_period(ctx):
    """The same four threads for 4 s, uploads every second: a thread blocked in one read
    (or one pthread_cond_wait, or the main thread's one 4 s clock_nanosleep) for the whole
    run is charged in every profile, up to the snapshot, not all at once when it
    returns: in each profile between the first and the last, every thread's wall-time
    within 5% of the profile's duration, in its state."""
    stdout, profs, _files = run_wall(ctx, "periods", ["states", "4"],
                                     {"DD_PROFILING_UPLOAD_PERIOD": "1"})
    lives = {m.group(1): int(m.group(2))
             for m in re.finditer(r"^thread (\S+) (\d+) (\d+)$", stdout, re.M)}
    check(len(lives) == 4, "lifetimes: %r" % stdout)
    check(len(profs) >= 4, "%d profiles for 4 s at 1 s periods" % len(profs))
    inner = profs[1:-1]
    worst = 0.0
    for p in inner:
        per = wall_by([p], lambda s: (s["labels"].get("thread id"), s["labels"].get("state")))
        dur = p["duration_nanos"]
        for fn, state in (("burn_cpu", "running"), ("sleep_loop", "nanosleep"),
                          ("read_pipe", "read"), ("wait_cond", "pthread_cond_wait")):
            got = per.get((lives[fn], state), 0)
            worst = max(worst, abs(got / dur - 1))
            check(abs(got / dur - 1) <= 0.05, "profile at %d: %s %s %d ns of %d ns"
                  % (p["time_nanos"], fn, state, got, dur))
    return "%d inner profiles: every thread within %.2f%% of the period" % (
        len(inner), 100 * worst)


def test_a_thousand_idle_threads_are_accounted_within_the_sample_budget(ctx):
    """1000 threads in pthread_cond_timedwait (woken every 100 ms) and one burning CPU,
    4 s, uploads every second: each inner profile holds 1000 threads' worth of
    pthread_cond_timedwait wall-time (within 5% of 1000 x its duration), while the wait
    samples the hooks took stay within the process's budget (4 threads' worth per 10 ms
    interval: 400 a second, plus a burst of 40), not the 10 000 a second the waits
    would ask for; the rest is carried in each thread's pending time and charged with
    its open wait at each snapshot."""
    stdout, profs, _files = run_wall(ctx, "idle", ["idle", "1000", "4"],
                                     {"DD_PROFILING_UPLOAD_PERIOD": "1"})
    t = numbers(stdout)
    inner = profs[1:-1]
    check(len(inner) >= 2, "%d profiles for 4 s at 1 s periods" % len(profs))
    ratios = []
    for p in inner:
        per = wall_by([p], lambda s: s["labels"].get("state"))
        r = per.get("pthread_cond_timedwait", 0) / (1000.0 * p["duration_nanos"])
        ratios.append(r)
        check(abs(r - 1) <= 0.05, "profile at %d: idle wall-time %.4f of 1000 threads' "
              "duration: %r" % (p["time_nanos"], r, per))
    budget = 400 * 4.1 + 40
    check(t.get("diag_wall_wait_samples", 0) <= budget, "%d wait samples, budget %d"
          % (t.get("diag_wall_wait_samples", 0), budget))
    return "idle wall-time / (1000 x duration) %s; %d wait samples in 4 s" % (
        ", ".join("%.4f" % r for r in ratios), t["diag_wall_wait_samples"])


def test_a_fork_child_thread_is_charged_at_the_child_s_snapshots(ctx):
    """A thread forks while four others wait; the child (its only thread) sleeps 2.5 s in
    one nanosleep, uploads every second, then starts four threads that sleep 50 ms:
    the child's profiles hold the sleep within 5% of what it measured, on
    child_sleep's stack, and the profiles the child wrote before the sleep ended
    already hold at least half of it (its thread is in the child's registry, charged
    at each snapshot, not only when the call returns); its workers' sleeps are there
    too (within 10%)."""
    out = os.path.join(ctx.dir, "fork")
    e = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_WALL_ENABLED": "true",
         "DD_PROFILING_UPLOAD_PERIOD": "1"}
    rc, stdout, stderr, _cpu, _wall = run_profiled([WALL, "fork"], e)
    check(rc == 0, "wall_threads fork: exit %d: %s" % (rc, stderr))
    check("warning" not in stderr, "unexpected warning: %s" % stderr)
    m = re.search(r"^child (\d+) (\d+) (\d+) (\d+)$", stdout, re.M)
    check(m, "no child line: %r" % stdout)
    pid, tid, slept, workers = (int(g) for g in m.groups())
    files = files_by_pid(out).get(pid, [])
    check(len(files) >= 2, "child %d wrote %d profiles" % (pid, len(files)))
    profs = sorted(dump(files, stacks=True), key=lambda p: p["time_nanos"])

    def sleep_of(ps):
        return wall_by(ps, lambda s: (s["labels"].get("thread id"), s["labels"].get("state"),
                                      "child_sleep" in s["frames"])).get((tid, "nanosleep", True), 0)

    total = sleep_of(profs)
    check(abs(total / slept - 1) <= 0.05, "child_sleep: %d ns in the child's profiles, %d ns "
          "slept" % (total, slept))
    early = sleep_of(profs[:-1])
    check(early >= slept / 2, "child_sleep: %d ns of %d in the %d profiles before the last"
          % (early, slept, len(profs) - 1))
    got_workers = wall_by(profs, lambda s: (s["labels"].get("state"),
                                            "child_worker" in s["frames"])).get(("nanosleep", True), 0)
    check(abs(got_workers / workers - 1) <= 0.10, "child_worker: %d ns in the profiles, %d ns "
          "slept" % (got_workers, workers))
    return "child %d: child_sleep %.4f of the time slept, %.2f of it before the last profile; " \
        "workers %.4f" % (pid, total / slept, early / slept, got_workers / workers)


def test_a_wait_left_by_siglongjmp_does_not_silence_its_thread(ctx):
    """A thread blocked in read is interrupted by a signal whose handler siglongjmps out
    of the read (its hook never ends its wait), then sleeps 1 s in nanosleep: those
    waits are in the profile, within 5% of what the program measured, on after_jump's
    stack (the next hook finds the abandoned one and restarts the thread's account)."""
    stdout, profs, _files = run_wall(ctx, "longjmp", ["longjmp"],
                                     {"DD_PROFILING_WALL_INTERVAL": "0.001"})
    m = re.search(r"^thread after_jump (\d+) (\d+)$", stdout, re.M)
    check(m, "no after_jump line: %r" % stdout)
    tid, slept = int(m.group(1)), int(m.group(2))
    got = wall_by(profs, lambda s: (s["labels"].get("thread id"), s["labels"].get("state"),
                                    "after_jump" in s["frames"])).get((tid, "nanosleep", True), 0)
    check(abs(got / slept - 1) <= 0.05, "after the jump: %d ns of nanosleep on after_jump's "
          "stack, %d ns slept" % (got, slept))
    return "nanosleep after the jump: %.4f of the time slept" % (got / slept)


def test_a_signal_handler_that_blocks_inside_a_wait_is_not_counted_twice(ctx):
    """A thread blocked 1 s in read gets a signal whose handler sleeps 100 ms in
    nanosleep (SA_RESTART: the read goes on): the thread's wall-time is its lifetime
    within 5%, all of it in read (the handler's nanosleep, inside the read's wait, goes
    untimed rather than counted twice)."""
    stdout, profs, _files = run_wall(ctx, "nested", ["nested"])
    m = re.search(r"^thread read_pipe (\d+) (\d+)$", stdout, re.M)
    check(m, "no read_pipe line: %r" % stdout)
    tid, life = int(m.group(1)), int(m.group(2))
    per = wall_by(profs, lambda s: (s["labels"].get("thread id"), s["labels"].get("state")))
    total = sum(v for (t, _s), v in per.items() if t == tid)
    in_read = per.get((tid, "read"), 0)
    check(abs(total / life - 1) <= 0.05, "read_pipe: wall-time %d ns of %d ns lived: %r"
          % (total, life, {k: v for k, v in per.items() if k[0] == tid}))
    check(in_read >= 0.95 * total, "read_pipe: %d ns in read of %d: %r"
          % (in_read, total, {k: v for k, v in per.items() if k[0] == tid}))
    return "wall-time / lifetime %.4f, %.1f%% in read" % (total / life, 100.0 * in_read / total)


def test_wall_profiler_never_interrupts_a_blocking_call(ctx):
    """Threads looping on poll, epoll_wait, nanosleep, select and read (1-2 ms timeouts)
    for 3 s with the wall profile at 1 ms: zero EINTR in the program's own counters, and
    each call's wait in the profile under its state. The CPU profile runs at 1 Hz here:
    a CPU-clock timer (any signal-based CPU profiler's) whose tick lands in a system
    call's own kernel code interrupts it; the wall profile sends no signal at all."""
    stdout, profs, _files = run_wall(ctx, "eintr", ["eintr", "3"],
                                     {"DD_PROFILING_WALL_INTERVAL": "0.001",
                                      "DD_PROFILING_CPU_HZ": "1"})
    t = numbers(stdout)
    calls = ["poll", "epoll_wait", "nanosleep", "select", "read"]
    for c in calls:
        check(t.get("calls_" + c, 0) >= 100, "%s: only %d calls" % (c, t.get("calls_" + c, 0)))
        check(t.get("eintr_" + c) == 0, "%s: %d EINTR in %d calls"
              % (c, t.get("eintr_" + c), t["calls_" + c]))
    by_state = wall_by(profs, lambda s: s["labels"].get("state"))
    for c in calls:
        check(by_state.get(c, 0) >= 2.5e9, "%s: %d ns of wall-time in its state: %r"
              % (c, by_state.get(c, 0), by_state))
    check(t.get("diag_wall_wait_samples", 0) > 1000, "wall samples: %r" % t)
    return "0 EINTR in %s calls; wall samples %d" % (
        "/".join(str(t["calls_" + c]) for c in calls), t["diag_wall_wait_samples"])


def test_wall_profiling_off_leaves_blocking_calls_alone(ctx):
    """Off (the default): no wall hooks installed, no wall column, nothing counted."""
    out = os.path.join(ctx.dir, "off")
    rc, stdout, stderr, _c, _w = run_profiled([WALL, "eintr", "0.3"],
                                              {"DD_PROFILING_OUTPUT_DIR": out})
    t = numbers(stdout)
    check(rc == 0, "off: exit %d %r" % (rc, stderr))
    check(t.get("diag_wall_hooks_installed") == 0 and t.get("diag_wall_wait_samples") == 0 and
          t.get("diag_wall_running_samples") == 0, "off: wall diagnostics %r" % t)
    for p in dump(profile_files(out)):
        check([ty for ty, _u in p["sample_types"]] == ["cpu-samples", "cpu-time"],
              "off: sample types %r" % p["sample_types"])
    return "off: 0 hooks, CPU columns only"


GUNICORN_WALL_APP = '''
import os
def application(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(os.getpid()).encode()]
'''

WAIT_STATES = ("select", "accept", "accept4", "poll", "epoll_wait", "pselect", "ppoll")


def test_gunicorn_workers_show_their_waits_in_the_wall_profile(ctx):
    """gunicorn (sync workers, 2 of them) under the wall profile, 40 sparse requests over
    ~2 s, uploads every second: every worker that served has wall profiles under its
    own pid, most of its wall-time waiting in select or accept (an idle sync worker's
    loop), the call as leaf frame on a stack through the Python interpreter's eval loop;
    the master's wall-time is mostly its arbiter's sleep (select); all requests
    succeed."""
    from itest import Gunicorn
    out = os.path.join(ctx.dir, "out")
    env = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_WALL_ENABLED": "true",
           "DD_PROFILING_UPLOAD_PERIOD": "1"}
    with Gunicorn(ctx, GUNICORN_WALL_APP, ["-w", "2"], env) as g:
        bodies, errors = g.hammer(2, 20, pause=0.1)
        check(not errors, "%d of 40 requests failed: %s" % (len(errors), errors[:3]))
        rc, stderr = g.stop()
        master = g.master.pid
    check(rc == 0, "gunicorn master exit %d: %s" % (rc, stderr[-1000:]))
    check("libddprof" not in stderr, "agent messages: %s" % stderr[-1000:])
    by_pid = files_by_pid(out)
    workers = sorted({int(b) for b in bodies})
    lines = []
    for pid in [master] + workers:
        check(pid in by_pid, "no profile for %d (master %d): %r" % (pid, master, sorted(by_pid)))
        profs = dump(by_pid[pid], stacks=True)
        by_state = wall_by(profs, lambda s: s["labels"].get("state"))
        total = sum(by_state.values())
        waiting = sum(v for k, v in by_state.items() if k in WAIT_STATES)
        check(total > 0.5e9, "%d: only %d ns of wall-time: %r" % (pid, total, by_state))
        check(waiting >= 0.5 * total, "%d: %.0f%% of its wall-time in %s: %r"
              % (pid, 100.0 * waiting / total, "/".join(WAIT_STATES), by_state))
        py = wall_by(profs, lambda s: (s["labels"].get("state") in WAIT_STATES and
                                       s["frames"][0] in WAIT_STATES and
                                       "_PyEval_EvalFrameDefault" in s["frames"]))
        check(py.get(True, 0) >= 0.9 * waiting, "%d: waits not on Python stacks (the call "
              "as leaf, the interpreter's eval loop below): %r" % (pid, py))
        top = max((k for k in by_state if k in WAIT_STATES), key=lambda k: by_state[k])
        lines.append("%s %d: %.1f s wall, %.0f%% waiting (mostly %s)" % (
            "master" if pid == master else "worker", pid, total / 1e9,
            100.0 * waiting / total, top))
    return "; ".join(lines)
