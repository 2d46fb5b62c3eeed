"""Do no harm: programs that behave one way alone must behave the same under the agent.

Each test runs a program that does something an injected profiler could break (a
seccomp sandbox, its own SIGPROF, a signal reset, a pthread_create wrapper, a user
namespace...) alone and under the agent, and compares. Workloads: build/workloads/harm
(modes listed in test/workloads/harm.c) and wrap_create.
"""
import os
import re
import shutil
import signal
import statistics
import subprocess
import threading
import time

from itest import (LIB, ROOT, WORKLOADS, Gunicorn, app_total, check, dump, files_by_pid,
                   profile_files, run_profiled, value_index)

HARM = os.path.join(WORKLOADS, "harm")


def harm(ctx, args, env=None, preload=True, timeout=60):
    """harm ARGS under the agent (1 kHz, profiles to ctx.dir/out every 0.5 s) or alone:
    (rc, stdout, stderr, out dir)."""
    out = os.path.join(ctx.dir, "out")
    e = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
         "DD_PROFILING_UPLOAD_PERIOD": "0.5"}
    e.update(env or {})
    rc, stdout, stderr, _cpu, _wall = run_profiled([HARM] + [str(a) for a in args], e,
                                                   timeout=timeout, preload=preload)
    return rc, stdout, stderr, out


def test_seccomp_strict_program_finishes(ctx):
    """A single-threaded program that computes (and polls once, which may start the
    profiler's thread), enters seccomp strict mode, computes and ends with the exit
    system call: alone and under the agent it writes its line and exits 0. Under the
    old redirect it was killed (SIGKILL) at its first sample in strict mode; a thread
    of ours left running would keep it alive forever after its exit."""
    for preload in (False, True):
        t0 = time.monotonic()
        rc, stdout, stderr, _out = harm(ctx, ["strict", 1.0], preload=preload, timeout=20)
        wall = time.monotonic() - t0
        check(rc == 0 and "strict ok" in stdout,
              "%s: exit %d, %r %r" % ("agent" if preload else "alone", rc, stdout,
                                      stderr[-300:]))
        check(wall < 5, "the strict program took %.1f s" % wall)
    return "exit 0 alone and under the agent (%.2f s)" % wall


def test_seccomp_allowlist_fork_children_all_exit_0(ctx):
    """20 fork children each install an allow-list seccomp filter (read, write, brk,
    mmap, munmap, futex, clock_gettime, rt_sigprocmask, rt_sigreturn, getpid, close,
    exit; anything else kills the process) and compute 0.1 s at 1 kHz sampling: all 20
    exit 0 (the handler's gettid, process_vm_readv and a thread start from a sampled
    child used to kill them), and the parent's profile is there."""
    rc, stdout, stderr, out = harm(ctx, ["allowlist", 20, 0.1])
    m = re.search(r"children (\d+) ok (\d+) signaled (\d+) \(([0-9,]*)\)", stdout)
    check(rc == 0 and m, "exit %d: %r %r" % (rc, stdout, stderr[-300:]))
    n, ok, sig = int(m.group(1)), int(m.group(2)), int(m.group(3))
    check(ok == 20 and sig == 0, "%d of %d children exited 0, %d died of signals %s"
          % (ok, n, sig, m.group(4)))
    check(profile_files(out), "no profile written by the parent")
    return "20/20 children exit 0"


def test_sigdfl_child_is_not_killed_by_our_timer(ctx):
    """A fork child that resets every signal to SIG_DFL, as a daemon does before exec,
    then computes 0.3 s at 1 kHz sampling, exits 0: the reset is virtual for the
    sampling signal (it used to die of SIGPROF, 'Profiling timer expired')."""
    rc, stdout, stderr, _out = harm(ctx, ["sigdfl", 0.3])
    m = re.search(r"child exit (-?\d+) signal (\d+)", stdout)
    check(rc == 0 and m, "exit %d: %r %r" % (rc, stdout, stderr[-300:]))
    check(m.group(1) == "0" and m.group(2) == "0",
          "the child exited %s, signal %s" % (m.group(1), m.group(2)))
    return "child exit 0"


def test_application_sigprof_gets_its_own_signals_and_we_keep_profiling(ctx):
    """A program with its own SIGPROF handler and setitimer(ITIMER_PROF) at 200 Hz,
    computing 1.5 s: its handler gets as many signals as alone (medians of 3 runs
    within 10%), reads back its own handler, and our profile still holds the process's
    CPU within 5% (ours flooded its handler, 3.5 times its count, and stopped)."""
    counts = {False: [], True: []}
    accuracy = []
    for _ in range(3):
        for preload in (False, True):
            shutil.rmtree(os.path.join(ctx.dir, "out"), ignore_errors=True)
            rc, stdout, stderr, out = harm(ctx, ["sigprof", 200, 1.5], preload=preload)
            m = re.search(r"sigprof (\d+) handler_seen (\d)", stdout)
            check(rc == 0 and m, "exit %d: %r %r" % (rc, stdout, stderr[-300:]))
            check(m.group(2) == "1", "sigaction did not read back the program's handler")
            counts[preload].append(int(m.group(1)))
            if preload:
                files = profile_files(out)
                check(files, "no profile under the agent: %r" % stderr[-300:])
                profs = dump(files)
                ti = value_index(profs[0], "cpu-time")
                got = sum(p["totals"][ti] for p in profs) / 1e9
                used = float(re.search(r"cpu_seconds ([0-9.]+)", stdout).group(1))
                accuracy.append(got / used)
    alone, agent = statistics.median(counts[False]), statistics.median(counts[True])
    check(abs(agent / alone - 1) <= 0.10, "its handler got %s signals under the agent, %s "
          "alone" % (counts[True], counts[False]))
    for a in accuracy:
        check(abs(a - 1) <= 0.05, "profiles hold %.3f of the process's CPU" % a)
    return "signals alone %s, under the agent %s; profile/CPU %s" % (
        counts[False], counts[True], " ".join("%.3f" % a for a in accuracy))


def test_raw_rt_sigaction_takeover_stops_sampling(ctx):
    """A program that installs its own SIGPROF handler with the rt_sigaction system call
    (bypassing libc, as the Go runtime does) gets our timer signals only until the next
    upload period (0.5 s) notices: none in the last second of its run, it exits 0, and
    one warning says why profiling stopped."""
    rc, stdout, stderr, _out = harm(ctx, ["rawsig", 4.0])
    m = re.search(r"rawsig early (\d+) late (\d+)", stdout)
    check(rc == 0 and m, "exit %d: %r %r" % (rc, stdout, stderr[-300:]))
    check(int(m.group(2)) == 0, "%s of our timer signals reached its handler in the last "
          "second (%s in the second before)" % (m.group(2), m.group(1)))
    warnings = [l for l in stderr.splitlines() if "replaced the handler" in l]
    check(len(warnings) == 1, "expected one warning, got: %r" % stderr[-500:])
    return "timer signals in its handler: %s, then %s" % (m.group(1), m.group(2))


def test_pthread_create_wrapper_holding_its_lock_finishes(ctx):
    """A program whose library wraps pthread_create under its own mutex computes for
    1 s holding that mutex and polling between batches (where the profiler starts its
    thread): it finishes, its wrapper still made its two threads, and its profile is
    there. The profiler's thread comes from libc's pthread_create, never the wrapper
    (the old redirect called the wrapper on the interrupted thread and hung it for
    good, every signal blocked)."""
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, _cpu, wall = run_profiled(
        [os.path.join(WORKLOADS, "wrap_create"), "1"],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
         "DD_PROFILING_UPLOAD_PERIOD": "0.5"}, timeout=20)
    check(rc == 0 and "wrapped 2" in stdout, "exit %d: %r %r" % (rc, stdout, stderr[-300:]))
    profs = dump(profile_files(out))
    check(len(profs) >= 2, "%d profiles in %.1f s with a 0.5 s period" % (len(profs), wall))
    return "finished in %.1f s, %d profiles" % (wall, len(profs))


def test_unshare_newuser_after_computing(ctx):
    """A single-threaded program that computes and then calls unshare(CLONE_NEWUSER)
    succeeds as it does alone (the kernel refuses it to a multi-threaded process: the
    profiler must not have made it one), also when it polled while computing, which
    starts the profiler's thread: that thread stops for the call and starts again."""
    results = []
    for polls in ("0", "1"):
        for preload in (False, True):
            rc, stdout, stderr, _out = harm(ctx, ["unshare", 0.5, polls], preload=preload)
            m = re.search(r"unshare rc (-?\d+) errno (\d+) threads (\d+)", stdout)
            check(rc == 0 and m, "exit %d: %r %r" % (rc, stdout, stderr[-300:]))
            results.append((int(m.group(1)), int(m.group(2))))
        check(results[-1] == results[-2], "polls %s: unshare alone %s, under the agent %s"
              % (polls, results[-2], results[-1]))
    return "unshare rc/errno alone/agent: computing %s %s, polling %s %s" % tuple(results)


def test_libseccomp_probes_change_nothing(ctx):
    """libseccomp's probes (strict mode with a flag set, a TSYNC filter without a
    program: both refused by the kernel) install nothing: the profiler keeps its thread
    and uploads every period (they used to stop it for good)."""
    rc, stdout, stderr, out = harm(ctx, ["probe", 2.0])
    m = re.search(r"probe (\d+) (\d+) threads (\d+)", stdout)
    check(rc == 0 and m, "exit %d: %r %r" % (rc, stdout, stderr[-300:]))
    check(m.group(1) == "22" and m.group(2) == "14", "probe errnos %s %s, expected EINVAL "
          "and EFAULT" % (m.group(1), m.group(2)))
    check(m.group(3) == "2", "%s threads after the probes: the profiler's stopped"
          % m.group(3))
    n = len(profile_files(out))
    check(n >= 4, "%d profiles in 2.3 s with a 0.5 s period" % n)
    return "threads %s after the probes, %d profiles" % (m.group(3), n)


GUNICORN_PRELOAD_APP = '''
def burn(n):
    x = 0
    for i in range(n):
        x += i * i
    return x
def application(environ, start_response):
    burn(20000)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "3")])
    return [b"ok\\n"]
'''


def test_gunicorn_preload_sync_workers_upload_every_period(ctx):
    """gunicorn --preload with 2 sync workers (forked from a single-threaded master that
    loaded the application; no dlopen after the fork): under 8 s of requests with a 1 s
    period, each worker uploads at least 4 profiles while it lives (it starts its
    thread at its first accept or select after a sample)."""
    out = os.path.join(ctx.dir, "out")
    served = 0
    errors = []
    with Gunicorn(ctx, GUNICORN_PRELOAD_APP, ["--preload", "-w", "2", "-k", "sync"],
                  {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_UPLOAD_PERIOD": "1"}) as g:
        workers = g.workers(2)
        stop = time.monotonic() + 8
        lock = threading.Lock()

        def client():
            nonlocal served
            while time.monotonic() < stop:
                try:
                    g.get(10)
                    with lock:
                        served += 1
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    with lock:
                        errors.append(repr(e))

        clients = [threading.Thread(target=client) for _ in range(3)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        # Profiles written while the workers live: before the master stops them.
        by_pid = {}
        for f in profile_files(out):
            by_pid.setdefault(int(os.path.basename(f).split("_")[1]), []).append(f)
        g.stop()
    check(not errors, "%d requests failed: %s" % (len(errors), errors[:3]))
    check(len(workers) == 2, "workers: %s" % workers)
    counts = {w: len(by_pid.get(w, [])) for w in workers}
    for w, n in counts.items():
        check(n >= 4, "worker %d uploaded %d profiles in 8 s with a 1 s period (all: %s)"
              % (w, n, counts))
    return "%d requests; profiles per worker while live: %s" % (served, counts)


def test_fork_child_joining_an_ended_thread_is_not_joined_to_ours(ctx):
    """A process has a joinable thread that ended and was not joined; it forks, and the
    child dlopens a library (which starts a profiler thread there) and then joins that
    thread, as a library destructor joining its own thread does. glibc hands the parent's
    ended threads' stacks to the child's stack cache; a profiler thread created from that
    cache took the ended thread's very pthread_t, and the join waited for the profiler
    thread forever (a hang seen in CI). The join must return 0 at once, as it does
    without the agent, while the child does have our thread."""
    for preload in (False, True):
        rc, stdout, stderr, _out = harm(ctx, ["stalejoin", 0.3], preload=preload, timeout=30)
        m = re.search(r"stalejoin rc (\d+) ms ([0-9.]+) threads (\d+) dlopen ok", stdout)
        who = "agent" if preload else "alone"
        check(rc == 0 and m, "%s: exit %d: %r %r" % (who, rc, stdout, stderr[-300:]))
        check(m.group(1) == "0" and float(m.group(2)) < 100,
              "%s: the child's join of the ended thread returned %s after %s ms"
              % (who, m.group(1), m.group(2)))
        threads = int(m.group(3))
        check(threads == (2 if preload else 1), "%s: %d threads in the child after its dlopen"
              % (who, threads))
    return "join 0 in %s ms with the profiler's thread in the child" % m.group(2)


def test_children_without_fork_handlers_exit_at_once(ctx):
    """A process whose profiler thread is in the middle of an upload (the intake answers
    after 30 s) makes a child with _Fork() and one with the clone system call: neither
    runs our fork handlers, and each calls exit(0). They exit at once (under 0.5 s) and
    with status 0, instead of waiting the exit-flush timeout (2 s) for a thread that
    only their parent has."""
    from tests_upload import Intake
    with Intake(ctx, "slow", "--delay", "30") as intake:
        rc, stdout, stderr, _out = harm(ctx, ["rawfork", 1.2], {
            "DD_TRACE_AGENT_URL": intake.url, "DD_PROFILING_UPLOAD_PERIOD": "0.5",
            "DD_PROFILING_EXIT_FLUSH_TIMEOUT": "2"})
    m = re.search(r"rawfork fork_ms ([0-9.]+) clone_ms ([0-9.]+) status (\d+) (\d+)", stdout)
    check(rc == 0 and m, "exit %d: %r %r" % (rc, stdout, stderr[-300:]))
    fork_ms, clone_ms = float(m.group(1)), float(m.group(2))
    check(m.group(3) == "0" and m.group(4) == "0", "children's status %s %s"
          % (m.group(3), m.group(4)))
    check(fork_ms < 500 and clone_ms < 500, "the _Fork child took %.1f ms, the clone child "
          "%.1f ms" % (fork_ms, clone_ms))
    return "_Fork child %.1f ms, clone child %.1f ms" % (fork_ms, clone_ms)


def test_secure_execution_keeps_the_agent_off(ctx):
    """A setgid program (secure execution: the kernel sets AT_SECURE, and secure_getenv
    hides every variable, DD_PROFILING_ENABLED included) runs without the agent: linked
    against libddprof.so (LD_PRELOAD paths are ignored in secure execution), its copy
    made setgid to another group reports ddprof_status() -ENOTCONN, has one thread,
    writes no profile and prints nothing, even at debug level; the same program without
    the setgid bit runs the agent (status 0, a profile)."""
    if os.geteuid() != 0:
        return "skipped: needs root to make a setgid copy"
    prog = os.path.join(ctx.dir, "harm_linked")
    subprocess.run(["cc", "-O2", "-o", prog, os.path.join(ROOT, "test", "workloads", "harm.c"),
                    LIB, "-pthread"], check=True)
    results = {}
    for setgid in (False, True):
        os.chmod(prog, 0o755)
        if setgid:
            os.chown(prog, 0, 65534)
            os.chmod(prog, 0o2755)
        out = os.path.join(ctx.dir, "out-%d" % setgid)
        rc, stdout, stderr, _cpu, _wall = run_profiled(
            [prog, "status"], {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
                               "DD_PROFILING_LOG_LEVEL": "debug"}, preload=False)
        m = re.search(r"status (-?\d+) threads (\d+)", stdout)
        check(rc == 0 and m, "setgid %s: exit %d: %r %r" % (setgid, rc, stdout, stderr[-300:]))
        results[setgid] = (int(m.group(1)), len(profile_files(out)), stderr)
    status, files, stderr = results[True]
    check(status == -107 and files == 0 and stderr == "",
          "setgid copy: status %d (expected -ENOTCONN), %d profiles, stderr %r"
          % (status, files, stderr[-300:]))
    check(results[False][0] == 0 and results[False][1] >= 1,
          "the plain copy: status %d, %d profiles" % results[False][:2])
    return "setgid: status %d, no profile, silent; plain: status 0, %d profiles" % (
        status, results[False][1])


def test_children_ending_with_exit_keep_their_status_and_are_profiled(ctx):
    """A vfork child that calls _exit(3) at once, a fork child that computes 0.3 s and
    calls _exit(5) from its SIGUSR1 handler, a fork child that computes 0.3 s and calls
    _exit(7): the same wait statuses alone and under the agent; under the agent the
    third child has a profile holding its CPU (its final profile, made by _exit), the
    handler's child ends without waiting for one (no profile work inside an application's
    signal handler: within 1 s of its creation), and the vfork child writes nothing."""
    seen = {}
    for preload in (False, True):
        rc, stdout, stderr, out = harm(ctx, ["endings", 0.3], preload=preload, timeout=30)
        m = re.search(r"endings status (-?\d+) (-?\d+) (-?\d+) pids (\d+) (\d+) (\d+) "
                      r"ms ([0-9.]+) ([0-9.]+) ([0-9.]+)", stdout)
        who = "agent" if preload else "alone"
        check(rc == 0 and m, "%s: exit %d: %r %r" % (who, rc, stdout, stderr[-300:]))
        seen[who] = m
    statuses = {w: [int(seen[w].group(i)) for i in (1, 2, 3)] for w in seen}
    check(statuses["alone"] == statuses["agent"] == [3 << 8, 5 << 8, 7 << 8],
          "wait statuses: %s" % statuses)
    m = seen["agent"]
    pids = [int(m.group(i)) for i in (4, 5, 6)]
    handler_ms = float(m.group(8))
    check(handler_ms < 1000, "the child ending in its handler took %.0f ms" % handler_ms)
    by_pid = files_by_pid(out)
    check(pids[0] not in by_pid, "the vfork child wrote a profile")
    check(pids[2] in by_pid, "the child that called _exit has no profile (profiles of %s)"
          % sorted(by_pid))
    profs = dump(by_pid[pids[2]])
    cpu = app_total(profs, value_index(profs[0], "cpu-time")) / 1e9
    check(0.25 <= cpu <= 0.4, "its profile holds %.3f s of its 0.3 s" % cpu)
    return "statuses %s; _exit child's profile %.3f s; handler child %.0f ms" % (
        statuses["agent"], cpu, handler_ms)


def test_children_killed_by_sigterm_die_of_it_and_are_profiled(ctx):
    """A child that reads SIGTERM's action, computes 0.3 s and raises SIGTERM; one that
    ignores SIGHUP and raises it; one that sets a SIGTERM handler and SIG_DFL back,
    computes 0.3 s and raises SIGTERM. Alone, under the agent's defaults and with
    DD_PROFILING_FLUSH_ON_SIGNAL=1: the same wait statuses (killed by SIGTERM, exit 0,
    killed by SIGTERM) and SIG_DFL read back. By default the kernel keeps SIGTERM's
    default action (not caught); with the variable it holds the agent's dispatcher
    (caught) and the killed children's profiles hold their CPU."""
    seen = {}
    for who, preload, env in (("alone", False, {}), ("defaults", True, {}),
                              ("flush", True, {"DD_PROFILING_FLUSH_ON_SIGNAL": "1"})):
        shutil.rmtree(os.path.join(ctx.dir, "out"), ignore_errors=True)
        rc, stdout, stderr, out = harm(ctx, ["deaths", 0.3], env=env, preload=preload,
                                       timeout=30)
        m = re.search(r"deaths status (-?\d+) (-?\d+) (-?\d+) pids (\d+) (\d+) (\d+) "
                      r"dfl (-?\d+) caught (-?\d+)", stdout)
        check(rc == 0 and m, "%s: exit %d: %r %r" % (who, rc, stdout, stderr[-300:]))
        seen[who] = m
    statuses = {w: [int(seen[w].group(i)) for i in (1, 2, 3)] for w in seen}
    check(all(s == [signal.SIGTERM, 0, signal.SIGTERM] for s in statuses.values()),
          "wait statuses: %s" % statuses)
    dfl = {w: seen[w].group(7) for w in seen}
    check(set(dfl.values()) == {"1"}, "SIG_DFL read back: %s" % dfl)
    caught = {w: seen[w].group(8) for w in seen}
    check(caught == {"alone": "0", "defaults": "0", "flush": "1"}, "caught: %s" % caught)
    m = seen["flush"]
    by_pid = files_by_pid(out)
    cpus = []
    for pid in (int(m.group(4)), int(m.group(6))):
        check(pid in by_pid, "killed child %d has no profile (profiles of %s)"
              % (pid, sorted(by_pid)))
        profs = dump(by_pid[pid])
        cpu = app_total(profs, value_index(profs[0], "cpu-time")) / 1e9
        check(0.25 <= cpu <= 0.4, "child %d's profile holds %.3f s of its 0.3 s" % (pid, cpu))
        cpus.append(cpu)
    return "statuses %s; caught %s; the killed children's profiles %.3f s, %.3f s" % (
        statuses["flush"], caught, cpus[0], cpus[1])


# Computes 0.4 s, tries to exec a program that does not exist (the process goes on),
# computes 0.2 s more, then execs itself, which computes 0.3 s and exits; each step
# prints the process's CPU so far (it carries across exec).
PY_EXEC = """
import os, sys, time
def burn(s):
    end = time.process_time() + s
    while time.process_time() < end:
        sum(i * i for i in range(1000))
if sys.argv[1:] == ["after"]:
    burn(0.3)
    print("after %d %.3f" % (os.getpid(), time.process_time()))
    sys.exit(0)
burn(0.4)
try:
    os.execv("/nonexistent/program", ["x"])
except OSError:
    pass
burn(0.2)
print("before %d %.3f" % (os.getpid(), time.process_time()), flush=True)
os.execv(sys.executable, [sys.executable, sys.argv[0], "after"])
"""


def test_the_part_before_exec_is_profiled(ctx):
    """A Python process computes, fails an exec (it goes on, profiled), computes, then
    execs itself, which computes and exits: the program before the exec has its profile
    (uploaded in the exec call), the one after its own, under the same pid and a name
    that does not replace the first; together they hold the process's CPU as the kernel
    counted it, within 10%, and the part before within 10% of its own count. Lost before
    the exec was interposed: everything before it (60 s periods)."""
    from itest import PYTHON
    script = os.path.join(ctx.dir, "exec.py")
    with open(script, "w") as f:
        f.write(PY_EXEC)
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, _cpu, _wall = run_profiled(
        [PYTHON, script], {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000"})
    m1 = re.search(r"before (\d+) ([\d.]+)", stdout)
    m2 = re.search(r"after (\d+) ([\d.]+)", stdout)
    check(rc == 0 and m1 and m2, "exit %d: %r %r" % (rc, stdout, stderr[-500:]))
    pid, before, total = int(m1.group(1)), float(m1.group(2)), float(m2.group(2))
    files = profile_files(out, pid)
    names = [os.path.basename(f) for f in files]
    # Before: libddprof_<pid>_<seq>.pprof, two (the failed exec uploaded too); after:
    # the exec'd program's, numbered from 0 again, hence libddprof_<pid>_000000_1.pprof.
    pre = [f for f in files if re.search(r"_\d+_\d{6}\.pprof$", f)]
    post = [f for f in files if f not in pre]
    check(len(pre) == 2 and len(post) == 1,
          "profiles of %d: %s (expected two before the exec, one after)" % (pid, names))

    def cpu_of(fs):
        return sum(p["totals"][value_index(p, "cpu-time")] for p in dump(fs)) / 1e9
    first, all_ = cpu_of(pre), cpu_of(files)
    check(abs(first / before - 1) <= 0.1,
          "the profiles before the exec hold %.3f s, the kernel counted %.3f s" % (first, before))
    check(abs(all_ / total - 1) <= 0.1,
          "the profiles hold %.3f s, the kernel counted %.3f s" % (all_, total))
    return "before the exec %.3f/%.3f s, in all %.3f/%.3f s (%s)" % (
        first, before, all_, total, ", ".join(names))
