"""Go programs under the agent: cgo binaries (test/workloads/go, built by make).

A cgo binary's runtime creates its threads with pthread_create and sets its signal
handlers through libc's sigaction (x_cgo_sigaction), so our interposition applies and
our SIGPROF handler runs on Go's threads. Go requires every handler to run on its
signal stack (SA_ONSTACK): goroutine stacks are small, and a Go handler our handler
calls checks where it runs. Before our handler had SA_ONSTACK, go-spin failed 5 runs of
5 (SIGSEGV, "unexpected fault address", "unexpected return pc for runtime.sigpanic")
and go-pprof with "non-Go code set up signal handler without SA_ONSTACK flag".

A Go program ends with the exit_group system call, not libc's exit: no atexit handler
or destructor of ours runs and the last period's profile is never written. The
workloads linger two upload periods after printing their CPU so that the periodic
profiles cover all their work; see the workloads' comments.
"""
import os
import re
import signal
import subprocess
import tempfile
import time

import itest
from itest import (WORKLOADS, TestFailure, app_total, check, dump, profile_files,
                   run_profiled, value_index)

SPIN = os.path.join(WORKLOADS, "go-spin")
PPROF = os.path.join(WORKLOADS, "go-pprof")
PERIOD = 0.5  # DD_PROFILING_UPLOAD_PERIOD of these tests
LINGER = 2 * PERIOD


def need(path):
    check(os.path.exists(path), "%s missing: run make (it needs go, package golang-go)" % path)


def first_lines(stderr, n=6):
    """A crash's first lines say what it was (Go's fatal error, its signal); the
    goroutine dump after them is long."""
    return "\n".join(stderr.splitlines()[:n]) or "(no stderr)"


def no_agent_messages(stderr):
    lines = [l for l in stderr.splitlines() if l.startswith("libddprof:")]
    check(not lines, "the agent complained: %s" % lines)


def function_ns(profs, ti, name):
    return sum(p["functions"].get(name, {"self": [0, 0]})["self"][ti] for p in profs)


def test_cgo_go_program_with_many_goroutines_runs_and_is_profiled(ctx):
    """64 spinning goroutines and an allocating one (GC, SIGURG preemption) at 1000 Hz
    with 0.5 s periods: every run of 5 exits 0, and the profiles hold its CPU."""
    need(SPIN)
    runs, secs = 5, 2.0
    results = []
    for i in range(runs):
        out = os.path.join(ctx.dir, "out%d" % i)
        rc, stdout, stderr, cpu, wall = run_profiled(
            [SPIN, str(secs), str(LINGER)],
            {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
             "DD_PROFILING_UPLOAD_PERIOD": str(PERIOD)}, timeout=60)
        results.append((out, rc, stdout, stderr, cpu, wall))
    crashed = [(i + 1, r[1], first_lines(r[3], 2)) for i, r in enumerate(results) if r[1] != 0]
    check(not crashed, "go-spin failed in %d runs of %d: %s" % (
        len(crashed), runs, "; ".join("run %d exit %d: %s" % c for c in crashed)))
    ratios, figures = [], []
    for i, (out, rc, stdout, stderr, cpu, wall) in enumerate(results):
        check(stdout.startswith("ok ") and cpu is not None,
              "run %d: go-spin printed %r" % (i + 1, stdout))
        no_agent_messages(stderr)
        gcs = int(re.search(r"gcs (\d+)", stdout).group(1))
        check(gcs >= 1, "run %d: no garbage collection ran: %s" % (i + 1, stdout))
        files = profile_files(out)
        check(len(files) >= 2, "run %d: %d profiles in %.1f s at %.1f s periods"
              % (i + 1, len(files), wall, PERIOD))
        profs = dump(files)
        ti = value_index(profs[0], "cpu-time")
        total = app_total(profs, ti)
        ratio = total / 1e9 / cpu
        check(abs(ratio - 1) <= 0.10,
              "run %d: profile cpu-time %.3f s vs the %.3f s of CPU go-spin printed: ratio "
              "%.3f, expected within 10%%" % (i + 1, total / 1e9, cpu, ratio))
        # Go's frames are named from its ELF symbol table. The spinning loop's samples
        # also land on runtime.asyncPreempt (the entry of the preemption that Go's
        # SIGURG handler injects: Go's own profiler shows the same), so the two together.
        main_spin = function_ns(profs, ti, "main.spin")
        spin = main_spin + function_ns(profs, ti, "runtime.asyncPreempt.abi0")
        check(main_spin > 0 and spin >= 0.8 * total,
              "run %d: main.spin (+ asyncPreempt) has %.1f%% of the cpu-time, expected >= "
              "80%%: %s" % (i + 1, 100.0 * spin / max(total, 1),
                            sorted(profs[0]["functions"])[:20]))
        # Every stack rooted: Go code has no CFI in .eh_frame and its frames are walked
        # by frame pointers up to runtime.goexit, which the table marks as a root
        # (95% ended [incomplete] before). The first samples, before the table is
        # built (at once for a Go program), may not be.
        share, others = rooted_share(files)
        check(share >= 0.99, "run %d: only %.2f%% of the cpu-time rooted (others: %s)"
              % (i + 1, 100.0 * share, others))
        ratios.append(ratio)
        figures.append("%.2f/%.2f rooted %.1f%%" % (total / 1e9, cpu, 100.0 * share))
    return "%d/%d runs exit 0; profile/printed CPU s %s; ratios %.3f..%.3f" % (
        runs, runs, " ".join(figures), min(ratios), max(ratios))


def rooted_share(files):
    """The share of the application's cpu-time in stacks that end in a root
    (tests_unwind.ROOTS: a goroutine's runtime.goexit, a thread's runtime.mstart), and
    the heaviest of the others."""
    from tests_programs import incomplete_leaves, shares
    profs = dump(files, stacks=True)
    total, rooted, _incomplete = shares(profs)
    return rooted / max(total, 1), incomplete_leaves(profs)


def go_samples(stdout, what):
    m = re.search(r"^ok samples (\d+) cpu_ns (\d+) burn_seconds ([0-9.]+)", stdout, re.M)
    check(m is not None, "go-pprof %s printed %r" % (what, stdout))
    return int(m.group(1)), float(m.group(3))


def test_go_own_cpu_profiler_still_works_under_the_agent(ctx):
    """runtime/pprof's SIGPROF (Go's per-thread timers, handed to Go's handler by ours)
    under the agent sampling at 1000 Hz: as many samples in Go's profile as without the
    agent, and our profiles hold the same work."""
    need(PPROF)
    secs = 2.0
    alone_prof = os.path.join(ctx.dir, "alone.prof")
    rc, stdout, stderr, _cpu, _wall = run_profiled([PPROF, str(secs), alone_prof], {},
                                                   timeout=60, preload=False)
    check(rc == 0, "go-pprof alone exit %d: %s" % (rc, first_lines(stderr)))
    alone, alone_burn = go_samples(stdout, "alone")
    check(alone >= 0.5 * 100 * alone_burn,
          "Go's profile alone holds %d samples for %.2f s of CPU at 100 Hz" % (alone, alone_burn))

    under_prof = os.path.join(ctx.dir, "under.prof")
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, cpu, wall = run_profiled(
        [PPROF, str(secs), under_prof, str(LINGER)],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
         "DD_PROFILING_UPLOAD_PERIOD": str(PERIOD)}, timeout=60)
    check(rc == 0, "go-pprof under the agent exit %d: %s" % (rc, first_lines(stderr)))
    no_agent_messages(stderr)
    under, under_burn = go_samples(stdout, "under the agent")
    ratio = under / alone
    check(abs(ratio - 1) <= 0.25,
          "Go's own profile holds %d samples under the agent, %d alone: ratio %.3f, expected "
          "within 25%%" % (under, alone, ratio))

    # A real consumer reads Go's profile made under the agent.
    env = dict(os.environ)
    env.setdefault("HOME", tempfile.gettempdir())
    env["PPROF_TMPDIR"] = tempfile.gettempdir()
    r = subprocess.run(["go", "tool", "pprof", "-top", under_prof], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120, env=env)
    top = r.stdout.decode()
    check(r.returncode == 0 and "main.burn" in top,
          "go tool pprof -top of Go's own profile: %s%s" % (top, r.stderr.decode()))

    # Ours sampled the same work meanwhile.
    files = profile_files(out)
    check(len(files) >= 1, "no profile of ours in %s" % out)
    profs = dump(files)
    ti = value_index(profs[0], "cpu-time")
    total = app_total(profs, ti)
    ours = total / 1e9 / cpu
    check(abs(ours - 1) <= 0.10,
          "our profiles' cpu-time %.3f s vs the %.3f s of CPU go-pprof printed: ratio %.3f, "
          "expected within 10%%" % (total / 1e9, cpu, ours))
    burn = function_ns(profs, ti, "main.burn")
    check(burn >= 0.5 * total, "main.burn has %.1f%% of our cpu-time"
          % (100.0 * burn / max(total, 1)))
    return ("Go's samples alone %d (%.2f s CPU), under the agent %d (%.2f s): ratio %.3f; "
            "ours %.2f s of %.2f s printed (%.3f)" % (alone, alone_burn, under, under_burn,
                                                    ratio, total / 1e9, cpu, ours))


def test_go_program_killed_by_sigterm_dies_of_sigterm(ctx):
    """SIGTERM to a Go program that does not catch it: Go's handler resets the action to
    SIG_DFL with its usual flags (SA_SIGINFO | SA_ONSTACK | SA_RESTART, handler 0) and
    raises the signal again. The kernel takes a 0 handler as SIG_DFL whatever the flags:
    the process dies of SIGTERM (status 143 in a shell; what an orchestrator expects)."""
    need(SPIN)
    statuses = {}
    for name, preload, env in (("alone", False, {}),
                               ("agent", True, {"DD_PROFILING_OUTPUT_DIR":
                                                os.path.join(ctx.dir, "out")}),
                               ("agent disabled", True, {"DD_PROFILING_ENABLED": "false"})):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("DD_"):
                del e[k]
        if preload:
            e["LD_PRELOAD"] = itest.LIB
        e["XDG_CACHE_HOME"] = ctx.dir
        e.update(env)
        p = subprocess.Popen([SPIN, "30"], env=e, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        time.sleep(0.5)  # the runtime has installed its handlers long before
        p.send_signal(signal.SIGTERM)
        try:
            _out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise TestFailure("go-spin (%s) did not die of SIGTERM within 30 s" % name)
        statuses[name] = (p.returncode, first_lines(err.decode(errors="replace"), 2))
    bad = {k: v for k, v in statuses.items() if v[0] != -signal.SIGTERM}
    check(not bad, "go-spin's status after SIGTERM, expected -%d (killed by SIGTERM): %s"
          % (signal.SIGTERM, statuses))
    return "killed by SIGTERM alone, under the agent, and with the agent disabled"
