"""Allocation profiling: bytes estimated per call site, every allocation entry point
seen, a library loaded later hooked, and the application's malloc left alone when the
profile is off. Workload: test/workloads/alloc_sites.c, which prints its own truth."""
import os
import subprocess

from itest import (PROFILER_FRAME, WORKLOADS, check, dump, go_pprof_top, profile_files,
                   run_profiled, value_index)

ALLOC = os.path.join(WORKLOADS, "alloc_sites")
PLUGIN = os.path.join(WORKLOADS, "liballoc_plugin.so")
ROOTS = ("main", "_start", "__libc_start_main", "__libc_start_call_main")


def truth(stdout):
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].endswith("_bytes"):
            out[parts[0][:-len("_bytes")]] = int(parts[1])
    return out


def run_alloc(ctx, name, args, env=None):
    out = os.path.join(ctx.dir, name)
    e = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_ALLOCATION_ENABLED": "true"}
    e.update(env or {})
    rc, stdout, stderr, _cpu, _wall = run_profiled([ALLOC] + args, e)
    check(rc == 0, "alloc_sites %s: exit %d: %s" % (args, rc, stderr))
    check("warning" not in stderr, "unexpected warning: %s" % stderr)
    profs = dump(profile_files(out), stacks=True)
    check(profs, "no profile written for alloc_sites %s" % args)
    return truth(stdout), profs


def self_space(profs, fn):
    ai = value_index(profs[0], "alloc-space")
    return sum(p["functions"].get(fn, {"self": [0] * 8})["self"][ai] for p in profs)


def rooted_space(profs):
    """alloc-space of the stacks whose outermost frame is a root, and of all."""
    ai = value_index(profs[0], "alloc-space")
    rooted = total = 0
    for p in profs:
        for s in p["stacks"]:
            v = s["values"][ai]
            total += v
            if s["frames"] and s["frames"][-1] in ROOTS:
                rooted += v
    return rooted, total


def test_allocation_profile_estimates_the_bytes_of_each_site(ctx):
    """2 GiB allocated at two call sites, 70% and 30% of the calls, in sizes from 16 B to
    1 MiB: alloc-space per site within 3% of the bytes the program counted, and in all.
    The interval is 32 KiB here: at the default 512 KiB the 30% site's estimate has a
    2.9% standard deviation (sqrt(interval / bytes)), at 32 KiB 0.7%. Stacks are whole
    (rooted) and named; go tool pprof reads the allocation columns."""
    t, profs = run_alloc(ctx, "sites", ["sites", "2048"],
                         {"DD_PROFILING_HEAP_SAMPLE_SIZE": "32K"})
    a, b = self_space(profs, "site_a"), self_space(profs, "site_b")
    ra, rb = a / t["site_a"], b / t["site_b"]
    total = sum(p["totals"][value_index(p, "alloc-space")] for p in profs)
    rt = total / (t["site_a"] + t["site_b"])
    check(abs(ra - 1) <= 0.03 and abs(rb - 1) <= 0.03 and abs(rt - 1) <= 0.03,
          "alloc-space / truth: site_a %.4f, site_b %.4f, total %.4f" % (ra, rb, rt))
    rooted, all_space = rooted_space(profs)
    check(rooted >= 0.99 * all_space, "%.1f%% of alloc-space rooted" % (
        100.0 * rooted / max(all_space, 1)))
    top = go_pprof_top(profile_files(os.path.join(ctx.dir, "sites"))[0], "alloc-space")
    check("site_a" in top and "site_b" in top, "go tool pprof -top: %s" % top)
    return "site_a %.4f, site_b %.4f, total %.4f of the truth; rooted %.1f%%" % (
        ra, rb, rt, 100.0 * rooted / max(all_space, 1))


def test_a_short_process_with_a_few_samples_sends_nothing(ctx):
    """A process that ends after less CPU than a CPU sample's period with a few
    allocation samples (here 2 blocks of 16 MiB, each one sample) writes no profile: its
    exit would spend about a millisecond on it (uploader/upload_cycle.c:
    SHORT_WORTH_SAMPLES is 4), and the debug log says so. With 6 such blocks it writes
    one, holding exactly those 6 samples. Every profile type on, as a
    user who sets them for a whole container."""
    every = {"DD_PROFILING_ALLOCATION_ENABLED": "true", "DD_PROFILING_HEAP_ENABLED": "true",
             "DD_PROFILING_WALL_ENABLED": "true", "DD_PROFILING_LOCK_ENABLED": "true",
             "DD_PROFILING_LOG_LEVEL": "debug"}
    out = os.path.join(ctx.dir, "few2")
    rc, _o, err, _c, _w = run_profiled([ALLOC, "few", "2"],
                                       dict(every, DD_PROFILING_OUTPUT_DIR=out))
    check(rc == 0, "alloc_sites few 2: exit %d: %s" % (rc, err[-500:]))
    check(not profile_files(out), "2 samples: %d profiles written, want none"
          % len(profile_files(out)))
    check("short_profiles_not_sent=1" in err, "the debug log does not count it: %s"
          % [l for l in err.splitlines() if "diagnostics" in l])
    out6 = os.path.join(ctx.dir, "few6")
    rc, _o, err, _c, _w = run_profiled([ALLOC, "few", "6"],
                                       dict(every, DD_PROFILING_OUTPUT_DIR=out6))
    check(rc == 0, "alloc_sites few 6: exit %d: %s" % (rc, err[-500:]))
    profs = dump(profile_files(out6))
    check(len(profs) == 1, "6 samples: %d profiles, want 1" % len(profs))
    p = profs[0]
    n = p["totals"][value_index(p, "alloc-samples")]
    space = p["totals"][value_index(p, "alloc-space")]
    # Each block is one sample; its bytes are its sample points times 512 KiB (about 32
    # points, Poisson: 6 blocks give 96 MiB +- 7, one standard deviation; the estimate's
    # accuracy is test_allocation_profile_estimates_the_bytes_of_each_site's).
    check(n == 6 and space > 0,
          "6 blocks of 16 MiB: alloc-samples %d, alloc-space %d" % (n, space))
    return "2 samples: no profile; 6 samples: one, %d samples of %d MiB" % (n, space >> 20)


def test_every_allocation_entry_point_is_profiled(ctx):
    """malloc, calloc, realloc (growth from 16 B), reallocarray, posix_memalign,
    aligned_alloc, memalign, valloc and pvalloc, each called from a function of its
    own for 256 MiB in 64 KiB blocks: each function's alloc-space within 8% of its bytes
    (interval 64 KiB: 4096 sample points each, a 1.6% standard deviation);
    reallocarray, which glibc implements through realloc, counted once."""
    t, profs = run_alloc(ctx, "coverage", ["coverage", "256"],
                         {"DD_PROFILING_HEAP_SAMPLE_SIZE": "64K"})
    ratios = {}
    for name, want in sorted(t.items()):
        ratios[name] = self_space(profs, name) / want
    bad = {k: round(v, 3) for k, v in ratios.items() if abs(v - 1) > 0.08}
    check(len(ratios) == 9 and not bad, "alloc-space / truth off by more than 8%%: %r (all: %r)"
          % (bad, ratios))
    return ", ".join("%s %.3f" % (k[4:], v) for k, v in sorted(ratios.items()))


def test_requests_no_allocator_can_satisfy_fail_at_once_as_without_us(ctx):
    """malloc, calloc, posix_memalign, aligned_alloc, memalign and valloc asked for
    SIZE_MAX bytes, 1000 times each, with allocation and heap profiling on at a 4 KiB
    interval (each request holds ~2^51 sample points, counted before the allocator
    refuses it): every call fails with the errno it has without the profiler
    (ENOMEM), and all 6000 take well under 5 s (a countdown passed point by point,
    or block by block, would take hours)."""
    def lines(out):
        return sorted(l for l in out.splitlines() if l.startswith("huge_") and
                      not l.startswith("huge_ns"))
    alone = subprocess.run([ALLOC, "huge"], stdout=subprocess.PIPE, timeout=60).stdout.decode()
    out = os.path.join(ctx.dir, "huge")
    rc, stdout, stderr, _cpu, _wall = run_profiled(
        [ALLOC, "huge"], {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_ALLOCATION_ENABLED": "true",
                          "DD_PROFILING_HEAP_ENABLED": "true",
                          "DD_PROFILING_HEAP_SAMPLE_SIZE": "4K"})
    check(rc == 0, "alloc_sites huge: exit %d: %s" % (rc, stderr))
    check(len(lines(alone)) == 6 and all(l.endswith(" 1000 12") for l in lines(alone)),
          "without the profiler: %r" % lines(alone))
    check(lines(stdout) == lines(alone), "under the profiler %r, alone %r"
          % (lines(stdout), lines(alone)))
    ns = int(stdout.split("huge_ns ")[1].split()[0])
    check(ns < 5 * 10**9, "6000 refused requests took %.1f s" % (ns / 1e9))
    return "6 x 1000 calls: ENOMEM as alone, in %.1f ms" % (ns / 1e6)


def test_a_library_loaded_later_is_profiled(ctx):
    """A library dlopen'ed after start-up (liballoc_plugin.so) allocating 256 MiB in
    64 KiB blocks, 200 ms after its load: plugin_alloc's alloc-space within 8% of it,
    under the program's stack."""
    t, profs = run_alloc(ctx, "plugin", ["plugin", PLUGIN, "256"],
                         {"DD_PROFILING_HEAP_SAMPLE_SIZE": "64K"})
    r = self_space(profs, "plugin_alloc") / t["plugin_alloc"]
    rooted, all_space = rooted_space(profs)
    check(abs(r - 1) <= 0.08, "plugin_alloc: alloc-space / truth %.4f" % r)
    check(rooted >= 0.99 * all_space, "%.1f%% rooted" % (100.0 * rooted / max(all_space, 1)))
    return "plugin_alloc %.4f of the truth" % r


def test_allocation_profiling_off_leaves_malloc_alone(ctx):
    """Off (the default), the program's malloc slot leads to libc, not to us, and the
    profile has the CPU columns only; on, the slot leads to libddprof's hook, and free's
    slot too only with the live heap on (the allocation profile alone has no use for
    frees)."""
    out = os.path.join(ctx.dir, "off")
    rc, stdout, stderr, _c, _w = run_profiled([ALLOC, "probe"], {"DD_PROFILING_OUTPUT_DIR": out})
    check(rc == 0 and "malloc_module libc.so.6" in stdout, "off: %r %r" % (stdout, stderr))
    rc, stdout, stderr, _c, _w = run_profiled(
        [ALLOC, "coverage", "256"], {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_CPU_HZ": "10000"})
    check(profile_files(out), "off: no profile written")
    for p in dump(profile_files(out)):
        check([t for t, _u in p["sample_types"]] == ["cpu-samples", "cpu-time"],
              "off: sample types %r" % p["sample_types"])
    on = os.path.join(ctx.dir, "on")
    rc, stdout, stderr, _c, _w = run_profiled(
        [ALLOC, "probe"], {"DD_PROFILING_OUTPUT_DIR": on, "DD_PROFILING_ALLOCATION_ENABLED": "1"})
    check(rc == 0 and "malloc_module libddprof.so" in stdout
          and "free_module libc.so.6" in stdout, "on: %r %r" % (stdout, stderr))
    rc, stdout, stderr, _c, _w = run_profiled(
        [ALLOC, "probe"], {"DD_PROFILING_OUTPUT_DIR": on, "DD_PROFILING_HEAP_ENABLED": "1"})
    check(rc == 0 and "malloc_module libddprof.so" in stdout
          and "free_module libddprof.so" in stdout, "heap on: %r %r" % (stdout, stderr))
    return ("off: malloc slot in libc.so.6, CPU columns only; allocations on: malloc in "
            "libddprof.so, free in libc.so.6; heap on: both in libddprof.so")


def test_live_heap_holds_what_is_still_allocated(ctx):
    """The live heap profile (DD_PROFILING_HEAP_ENABLED): the program leaks 100 MiB at
    leak_site, then churns 2 GiB at churn_site over 4 s, uploading every second, then
    frees the leak. Every profile that ends after the leak is complete and before it is
    freed holds leak_site's inuse-space within 5% of the bytes leaked (interval 16 KiB:
    a 1.2% standard deviation; the same sampled blocks in each profile, no reset between
    them), churn_site's under 1 MiB; the profile after the free holds under 1% of it.
    The live heap's own memory is in ddprof_get_diagnostics and in each profile's
    "[profiler]" inuse-space, within the table's and the stack store's bounds."""
    out = os.path.join(ctx.dir, "leak")
    env = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_HEAP_ENABLED": "true",
           "DD_PROFILING_HEAP_SAMPLE_SIZE": "16K", "DD_PROFILING_UPLOAD_PERIOD": "1"}
    rc, stdout, stderr, _c, _w = run_profiled([ALLOC, "leak", "100", "4"], env)
    check(rc == 0 and "warning" not in stderr, "exit %d: %s" % (rc, stderr))
    t = truth(stdout)
    marks = {}
    for line in stdout.splitlines():
        k, _, v = line.partition(" ")
        if k.endswith("_ns"):
            marks[k] = int(v)
    profs = dump(profile_files(out))
    check(len(profs) >= 4, "%d profiles; expected one a second" % len(profs))
    during, after = [], []
    for p in profs:
        check([x for x, _u in p["sample_types"]][-2:] == ["inuse-objects", "inuse-space"],
              "sample types %r" % p["sample_types"])
        ii = value_index(p, "inuse-space")
        end = p["time_nanos"] + p["duration_nanos"]
        leak = p["functions"].get("leak_site", {"self": [0] * 8})["self"][ii]
        churn = p["functions"].get("churn_site", {"self": [0] * 8})["self"][ii]
        # A profile's end is the time read just before its swap; the live heap is walked
        # after the swap (the writers' wait, under load tens of ms): a profile ending
        # within 200 ms of the free's start may see part of it.
        if (marks["leak_done_ns"] < p["time_nanos"]
                and end < marks["leak_free_start_ns"] - 200 * 1000 * 1000):
            during.append((leak / t["leak_site"], churn))
        elif p["time_nanos"] > marks["leak_freed_ns"]:
            after.append(leak / t["leak_site"])
    check(len(during) >= 2, "%d profiles while the leak was held: %r" % (len(during), marks))
    bad = [r for r, c in during if abs(r - 1) > 0.05 or c > (1 << 20)]
    check(not bad, "inuse-space / leak, churn bytes: %r" % during)
    check(after and all(r < 0.01 for r in after), "after the free: %r" % after)
    # The memory the live heap holds: in ddprof_get_diagnostics, bounded by the table
    # (8 MiB by default) and the stack store's ceiling (16 MiB), and in every heap
    # profile as "[profiler]" inuse-space.
    diag = {k[len("diag_"):]: int(v) for k, _, v in
            (line.partition(" ") for line in stdout.splitlines()) if k.startswith("diag_")}
    bound = diag.get("heap_table_bytes", 0) + (16 << 20)
    check(7 << 20 < diag.get("heap_table_bytes", 0) <= 8 << 20, "diagnostics: %r" % diag)
    check(diag["heap_table_overflows"] == 0 and diag["heap_stacks_refused"] == 0
          and diag["heap_live_samples"] <= 16 and diag["heap_stacks"] >= 2
          and diag["alloc_samples"] == 0 and 0 < diag["heap_profiler_bytes"] <= bound,
          "diagnostics: %r" % diag)
    own = [p["functions"].get(PROFILER_FRAME, {"self": [0] * 8})["self"][
        value_index(p, "inuse-space")] for p in profs]
    check(all(0 < b <= bound for b in own), "[profiler] inuse-space per profile: %r" % own)
    return ("leak held: %s of the truth in %d profiles; after the free: %s; [profiler] "
            "inuse-space %.1f to %.1f MiB; %d stacks kept") % (
        ", ".join("%.4f" % r for r, _c in during), len(during),
        ", ".join("%.4f" % r for r in after), min(own) / 2**20, max(own) / 2**20,
        diag["heap_stacks"])


def test_live_heap_compacts_the_stacks_of_freed_allocations(ctx):
    """Every allocation sampled (interval 1 byte): 16 MiB kept at leak_site, 0.4 s later
    (the profiler's thread starts at its first upload, 0.25 s) 49152
    allocations freed at once, each from a call stack of its own (16 levels of fan_a /
    fan_b), over 4 s: 12 MiB of stacks, past the mark (half a store's 16 MiB) at which
    the host compacts. It compacts (at least once): the stacks of freed allocations
    leave the store (fewer than 3/4 of them kept), under 2% of the new stacks are
    refused meanwhile (the host maps memory and compacts from its own thread, at most
    50 ms apart while the store grows), and the kept blocks'
    inuse-space is the same in every profile before their free, within 1% of 16 MiB,
    their stack whole (through main)."""
    out = os.path.join(ctx.dir, "stacks")
    env = {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_HEAP_ENABLED": "true",
           "DD_PROFILING_HEAP_SAMPLE_SIZE": "1", "DD_PROFILING_UPLOAD_PERIOD": "0.25"}
    rc, stdout, stderr, _c, _w = run_profiled([ALLOC, "stacks", "49152", "4"], env)
    check(rc == 0 and "warning" not in stderr, "exit %d: %s" % (rc, stderr))
    diag = {k[len("diag_"):]: int(v) for k, _, v in
            (line.partition(" ") for line in stdout.splitlines()) if k.startswith("diag_")}
    check(diag.get("heap_compactions", 0) >= 1, "no compaction: %r" % diag)
    check(diag["heap_stacks"] < 0.75 * 49152 and diag["heap_stacks_refused"] < 0.02 * 49152,
          "stacks kept / refused: %r" % diag)
    profs = sorted(dump(profile_files(out), stacks=True), key=lambda p: p["time_nanos"])
    check(len(profs) >= 4, "%d profiles" % len(profs))
    held = []
    for p in profs[:-1]:
        ii = value_index(p, "inuse-space")
        held.append(sum(s["values"][ii] for s in p["stacks"]
                        if "leak_site" in s["frames"] and "main" in s["frames"]))
    # The same sampled blocks in every profile, however many compactions moved their
    # stack: the same value each time, within 1% of 16 MiB (a 1-byte interval's
    # exponential gaps, at least 1 byte each, do not weigh every byte exactly).
    check(len(set(held)) == 1 and abs(held[0] / (16 << 20) - 1) < 0.01,
          "leak_site inuse-space per profile: %r" % held)
    return "%d compaction(s), %d stacks kept of 49152, %d refused; leak held in %d profiles" % (
        diag["heap_compactions"], diag["heap_stacks"], diag["heap_stacks_refused"], len(held))
