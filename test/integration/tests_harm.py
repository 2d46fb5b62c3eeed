"""Do no harm: what the host gives the agent (files, environment) may be hostile or
wrong, and the program under it must run as it would without the agent.

Unwind cache files are untrusted input (agent/unwind/cfi_cache_file.h): a directory holding a
huge sparse file, a symbolic link, a FIFO and another user's file under the names of
the program's own modules must cost the program neither memory nor its profile.
"""
import os
import re
import struct
import subprocess
import time

from itest import CACHE_HOME, LIB, WORKLOADS, check, dump, profile_files, run_profiled
from tests_unwind import stack_shares, top_outer

# struct cfi_cache_header (agent/unwind/cfi_cache_file.h): magic, version, row size, the key
# (dev, ino, size, mtime_ns, ctime_ns, path hash), base, nrows, then four uint32.
HEADER = struct.Struct("<8sII6QQQIIII")
HEADER_BYTES = 4096
ROW_BYTES = 12
# What the hostile file's header claims: 1 GiB of rows. (The loader before the checks
# mapped and prefaulted whatever a header claimed; 1 GiB shows it without putting a
# shared machine at risk when the test is run against such a loader.)
CLAIMED_ROWS = (1 << 30) // ROW_BYTES
# A run with the hostile directory may use this much more peak RSS, and map this much
# more at its peak, than the run that filled the cache: noise (its tables are built,
# not loaded; a malloc arena reserves 64 MiB), never a claimed table.
RSS_SLACK_KIB = 16 << 10
VM_SLACK_KIB = 256 << 10
# The peaks are read this often while the workload runs. Cache loads happen a second
# after start-up, long before the last poll.
POLL_S = 0.01
FNV_INIT, FNV_PRIME, U64 = 0xcbf29ce484222325, 0x100000001b3, (1 << 64) - 1


def fnv1a(data, h=FNV_INIT):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & U64
    return h


def cache_name(path):
    """The cache file name of the module at path (agent/unwind/cfi_cache.c file_name)."""
    st = os.stat(path)
    key = struct.pack("<6Q", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                      st.st_ctime_ns, fnv1a(path.encode()))
    return "%016x.cfi" % fnv1a(key)


def vm_peaks(pid):
    """(VmHWM, VmPeak) of a live process in KiB, or None once it has exited."""
    try:
        with open("/proc/%d/status" % pid) as f:
            fields = dict(l.split(":", 1) for l in f if ":" in l)
        return int(fields["VmHWM"].split()[0]), int(fields["VmPeak"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


def run_measured(argv, env_extra, workdir, timeout=120):
    """Runs argv under the agent: (rc, stdout, stderr, peak RSS KiB, peak mappings KiB).
    The peaks are the process's own high-water marks (VmHWM, VmPeak), read every
    POLL_S while it runs: wait4's ru_maxrss would include this Python process's RSS,
    which the child had between fork and exec."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DD_") and not k.startswith("PYROSCOPE_")}
    env.update({"LD_PRELOAD": LIB, "XDG_CACHE_HOME": CACHE_HOME})
    env.update(env_extra)
    paths = [os.path.join(workdir, n) for n in ("stdout", "stderr")]
    hwm = peak = 0
    with open(paths[0], "wb") as out, open(paths[1], "wb") as err:
        p = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout
        while True:
            seen = vm_peaks(p.pid)
            if seen:
                hwm, peak = max(hwm, seen[0]), max(peak, seen[1])
            pid, status, _ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                check(False, "%s did not finish within %d s" % (argv, timeout))
            time.sleep(POLL_S)
    p.returncode = os.waitstatus_to_exitcode(status)
    text = [open(f, errors="replace").read() for f in paths]
    return p.returncode, text[0], text[1], hwm, peak


def module_paths(stderr):
    """Paths of the modules whose tables the run built or loaded (debug lines)."""
    return re.findall(r"modules: (/\S+): \d+ unwind rows", stderr)


def check_profile(outdir, stdout, what):
    """The run's profile holds its CPU (within 5%) in stacks rooted at >= 99%."""
    m = re.search(r"cpu_seconds ([0-9.]+)", stdout)
    check(m, "%s: no cpu_seconds in %r" % (what, stdout))
    cpu = float(m.group(1))
    files = profile_files(outdir)
    check(files, "%s: no profile written" % what)
    total, rooted, _found, outer = stack_shares(dump(files, stacks=True))
    check(abs(total / 1e9 / cpu - 1) <= 0.05, "%s: cpu-time %.2f s vs kernel %.2f s"
          % (what, total / 1e9, cpu))
    share = 100.0 * rooted / max(total, 1)
    check(share >= 99.0, "%s: only %.2f%% of cpu-time rooted (outermost: %s)"
          % (what, share, top_outer(outer, total)))
    return cpu, share


def test_hostile_unwind_cache_directory(ctx):
    """A cache directory holding, under the names of the program's modules, a sparse
    file whose header claims 1 GiB of libc's rows, a symbolic link, a FIFO and a file
    of another user: the program exits 0, its profile is complete (CPU within 5%, >= 99%
    rooted), its peak RSS within 16 MiB and its peak mappings within 256 MiB of a run
    with a sane cache, and its stderr has exactly one cache warning though every hostile
    file is refused."""
    cache = os.path.join(ctx.dir, "cache")
    argv = [os.path.join(WORKLOADS, "omitfp_threads"), "1", "1.4"]
    runs = {}
    for name in ("sane", "hostile"):
        out = os.path.join(ctx.dir, "out-" + name)
        work = os.path.join(ctx.dir, "run-" + name)
        os.mkdir(work)
        # Debug: every refusal has a line, so the test sees each hostile file refused;
        # only the first refusal is a warning, as at the default level.
        runs[name] = run_measured(argv, {
            "DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "1000",
            "DD_PROFILING_LOG_LEVEL": "debug", "DD_PROFILING_UNWIND_CACHE_DIR": cache}, work)
        rc, stdout, stderr, rss, vm = runs[name]
        check(rc == 0, "%s run: exit %d: %s" % (name, rc, stderr[-2000:]))
        cpu, share = check_profile(out, stdout, name + " run")
        runs[name] += (cpu, share)
        if name != "sane":
            continue
        # The sane run kept libc's table under the name the agent gives it.
        mods = module_paths(stderr)
        libc = [m for m in mods if "/libc.so" in m]
        check(len(libc) == 1, "libc not among the modules: %s" % mods)
        libc = libc[0]
        stored = os.path.join(cache, cache_name(libc))
        check(os.path.exists(stored), "no %s in %s (names computed here: %s)"
              % (stored, os.listdir(cache), [cache_name(m) for m in mods]))
        with open(stored, "rb") as f:
            header = list(HEADER.unpack(f.read(HEADER.size)))
        # libc's entry: a valid header (its key) claiming 1 GiB, in a sparse file of
        # exactly the size that claim gives.
        header[-5], header[-4] = CLAIMED_ROWS, 1  # nrows, npages
        os.unlink(stored)
        with open(stored, "wb") as f:
            f.write(HEADER.pack(*header))
            f.truncate(HEADER_BYTES + CLAIMED_ROWS * ROW_BYTES + 4)
        others = [m for m in mods if m != libc]
        check(len(others) >= 3, "too few modules to plant files for: %s" % mods)
        decoy = os.path.join(ctx.dir, "decoy.cfi")
        with open(decoy, "wb") as f:
            f.write(b"\0" * HEADER_BYTES)
        planted = {stored: "bigger than the cap"}
        link = os.path.join(cache, cache_name(others[0]))
        os.symlink(decoy, link)
        planted[link] = "a symbolic link"
        fifo = os.path.join(cache, cache_name(others[1]))
        os.mkfifo(fifo, 0o600)
        planted[fifo] = "not a regular file"
        if os.geteuid() == 0:  # only root can give a file away
            foreign = os.path.join(cache, cache_name(others[2]))
            with open(foreign, "wb") as f:
                f.write(b"\0" * HEADER_BYTES)
            os.chmod(foreign, 0o600)
            os.chown(foreign, 65534, 65534)
            planted[foreign] = "owned by another user"
    rc, stdout, stderr, rss, vm, cpu, share = runs["hostile"]
    for path, why in planted.items():
        name = os.path.basename(path)
        check(re.search(r"unwind cache: \S+/%s refused \(%s" % (re.escape(name), why), stderr),
              "%s (%s) not refused: %s" % (name, why, "\n".join(
                  l for l in stderr.splitlines() if "unwind cache" in l)))
    warnings = [l for l in stderr.splitlines()
                if l.startswith("libddprof: warning:") and "unwind cache" in l]
    check(len(warnings) == 1, "%d cache warnings: %s" % (len(warnings), warnings))
    sane_rss, sane_vm = runs["sane"][3:5]
    check(0 < rss <= sane_rss + RSS_SLACK_KIB, "peak RSS %d KiB with the hostile cache, %d "
          "KiB with a sane one" % (rss, sane_rss))
    check(0 < vm <= sane_vm + VM_SLACK_KIB, "peak mappings %d KiB with the hostile cache, "
          "%d KiB with a sane one" % (vm, sane_vm))
    return ("peak RSS %d KiB, mappings %d KiB (sane cache: %d, %d KiB); cpu %.2f s, rooted "
            "%.2f%%; %d files refused, 1 warning" % (rss, vm, sane_rss, sane_vm, cpu, share,
                                                     len(planted)))


MALLOC_POLICY = os.path.join(WORKLOADS, "malloc_policy")
POLICY_RE = re.compile(r"blocks (\d+) heap_served (\d+)")


def run_policy(ctx, env, args=()):
    rc, out, err, _, _ = run_profiled([MALLOC_POLICY, "3.5"] + list(args), env, timeout=60,
                                      preload=bool(env))
    check(rc == 0, "malloc_policy exited %d: %s" % (rc, err[-500:]))
    m = POLICY_RE.search(out)
    check(m, "no result line: %r" % out)
    return int(m.group(1)), int(m.group(2)), m.group(0)


def test_the_applications_malloc_thresholds_are_left_as_they_were(ctx):
    """glibc raises its mmap threshold (and trim threshold) for the whole process when a
    block it mapped is freed: a profiler that frees large buffers of its own through glibc
    changes how the application's large allocations are served. The application's
    256 KiB, 1 MiB and 4 MiB blocks stay mappings of their own through start-up, module
    scans, symbolization and several uploads (to files and over HTTP), with allocation
    profiling off and on; the program freeing a large block itself shows that the check
    can fail."""
    blocks, served, _ = run_policy(ctx, {}, ["raise"])
    check(blocks > 100 and served * 3 >= blocks,
          "control: after its own free of a 300 KiB block, the program's 256 KiB blocks "
          "should come from the heap (a third of %d), saw %d" % (blocks, served))
    from tests_upload import Intake
    with Intake(ctx, "intake") as intake:
        for alloc in ("false", "true"):
            for exporter in ("file", "http"):
                out = os.path.join(ctx.dir, "out-%s-%s" % (alloc, exporter))
                env = {"DD_PROFILING_UPLOAD_PERIOD": "1",
                       "DD_PROFILING_ALLOCATION_ENABLED": alloc,
                       "DD_PROFILING_HEAP_ENABLED": alloc}
                if exporter == "file":
                    env["DD_PROFILING_OUTPUT_DIR"] = out
                else:
                    env["DD_TRACE_AGENT_URL"] = intake.url
                blocks, served, line = run_policy(ctx, env)
                check(blocks > 100, "only %d rounds" % blocks)
                check(served == 0,
                      "allocation profiling %s, %s exporter: %d of the application's %d "
                      "large blocks came from the heap: its mmap threshold was raised (%s)"
                      % (alloc, exporter, served, blocks, line))
                if exporter == "file":
                    n = len(profile_files(out))
                    check(n >= 3, "expected a profile a second and one at exit, saw %d" % n)
        check(len(intake.records()) >= 6, "expected uploads over HTTP, saw %d"
              % len(intake.records()))


# A Python program that checks, through ctypes, whether glibc still maps its large blocks
# (the size word's IS_MMAPPED bit, as malloc_policy.c does), while it hashes, encodes
# JSON and calls libm: a profile of it names frames of python3, libc, libcrypto and libm,
# whose debug file (libc6-dbg) has compressed DWARF that libdw decompresses (MiBs).
PY_POLICY = r"""
import ctypes, hashlib, json, math, sys, time
libc = ctypes.CDLL(None)
xs = [1.5 + i / 7.0 for i in range(2000)]
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
blocks = served = 0
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for i in range(300):
        hashlib.sha512(b"x" * 4096).digest()
        json.dumps({"k": list(range(50)), "i": i})
    sum(map(math.lgamma, xs)) + sum(map(math.erfc, xs))
    for size in (130 << 10, 256 << 10, 1 << 20):
        p = libc.malloc(size)
        blocks += 1
        served += not (ctypes.c_uint64.from_address(p - 8).value & 2)
print("blocks %d heap_served %d" % (blocks, served))
"""


def test_symbolizing_with_libdw_leaves_pythons_malloc_thresholds_as_they_were(ctx):
    """libdw decompresses a debug file's DWARF into memory it takes from malloc (blocks
    of hundreds of KiB), and frees it when the profiler gives its DWARF back after a
    profile: glibc would then raise the application's mmap threshold for good. With a cold
    symbol cache, so that every frame is named through libdw, Python's 256 KiB and 1 MiB
    blocks stay mappings of their own through four profiles; the debug log shows the
    profiler's libdw blocks were mapped apart (the hazard happened)."""
    from itest import PYTHON
    script = os.path.join(ctx.dir, "policy.py")
    with open(script, "w") as f:
        f.write(PY_POLICY)
    out = os.path.join(ctx.dir, "out")
    env = {"DD_PROFILING_UPLOAD_PERIOD": "1", "DD_PROFILING_OUTPUT_DIR": out,
           "XDG_CACHE_HOME": os.path.join(ctx.dir, "cold-cache"),
           "DD_PROFILING_LOG_LEVEL": "debug"}
    rc, stdout, err, _, _ = run_profiled([PYTHON, script, "4"], env, timeout=60)
    check(rc == 0, "python exited %d: %s" % (rc, err[-500:]))
    m = POLICY_RE.search(stdout)
    check(m, "no result line: %r" % stdout)
    blocks, served = int(m.group(1)), int(m.group(2))
    stats = re.findall(r"libdw and libelf: (\d+) blocks mapped \(\d+ live, (\d+) KiB at most",
                       err)
    mapped = max([int(n) for n, _ in stats] or [0])
    peak_kib = max([int(k) for _, k in stats] or [0])
    check(blocks > 30 and served == 0,
          "%d of Python's %d large blocks came from the heap: its mmap threshold was raised "
          "(libdw's blocks mapped apart: %d)" % (served, blocks, mapped))
    check(peak_kib > 130,
          "libdw took no block over 130 KiB: the run did not test the hazard (%s)"
          % [l for l in err.splitlines() if "libdw" in l][-5:])
    check(len(profile_files(out)) >= 3, "expected a profile a second")
    return "%d large blocks, %d from the heap; libdw's %d blocks mapped apart (%d KiB at once)" % (
        blocks, served, mapped, peak_kib)


LOCK_EDGES = os.path.join(WORKLOADS, "lock_edges")
# Every profile type alone, then all together.
PROFILE_TYPE_ENVS = [
    ("cpu", {}),
    ("allocation", {"DD_PROFILING_ALLOCATION_ENABLED": "true"}),
    ("heap", {"DD_PROFILING_HEAP_ENABLED": "true"}),
    ("wall", {"DD_PROFILING_WALL_ENABLED": "true"}),
    ("lock", {"DD_PROFILING_LOCK_ENABLED": "true"}),
    ("all", {"DD_PROFILING_ALLOCATION_ENABLED": "true", "DD_PROFILING_HEAP_ENABLED": "true",
             "DD_PROFILING_WALL_ENABLED": "true", "DD_PROFILING_LOCK_ENABLED": "true"}),
]


def test_lock_calls_answer_as_without_the_agent(ctx):
    """Robust mutexes through every state (EOWNERDEAD, made consistent, ENOTRECOVERABLE for
    lock, timedlock, clocklock and trylock; process-shared across a fork whose child dies
    holding it), priority-inheritance and priority-protect mutexes, and every lock entry
    point with arguments libc refuses (an unsupported clock, nanoseconds out of range) on
    free and held locks: the same results, line for line, as the program alone, with
    each profile type alone and all together, within 30 s (a robust mutex that is not
    recoverable hung the lock and wall hooks forever; the invalid calls took the lock)."""
    rc, alone, err, _, _ = run_profiled([LOCK_EDGES], {}, timeout=30, preload=False)
    check(rc == 0 and alone.endswith("done\n"), "alone: exit %d: %r %r" % (rc, alone, err))
    results = []
    for name, env in PROFILE_TYPE_ENVS:
        try:
            rc, out, err, _, _ = run_profiled([LOCK_EDGES], env, timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s: lock_edges hung (alone it ends in under 3 s)" % name)
        diff = [(a, b) for a, b in zip(alone.splitlines(), out.splitlines()) if a != b]
        check(rc == 0 and out == alone,
              "%s: exit %d; differs from alone: %s%s" % (
                  name, rc, diff[:4], "" if diff else " (length %d vs %d)" % (
                      len(out), len(alone))))
        results.append(name)
    return "%d calls, identical with %s" % (len(alone.splitlines()) - 1, ", ".join(results))


SIGBLOCK = os.path.join(WORKLOADS, "sigblock_threads")


def test_threads_that_block_every_signal_never_see_the_sampling_signal(ctx):
    """Threads that block every signal and burn CPU ask sigpending, sigtimedwait and a
    signalfd on full sets, and one waits in sigsuspend for a SIGUSR1; main waits with
    sigwaitinfo and sigwait on full sets for SIGALRM and SIGUSR2; each thread reports its
    mask through pthread_sigmask and sigprocmask as it blocks, unblocks SIGPROF and
    blocks again; children started through posix_spawn, system, popen (unprofiled) and
    fork+execv print the mask they start with: every answer as alone (compared line for
    line, in any order of the threads), with each profile type and all together. Before:
    the sampling signal was pending, taken by sigtimedwait, and ended sigsuspend before
    the SIGUSR1.
    And the threads are sampled as if they did not block it (agent/sample/mask_view.h):
    their CPU (2.5 x SECONDS) within 10% of the workload's, blocked_burn named in >= 95%
    of it (the rest: the clock reads of the burn loop, the mask calls). Before: 4 samples
    for 4 s of CPU, each credited at the thread's end to its start routine."""
    secs = 0.6
    rc, alone, err, _, _ = run_profiled([SIGBLOCK, str(secs)], {}, timeout=30, preload=False)
    check(rc == 0 and "main: sigwait" in alone and "child fork-execv" in alone,
          "alone: exit %d: %r %r" % (rc, alone, err))
    want = sorted(alone.splitlines())
    names = []
    shares = []
    for name, env in PROFILE_TYPE_ENVS:
        outdir = os.path.join(ctx.dir, "out-" + name)
        env = dict(env, DD_PROFILING_OUTPUT_DIR=outdir)
        rc, out, err, _, _ = run_profiled([SIGBLOCK, str(secs)], env, timeout=30)
        got = sorted(out.splitlines())
        check(rc == 0 and got == want, "%s: exit %d; lines differ from alone: %s" % (
            name, rc, sorted(set(got) ^ set(want))))
        names.append(name)
        if name not in ("cpu", "all"):
            continue
        profs = [p for p in dump(profile_files(outdir), stacks=True)
                 if "cpu-time" in [t for t, _u in p["sample_types"]]]
        _total, _rooted, found, _outer = stack_shares(
            profs, ("worker", "suspender", "blocked_burn"))
        threads_ns = found["worker"] + found["suspender"]
        want_ns = 2.5 * secs * 1e9
        check(abs(threads_ns - want_ns) <= 0.1 * want_ns,
              "%s: the blocking threads' CPU in the profile is %.3f s, they burned %.3f s"
              % (name, threads_ns / 1e9, want_ns / 1e9))
        share = found["blocked_burn"] / threads_ns
        check(share >= 0.95, "%s: blocked_burn named in %.1f%% of the blocking threads' CPU "
              "(want >= 95%%)" % (name, 100 * share))
        shares.append("%s %.1f%% of %.2f s" % (name, 100 * share, threads_ns / 1e9))
    return "%d answers as alone with %s; blocked_burn: %s" % (
        len(want), ", ".join(names), ", ".join(shares))
