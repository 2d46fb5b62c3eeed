"""Allocation and live heap profiles in the programs users run them in: C++ (operator
new/delete through libstdc++), Debian's python3 building and dropping large dicts and
lists, a library that allocates from its constructor before libddprof's and wraps malloc
with dlsym(RTLD_NEXT), and gunicorn's pre-fork workers (each under its own pid, nothing of
the master's allocations in theirs, the master's live heap inherited)."""
import os
import re
import time

from itest import (PRELOAD, PROFILER_FRAME, PYTHON, WORKLOADS, Gunicorn, check, dump,
                   files_by_pid, profile_files, run_profiled, value_index)
from tests_alloc import rooted_space, truth

ALLOC = os.path.join(WORKLOADS, "alloc_sites")
CXX = os.path.join(WORKLOADS, "alloc_cxx")
EARLY = os.path.join(WORKLOADS, "liballoc_early.so")
MIB = 1 << 20


def named(fname, fn):
    """Whether the function name fname is fn: C's name, or C++'s with its parameters."""
    return fname == fn or fname.startswith(fn + "(")


def total_space(profs, fn, name="alloc-space"):
    """name's value of every stack through fn (inclusive)."""
    i = value_index(profs[0], name)
    return sum(f["total"][i] for p in profs for n, f in p["functions"].items() if named(n, fn))


def marks_of(stdout):
    out = {}
    for line in stdout.splitlines():
        k, _, v = line.partition(" ")
        if k.endswith("_ns"):
            out[k] = int(v)
    return out


def test_cxx_new_delete_and_vector_growth_are_profiled(ctx):
    """A C++ program (test/workloads/alloc_cxx.cc): 256 MiB through new char[] /
    delete[] at cxx_new_site, 256 MiB of std::vector growth at cxx_vector_site, 64 MiB of
    objects held 2.5 s at cxx_hold_site, then deleted. Interval 64 KiB: each site's
    alloc-space (through it: operator new is the leaf, libstdc++ calls malloc) within 8%
    of its bytes, stacks rooted; the held objects' inuse-space within 8% in a profile
    while they are held, under 1% after their delete."""
    out = os.path.join(ctx.dir, "cxx")
    env = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_ALLOCATION_ENABLED": "true",
           "DD_PROFILING_HEAP_ENABLED": "true", "DD_PROFILING_HEAP_SAMPLE_SIZE": "64K",
           "DD_PROFILING_UPLOAD_PERIOD": "1"}
    rc, stdout, stderr, _c, _w = run_profiled([CXX, "256", "2.5"], env)
    check(rc == 0 and "warning" not in stderr, "alloc_cxx: exit %d: %s" % (rc, stderr))
    t = truth(stdout)
    marks = marks_of(stdout)
    profs = dump(profile_files(out), stacks=True)
    check(profs, "no profile written")
    ratios = {}
    for site in ("cxx_new_site", "cxx_vector_site", "cxx_hold_site"):
        ratios[site] = total_space(profs, site) / t[site]
    bad = {k: round(v, 4) for k, v in ratios.items() if abs(v - 1) > 0.08}
    check(not bad, "alloc-space / truth: %r (all %r)" % (bad, ratios))
    new_frames = [f for p in profs for f in p["functions"] if f.startswith("operator new")]
    check(new_frames, "no operator new frame: %r" % sorted(profs[0]["functions"])[:40])
    rooted, all_space = rooted_space(profs)
    check(rooted >= 0.99 * all_space, "%.1f%% of alloc-space rooted" % (
        100.0 * rooted / max(all_space, 1)))
    held, after = [], []
    for p in profs:
        v = total_space([p], "cxx_hold_site", "inuse-space")
        end = p["time_nanos"] + p["duration_nanos"]
        if marks["hold_done_ns"] < p["time_nanos"] and end < marks["hold_free_start_ns"] - 2e8:
            held.append(v / t["cxx_hold_site"])
        elif p["time_nanos"] > marks["hold_freed_ns"]:
            after.append(v / t["cxx_hold_site"])
    check(held and all(abs(r - 1) <= 0.08 for r in held), "held: inuse / truth %r" % held)
    check(after and all(r < 0.01 for r in after), "after delete: %r" % after)
    return "alloc-space/truth %s; held inuse %s; after %s; %s" % (
        ", ".join("%s %.3f" % (k, v) for k, v in sorted(ratios.items())),
        ", ".join("%.3f" % r for r in held), ", ".join("%.3f" % r for r in after),
        new_frames[0])


PY_DICTS_LISTS = r"""
import sys
MODE, N, ROUNDS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
SMALL = 512  # CPython's own allocator (pymalloc) serves up to this; larger go to malloc


def list_truth(n):
    # Objects/listobject.c (3.11), list_resize: the bytes of every realloc while a list
    # grows by append to n items, then list_repeat's [None] * n.
    total, allocated = 0, 0
    for newsize in range(1, n + 1):
        if allocated >= newsize:
            continue
        new = (newsize + (newsize >> 3) + 6) & ~3
        if 1 > new - newsize:
            new = (newsize + 3) & ~3
        allocated = new
        if new * 8 > SMALL:
            total += new * 8
    return total + (8 * n if 8 * n > SMALL else 0)


def dict_truth(n):
    # Objects/dictobject.c (3.11): the keys objects a dict of int keys grows through
    # (insertion_resize: GROWTH_RATE used * 3, calculate_log2_keysize, new_keys_object:
    # a 32-byte header, the index of 1 to 8 bytes a slot, 24-byte entries for 2/3 of
    # the slots).
    total, used, log2 = 0, 0, 3
    usable = (1 << log2) * 2 // 3
    for _ in range(n):
        if used == usable:
            log2 = (used * 3 | 7).bit_length()
            usable = (1 << log2) * 2 // 3
            ib = log2 if log2 < 8 else log2 + 1 if log2 < 16 else log2 + 2 if log2 < 32 \
                else log2 + 3
            size = 32 + (1 << ib) + 24 * usable
            if size > SMALL:
                total += size
        used += 1
    return total


def build_lists(n, rounds):
    for _ in range(rounds):
        xs = []
        for i in range(n):
            xs.append(i)
        ys = [None] * n
        del xs, ys


def build_dicts(n, rounds):
    for _ in range(rounds):
        d = {i: i for i in range(n)}
        del d


if MODE == "lists":
    build_lists(N, ROUNDS)
    print("truth_bytes", ROUNDS * list_truth(N))
else:
    build_dicts(N, ROUNDS)
    print("truth_bytes", ROUNDS * dict_truth(N))
"""


def python_leaf(frame):
    """Whether a leaf frame is in Debian's python3 executable: an exported function
    (Py*, _Py*) or an address in it (its static functions have no symbols)."""
    return frame.startswith(("[python3", "Py", "_Py"))


def test_python_dicts_and_lists_are_attributed_to_pythons_allocator(ctx):
    """Debian's python3 building and dropping 8 lists of a million items (append, then
    [None] * n) in one process, 8 dicts of a million int keys in another, interval
    64 KiB: the alloc-space under the interpreter's eval loop within 5% of the bytes
    CPython's list and dict growth asks malloc for (computed by the script from
    CPython 3.11's growth rules; a 1% standard deviation at this interval); at least
    99% of it rooted at _start (complete through the interpreter); its leaf frames (the
    hook's caller: Python's allocator, PyMem/PyObject) in the python3 executable."""
    script = os.path.join(ctx.dir, "dicts_lists.py")
    with open(script, "w") as f:
        f.write(PY_DICTS_LISTS)
    lines = []
    for mode in ("lists", "dicts"):
        out = os.path.join(ctx.dir, mode)
        env = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_ALLOCATION_ENABLED": "true",
               "DD_PROFILING_HEAP_ENABLED": "true", "DD_PROFILING_HEAP_SAMPLE_SIZE": "64K"}
        rc, stdout, stderr, _c, _w = run_profiled([PYTHON, script, mode, "1000000", "8"], env)
        check(rc == 0 and "warning" not in stderr, "python3 %s: exit %d: %s" % (mode, rc, stderr))
        want = truth(stdout)["truth"]
        profs = dump(profile_files(out), stacks=True)
        check(profs, "%s: no profile written" % mode)
        ai = value_index(profs[0], "alloc-space")
        in_eval = in_python_leaf = 0
        for p in profs:
            for s in p["stacks"]:
                if "_PyEval_EvalFrameDefault" in s["frames"]:
                    in_eval += s["values"][ai]
                    if python_leaf(s["frames"][0]):
                        in_python_leaf += s["values"][ai]
        r = in_eval / want
        check(abs(r - 1) <= 0.05, "%s: alloc-space in the eval loop / truth %.4f" % (mode, r))
        check(in_python_leaf >= 0.99 * in_eval, "%s: only %.1f%% with a leaf in python3" % (
            mode, 100.0 * in_python_leaf / max(in_eval, 1)))
        rooted, all_space = rooted_space(profs)
        check(rooted >= 0.99 * all_space, "%s: %.2f%% of alloc-space rooted" % (
            mode, 100.0 * rooted / max(all_space, 1)))
        lines.append("%s %.4f of %d MiB, %.2f%% rooted" % (
            mode, r, want // MIB, 100.0 * rooted / max(all_space, 1)))
    return "; ".join(lines)


def test_allocations_before_the_constructor_and_during_dlsym(ctx):
    """liballoc_early.so, preloaded after libddprof, runs its constructor first: it keeps
    blocks and starts a thread that allocates without pause; it also wraps malloc,
    calloc and realloc, looking the next ones up with dlsym(RTLD_NEXT) (allocations
    during the lookup, which also dlopens a missing library, served from its own
    arena). The program exits 0; the thread's
    alloc-space is at least its bytes since main began and at most its bytes in all
    (3% either way); after the wrapper is made to look up again from inside the next
    hooked realloc (which allocated while it looked), the realloc growth at early_realloc_site is within 8% of its bytes."""
    out = os.path.join(ctx.dir, "early")
    env = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_ALLOCATION_ENABLED": "true",
           "DD_PROFILING_HEAP_ENABLED": "true", "DD_PROFILING_HEAP_SAMPLE_SIZE": "64K",
           "LD_PRELOAD": PRELOAD + " " + EARLY}
    rc, stdout, stderr, _c, _w = run_profiled([ALLOC, "early", "256"], env)
    check(rc == 0 and "warning" not in stderr, "exit %d: %s %s" % (rc, stdout, stderr))
    t = truth(stdout)
    vals = dict(line.split(" ", 1) for line in stdout.splitlines() if " " in line)
    check(vals.get("early_agent_ran_first") == "0",
          "the early constructor did not run before libddprof's: %r" % vals)
    check(int(vals["wrapper_calls"]) > 0, "the wrapper saw no call: %r" % vals)
    check(int(vals["wrapper_lookups_in_run"]) >= 1 and int(vals["wrapper_lookup_allocs_in_run"]) > 0,
          "no lookup from the hook, or it allocated nothing: %r" % vals)
    profs = dump(profile_files(out), stacks=True)
    loop = total_space(profs, "early_loop")
    lo, hi = t["early_after_main"], t["early_all"]
    check(0.97 * lo <= loop <= 1.03 * hi, "early_loop alloc-space %d outside [%d, %d]"
          % (loop, lo, hi))
    r = total_space(profs, "early_realloc_site") / t["early_realloc_site"]
    check(abs(r - 1) <= 0.08, "early_realloc_site alloc-space / truth %.4f" % r)
    return ("early_loop %.3f of its bytes since main (%.3f of all); realloc site %.3f; "
            "wrapper: %s calls, %s allocations during its lookups") % (
        loop / lo, loop / hi, r, vals["wrapper_calls"], vals["wrapper_lookup_allocs_in_run"])


GUNICORN_ALLOC_APP = '''
import os
def master_hold():
    return [bytearray(1 << 20) for _ in range(48)]
HELD = master_hold()
def serve_alloc(n):
    return len(bytearray(n))
def application(environ, start_response):
    serve_alloc(1 << 20)
    body = ("%d\\n" % os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"),
                              ("Content-Length", str(len(body)))])
    return [body]
'''


def test_gunicorn_workers_with_allocation_and_heap_profiles(ctx):
    """gunicorn --preload, 2 workers, allocation and heap profiles on, 200 requests of
    1 MiB each: all succeed, every worker has profiles under its own pid; the master
    allocated 48 MiB before forking, which are in its own alloc-space, not in any
    worker's (a worker's alloc-space is its requests' MiB within 10%, plus under 4 MiB
    of its own), and in every worker's live heap (its memory is a copy: inuse-space
    at least 90% of 48 MiB in each profile that ended before the master's SIGTERM, at
    which Python's exit frees it); the master exits 0 on SIGTERM."""
    out = os.path.join(ctx.dir, "out")
    env = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_ALLOCATION_ENABLED": "true",
           "DD_PROFILING_HEAP_ENABLED": "true", "DD_PROFILING_HEAP_SAMPLE_SIZE": "64K",
           "DD_PROFILING_UPLOAD_PERIOD": "1"}
    with Gunicorn(ctx, GUNICORN_ALLOC_APP, ["-w", "2", "--preload"], env) as g:
        # 2.5 s in all: each worker uploads more than once.
        bodies, errors = g.hammer(4, 50, pause=0.05)
        served = {}
        for b in bodies:
            served[int(b)] = served.get(int(b), 0) + 1
        check(not errors, "%d of 200 requests failed: %s" % (len(errors), errors[:3]))
        stop_ns = time.time_ns()
        rc, stderr = g.stop()
        master = g.master.pid
    check(rc == 0, "gunicorn master exit %d: %s" % (rc, stderr[-1000:]))
    check("libddprof" not in stderr, "agent messages: %s" % stderr[-1000:])
    by_pid = files_by_pid(out)
    check(master in by_pid, "no profile for the master %d" % master)
    mprofs = dump(by_pid[master])
    ai = value_index(mprofs[0], "alloc-space")
    master_space = sum(p["totals"][ai] for p in mprofs)
    check(master_space >= 0.9 * 48 * MIB, "master alloc-space %.1f MiB" % (master_space / MIB))
    lines = []
    for pid, n in sorted(served.items()):
        check(pid in by_pid, "worker %d served %d requests but has no profile" % (pid, n))
        profs = dump(by_pid[pid])
        check(all(pid in p["process_ids"] for p in profs), "worker %d: process_id label" % pid)
        space = sum(p["totals"][ai] for p in profs)
        want = n * MIB
        check(0.9 * want <= space <= 1.1 * want + 4 * MIB,
              "worker %d: alloc-space %.1f MiB for %d requests of 1 MiB" % (pid, space / MIB, n))
        # Its profiles that ended before the master's SIGTERM (Python's finalization
        # frees the module's objects as the worker exits) hold what it inherited.
        ii = value_index(profs[0], "inuse-space")
        before = [p for p in profs if p["time_nanos"] + p["duration_nanos"] < stop_ns]
        check(before, "worker %d: no profile before the SIGTERM" % pid)
        inuse = min(p["totals"][ii] for p in before)
        check(inuse >= 0.9 * 48 * MIB, "worker %d: inuse-space %.1f MiB, expected the "
              "master's 48 MiB inherited" % (pid, inuse / MIB))
        lines.append("%d: %d req, alloc %.1f MiB, inuse >= %.1f MiB" % (
            pid, n, space / MIB, inuse / MIB))
    return "master alloc %.1f MiB; workers %s" % (master_space / MIB, "; ".join(lines))


def test_the_profilers_own_allocations_are_its_share(ctx):
    """Every allocation sampled (interval 1 byte), uploads every 0.5 s: the profiler's
    threads' allocations are in the allocation profile at the one frame "[profiler]"
    (in every profile after the first upload), and no application stack holds a frame
    of the profiler's own code (its uploader, exporters, symbolizer, host thread)."""
    out = os.path.join(ctx.dir, "own")
    env = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_ALLOCATION_ENABLED": "true",
           "DD_PROFILING_HEAP_SAMPLE_SIZE": "1", "DD_PROFILING_UPLOAD_PERIOD": "0.5"}
    rc, stdout, stderr, _c, _w = run_profiled([CXX, "16", "2"], env)
    check(rc == 0 and "warning" not in stderr, "alloc_cxx: exit %d: %s" % (rc, stderr))
    profs = dump(sorted(profile_files(out)), stacks=True)
    check(len(profs) >= 4, "%d profiles in 3.5 s at 0.5 s" % len(profs))
    ai = value_index(profs[0], "alloc-samples")
    own = [p["functions"].get(PROFILER_FRAME, {"self": [0] * 8})["self"][ai] for p in profs]
    check(all(n > 0 for n in own[1:]), "[profiler] alloc-samples per profile: %r" % own)
    ours = re.compile(r"^(upload_|uploader_|pprof_|export|bg_host|symbolizer_|http_send|"
                      r"modules_|agent_|sampler_|hook_|alloc_hooks|live_heap)")
    leaked = sorted(set(f for p in profs for s in p["stacks"] if s["values"][ai]
                        for f in s["frames"] if ours.match(f)))
    check(not leaked, "profiler frames in application stacks: %s" % leaked[:10])
    return "[profiler] alloc-samples per profile: %s" % own
