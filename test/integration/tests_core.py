"""Core sampling tests: accuracy, periodic swaps, config, thread timers."""
import os
import re
import time

from itest import (PRELOAD, PYTHON, WORKLOADS, app_total, check, dump, go_pprof_top,
                   profile_files, profiler_ns, run_profiled, value_index)


def cpu_accuracy(ctx, hz):
    out = os.path.join(ctx.dir, "out")
    threads, secs = 4, 2.0
    rc, stdout, stderr, cpu, wall = run_profiled(
        [os.path.join(WORKLOADS, "cpu_split"), str(threads), str(secs)],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": str(hz)})
    check(rc == 0, "workload exit %d: %s" % (rc, stderr))
    check(cpu is not None and cpu > threads * secs * 0.95,
          "workload reported %s CPU seconds" % cpu)
    files = profile_files(out)
    check(len(files) >= 1, "no profile written in %s (stderr: %s)" % (out, stderr))
    for f in files:
        mode = os.stat(f).st_mode & 0o777
        check(mode == 0o600, "%s has mode %o, expected 600" % (f, mode))
    profs = dump(files)
    ti = value_index(profs[0], "cpu-time")
    total_ns = app_total(profs, ti)
    ratio = total_ns / 1e9 / cpu
    check(abs(ratio - 1) <= 0.05,
          "profile cpu-time %.3f s vs kernel CPU %.3f s: ratio %.3f, expected within 5%%"
          % (total_ns / 1e9, cpu, ratio))
    a = sum(p["functions"].get("hot_a", {"self": [0, 0]})["self"][ti] for p in profs)
    b = sum(p["functions"].get("hot_b", {"self": [0, 0]})["self"][ti] for p in profs)
    share_a, share_b = 100.0 * a / total_ns, 100.0 * b / total_ns
    check(abs(share_a - 75) <= 5 and abs(share_b - 25) <= 5,
          "split hot_a %.1f%% / hot_b %.1f%%, expected 75/25 within 5 points"
          % (share_a, share_b))
    burners = set()
    for p in profs:
        for tid, t in p["threads"].items():
            if t["name"].startswith("burner-"):
                burners.add(tid)
    check(len(burners) == threads, "%d distinct burner thread ids, expected %d: %s"
          % (len(burners), threads, sorted(burners)))
    for p in profs:
        check(p["period_type"] == ["cpu", "nanoseconds"], "period_type %s" % p["period_type"])
        check(p["period"] == 10**9 // hz, "period %s, expected %d" % (p["period"], 10**9 // hz))
        check(p["time_nanos"] > 0 and p["duration_nanos"] > 0, "time/duration not set")
    # The frame-pointer unwinder sees the caller: hot_a/hot_b are called by worker.
    with_caller = 0
    for p in dump(files, stacks=True):
        for st in p["stacks"]:
            fr = st["frames"]
            if len(fr) >= 2 and fr[0] in ("hot_a", "hot_b") and fr[1] == "worker":
                with_caller += st["values"][ti]
    check(with_caller >= 0.95 * (a + b),
          "only %.1f%% of hot_a/hot_b cpu-time has worker as caller, expected >= 95%%"
          % (100.0 * with_caller / max(a + b, 1)))
    for f in files:
        top = go_pprof_top(f)
        check("hot_a" in top, "go tool pprof -top of %s does not show hot_a:\n%s" % (f, top))
    return "hz=%d cpu=%.2fs profile=%.2fs ratio=%.3f split=%.1f/%.1f files=%d" % (
        hz, cpu, total_ns / 1e9, ratio, share_a, share_b, len(files))


def test_cpu_accuracy_99hz(ctx):
    return cpu_accuracy(ctx, 99)


def test_cpu_accuracy_1000hz(ctx):
    return cpu_accuracy(ctx, 1000)


def test_periodic_uploads_lose_nothing_across_swaps(ctx):
    """0.2 s periods over ~2 s of wall time: many swaps, the sum still matches."""
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, cpu, wall = run_profiled(
        [os.path.join(WORKLOADS, "cpu_split"), "4", "1.0"],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
         "DD_PROFILING_UPLOAD_PERIOD": "0.2"})
    check(rc == 0, "workload exit %d: %s" % (rc, stderr))
    files = profile_files(out)
    expected = int(wall / 0.2)
    check(len(files) >= expected - 2,
          "%d profiles for %.2f s at 0.2 s periods, expected about %d" % (len(files), wall, expected))
    seqs = [int(re.search(r"_(\d+)\.pprof$", f).group(1)) for f in files]
    check(seqs == list(range(len(files))), "sequence numbers not 0..n-1: %s" % seqs)
    profs = dump(files)
    ti = value_index(profs[0], "cpu-time")
    total = app_total(profs, ti) / 1e9
    check(abs(total / cpu - 1) <= 0.05, "cpu-time %.3f s vs kernel %.3f s" % (total, cpu))
    spans = sorted((p["time_nanos"], p["time_nanos"] + p["duration_nanos"]) for p in profs)
    for (s0, e0), (s1, _e1) in zip(spans, spans[1:]):
        check(s1 >= e0, "profiles overlap: one ends at %d, the next starts at %d" % (e0, s1))
    pids = {pid for p in profs for pid in p["process_ids"]}
    check(len(pids) == 1, "process_id labels %s, expected one pid" % pids)
    return "%d profiles, cpu=%.2fs profile=%.2fs" % (len(files), cpu, total)


def test_bad_config_warns_once_and_uses_default(ctx):
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, cpu, wall = run_profiled(
        [os.path.join(WORKLOADS, "cpu_split"), "1", "0.3"],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "lots"})
    check(rc == 0, "workload exit %d" % rc)
    lines = [l for l in stderr.splitlines() if "DD_PROFILING_CPU_HZ" in l]
    check(len(lines) == 1, "expected one warning naming DD_PROFILING_CPU_HZ, got: %r" % stderr)
    check("99" in lines[0], "warning does not name the default 99: %s" % lines[0])
    profs = dump(profile_files(out))
    check(profs and profs[0]["period"] == 10**9 // 99, "period is not the 99 Hz default")
    return lines[0]


def test_disabled_agent_writes_nothing(ctx):
    """Disabled: no output, and threads work, those an earlier constructor starts (which
    go through our trampoline before our constructor has decided) included."""
    out = os.path.join(ctx.dir, "out")
    early = os.path.join(WORKLOADS, "libearly_thread.so")
    rc, stdout, stderr, cpu, wall = run_profiled(
        [os.path.join(WORKLOADS, "cpu_split"), "1", "0.2"],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_ENABLED": "false",
         "LD_PRELOAD": PRELOAD + " " + early, "EARLY_BURN_SECONDS": "0.05"})
    check(rc == 0 and stderr == "", "exit %d, stderr %r" % (rc, stderr))
    check("cpu_seconds" in stdout, "the workload did not finish: %r" % stdout)
    check(not os.path.exists(out) or not os.listdir(out), "files written while disabled")
    return "no output"


def test_timers_deleted_when_threads_end(ctx):
    """600 threads ending by return, pthread_exit and cancellation, 8 at a time."""
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, cpu, wall = run_profiled(
        [os.path.join(WORKLOADS, "thread_churn"), "600", "8"],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000"})
    check(rc == 0, "workload exit %d: %s" % (rc, stderr))
    m = re.search(r"threads (\d+) peak_timers (\d+) final_timers (\d+)", stdout)
    check(m, "unexpected output %r" % stdout)
    peak, final = int(m.group(2)), int(m.group(3))
    check(final == 1, "%d POSIX timers left after every thread ended, expected 1 (main)" % final)
    check(peak <= 9, "peak of %d timers with 8 threads + main alive" % peak)
    # Each thread lives >= 2 ms, past the 1 ms after which the profiler's thread arms
    # its timer (agent/sample/threads.h): nearly all get one.
    late = int(re.search(r"armed_late (-?\d+)", stdout).group(1))
    check(late >= 300, "only %d of 600 threads got a timer" % late)
    profs = dump(profile_files(out), stacks=True)
    burn = sum(p["functions"].get("churn_burn", {"total": [0, 0]})["total"][1] for p in profs)
    # Every thread ended before the only upload (at exit): the names come from the
    # agent's read when each sampled thread ended.
    names = {st["labels"].get("thread name") for p in profs for st in p["stacks"]
             if "churn_burn" in st["frames"]}
    check(names and all(n and re.fullmatch(r"churn-\d+", n) for n in names),
          "samples of ended threads are not labelled with their names: %s" % sorted(
              names, key=str)[:10])
    # Each of the 600 threads burns >= 2 ms of CPU in churn_burn: >= 1.2 s in all. The
    # kernel checks CPU timers only at ticks (4 ms), so most of these threads end
    # before an expiry is delivered: each thread's CPU after its last sample (or all of
    # it, without one) is added when it ends (agent/sample/sampler.h). Before that, the
    # profile held ~45% of the process's CPU; now all of it (the process CPU is read
    # before exit, the profile also holds the exit flush: a little above 1 is fine).
    check(burn >= 0.5 * 1.2e9, "churn_burn has %.3f s of cpu-time, expected >= 0.6 s"
          % (burn / 1e9))
    # Our pthread_create trampoline is left out of stacks (uploader/pprof.c).
    check(not any("thread_trampoline" in st["frames"] for p in profs for st in p["stacks"]),
          "a stack shows the agent's thread_trampoline")
    total = sum(p["totals"][1] for p in profs) / 1e9
    check(cpu and 0.93 <= total / cpu <= 1.07,
          "profile total %.3f s for %s s of process CPU: short threads not counted in full"
          % (total, cpu))
    return "peak=%d final=%d armed late %d, churn_burn=%.2fs, total/cpu %.3f, %d thread names" % (
        peak, final, late, burn / 1e9, total / cpu, len(names))


def test_first_profile_starts_at_exec_not_at_the_wrapper(ctx):
    """A wrapper (a container's entrypoint script) works for 1 s, then execs the
    program: its first profile starts when the program did, not when the wrapper's
    task was created (which exec keeps), and covers only its own life."""
    out = os.path.join(ctx.dir, "out")
    t0 = time.time()
    script = "sleep 1; exec env LD_PRELOAD='%s' %s 1 0.3" % (PRELOAD, os.path.join(WORKLOADS, "cpu_split"))
    rc, stdout, stderr, cpu, wall = run_profiled(
        ["/bin/sh", "-c", script], {"DD_PROFILING_OUTPUT_DIR": out}, preload=False)
    check(rc == 0, "exit %d: %s" % (rc, stderr))
    profs = dump(profile_files(out))
    check(len(profs) == 1, "%d profiles" % len(profs))
    start = profs[0]["time_nanos"] / 1e9
    duration = profs[0]["duration_nanos"] / 1e9
    check(start >= t0 + 0.9, "the profile starts %.3f s after launch: before the exec" % (
        start - t0))
    check(duration <= wall - 0.9, "the profile lasts %.3f s of a %.3f s run with a 1 s "
          "wrapper" % (duration, wall))
    return "starts %.3f s after launch, lasts %.3f s (run %.3f s)" % (start - t0, duration, wall)


def test_short_threads_make_no_timer(ctx):
    """2000 threads of 50 us each, one at a time: none lives the 1 ms after which the
    profiler's thread would arm its timer, and their CPU is still in the profile."""
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, cpu, wall = run_profiled(
        [os.path.join(WORKLOADS, "thread_churn"), "2000", "1", "50"],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000"})
    check(rc == 0, "workload exit %d: %s" % (rc, stderr))
    m = re.search(r"peak_timers (\d+) final_timers (\d+)\narmed_late (-?\d+)", stdout)
    check(m, "unexpected output %r" % stdout)
    peak, final, late = int(m.group(1)), int(m.group(2)), int(m.group(3))
    # A thread descheduled for a millisecond on a busy machine may get one: 5% allowed.
    check(0 <= late <= 100, "%d of 2000 threads of 50 us got a timer" % late)
    check(peak <= 2 and final == 1, "timers: peak %d, final %d (main: 1)" % (peak, final))
    # Their CPU: each thread's end reads its CPU clock with probability lifetime /
    # period (agent/sample/sampler.h); about 300 reads at 1 kHz. What a thread spends after
    # that read (glibc's and the kernel's exit) is not counted: a tenth of a 50 us
    # thread's CPU here, so 0.82 to 0.94 of the process's CPU over runs (0.80 to 0.87
    # before late timers). Without the end accounts it would be about 0.35.
    profs = dump(profile_files(out))
    total = sum(p["totals"][1] for p in profs) / 1e9
    check(cpu and 0.75 <= total / cpu <= 1.15,
          "profile total %.3f s for %s s of process CPU" % (total, cpu))
    return "%d timers armed late of 2000 threads, peak %d, total/cpu %.3f" % (
        late, peak, total / cpu)


STARTUP_SCRIPT = """
import os, time
def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass
burn(0.2)
pid = os.fork()
burn(0.2)
print("cpu_seconds %.6f pid %d" % (time.process_time(), os.getpid()), flush=True)
if pid:
    os.waitpid(pid, 0)
"""


def test_startup_cpu_is_in_the_first_profile(ctx):
    """The CPU a process used before the agent's constructor (the exec, the dynamic
    loader, constructors that ran before ours: here one burns 0.1 s on the main thread)
    is in its first profile as "[start-up]" on the main thread, so the profile's total
    is the process's CPU; a fork child's profiles do not carry it again."""
    out = os.path.join(ctx.dir, "out")
    early = os.path.join(WORKLOADS, "libearly_thread.so")
    rc, stdout, stderr, _cpu, _wall = run_profiled(
        [PYTHON, "-c", STARTUP_SCRIPT],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
         "LD_PRELOAD": PRELOAD + " " + early, "EARLY_MAIN_BURN_SECONDS": "0.1",
         "EARLY_BURN_SECONDS": "0"})
    check(rc == 0, "workload exit %d: %s" % (rc, stderr))
    used = {int(m.group(2)): float(m.group(1))
            for m in re.finditer(r"cpu_seconds ([0-9.]+) pid (\d+)", stdout)}
    check(len(used) == 2, "expected two processes to report: %r" % stdout)
    parent = min(used)  # the child's pid is higher (no pid wrap in a test run)
    found = {}
    for pid in used:
        profs = dump(profile_files(out, pid), stacks=True)
        check(profs, "no profile for %d" % pid)
        ti = value_index(profs[0], "cpu-time")
        starts = [st for p in profs for st in p["stacks"] if st["frames"] == ["[start-up]"]]
        found[pid] = sum(st["values"][ti] for st in starts) / 1e9
        if pid != parent:
            check(not starts, "fork child %d carries a start-up of %.3f s" % (pid, found[pid]))
        else:
            check(len(starts) == 1, "%d [start-up] samples in the parent" % len(starts))
            check(starts[0]["labels"].get("thread id") == pid,
                  "[start-up] labels %s, expected the main thread %d" % (starts[0]["labels"], pid))
            # 0.1 s burnt, plus the exec and the loader (4 ms here, more when busy).
            check(0.1 <= found[pid] <= 0.15, "[start-up] holds %.3f s" % found[pid])
        # What the process reported (its clock counts from the exec, or from the
        # fork) holds the application's CPU and part of the profiler's (its unwind
        # tables; its exit flush comes after the report, tens of ms to name Python),
        # not Python's own exit after the report (10 ms; 40 ms with both cores busy).
        # A start-up counted again in the child would add 0.1 s.
        app = app_total(profs, ti) / 1e9
        prof = profiler_ns(profs, ti) / 1e9
        check(used[pid] - prof - 0.02 * used[pid] <= app <= used[pid] + 0.06,
              "process %d: profile %.3f s (and %.3f s [profiler]) for %.3f s of CPU"
              % (pid, app, prof, used[pid]))
    return "start-up %.3f s in the parent, none in the child" % found[parent]


def test_threads_started_before_the_agent_are_sampled(ctx):
    """A thread created by a constructor that runs before ours is found in /proc, and is
    exact: its CPU before the scan is in its first sample, and its end (our
    pthread_create runs it through the trampoline even before our constructor) adds the
    CPU after its last expiry. Its last 0.1 s runs with every signal blocked, where no
    sample can land: without the end account the profile had 0.299 s of its 0.4 s (and
    under load, where one signal may carry tens of ms, 0.254 s was seen without the
    blocking)."""
    out = os.path.join(ctx.dir, "out")
    early = os.path.join(WORKLOADS, "libearly_thread.so")
    rc, stdout, stderr, cpu, wall = run_profiled(
        [os.path.join(WORKLOADS, "cpu_split"), "1", "1.0"],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
         "LD_PRELOAD": PRELOAD + " " + early, "EARLY_BURN_SECONDS": "0.4",
         "EARLY_BLOCK_SIGNALS_LAST": "0.1"})
    check(rc == 0, "workload exit %d: %s" % (rc, stderr))
    profs = dump(profile_files(out), stacks=True)
    ti = value_index(profs[0], "cpu-time")
    burn = sum(p["functions"].get("early_burn", {"total": [0, 0]})["total"][ti] for p in profs)
    # It burns 0.4 s of CPU (early_burn and the clock reads it calls) and ends while main
    # still runs (main burns 1 s on another core). 0.400 s here, idle or with both cores
    # busy.
    check(abs(burn / 0.4e9 - 1) <= 0.03,
          "early_burn has %.3f s of cpu-time, expected 0.4 s within 3%%" % (burn / 1e9))
    named = [st for p in profs for st in p["stacks"] if "early_burn" in st["frames"]]
    check(all(st["labels"].get("thread name") == "early-thread" for st in named),
          "early thread samples not labelled with its name: %s"
          % {st["labels"].get("thread name") for st in named})
    def caller(frames):
        i = frames.index("early_burn")
        return frames[i + 1] if i + 1 < len(frames) else None
    callers = sum(st["values"][ti] for st in named if caller(st["frames"]) == "early_main")
    check(callers >= 0.95 * burn, "its stacks lost their caller (%.1f%% with early_main)"
          % (100.0 * callers / burn))
    return "early_burn=%.2fs" % (burn / 1e9)


def test_small_default_thread_stacks_leave_the_profiler_thread_its_own(ctx):
    """An application may make every new thread's stack small
    (pthread_setattr_default_np, 64 KiB here) before its first pthread_create, which is
    when the profiler's thread starts. That thread still gets its own 8 MiB: libdw's
    symbolization and the TLS library run on it. With the default size it overflowed
    and the application died of SIGSEGV at exit. The profile names the work."""
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, cpu, _wall = run_profiled(
        [os.path.join(WORKLOADS, "small_stacks"), "1.0"], {"DD_PROFILING_OUTPUT_DIR": out})
    check(rc == 0 and cpu, "small_stacks exit %d printed %r: %s" % (rc, stdout, stderr[-300:]))
    m = re.search(r"uploader_stack_below_sp_kb (-?\d+)", stdout)
    below_kb = int(m.group(1)) if m else -1
    check(below_kb >= 4096, "the profiler's thread has %d KiB of stack below its waiting "
          "stack pointer (the application's default is 64 KiB)" % below_kb)
    profs = dump(profile_files(out))
    ti = value_index(profs[0], "cpu-time")
    total = app_total(profs, ti)
    work = sum(p["functions"].get("small_stack_work", {"self": [0, 0]})["self"][ti]
               for p in profs)
    check(abs(total / 1e9 / cpu - 1) <= 0.05 and work >= 0.9 * total,
          "profiles hold %.3f s of %.3f s CPU, %.0f%% in small_stack_work"
          % (total / 1e9, cpu, 100.0 * work / max(total, 1)))
    return "%d KiB below the profiler thread's sp; %.3f s of %.3f s CPU, %.0f%% in " \
        "small_stack_work" % (below_kb, total / 1e9, cpu, 100.0 * work / total)
