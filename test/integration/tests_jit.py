"""JIT code named from /tmp/perf-<pid>.map: our own JIT (build/workloads/jit_loop: two
generated functions with frame-pointer prologues, 1 : 3 of the CPU), its map growing
between uploads, maps the agent must ignore (another owner, group-writable, past the
64 MiB cap) or skip (random bytes), and node --perf-basic-prof."""
import os
import re
import shutil
import subprocess
import tempfile

from itest import (ROOT, WORKLOADS, app_total, check, dump, go_pprof_top, profile_files,
                   run_profiled, value_index)
from tests_flamegraph import flamegraph, page_data

JIT_NAMES = ("jit_inner", "jit_outer", "jit_late")
MAP_WARNING = "perf map"  # every warning about the map says "JIT perf map <path>"


def perf_map_path(pid):
    return "/tmp/perf-%d.map" % pid


def run_jit(ctx, mode, seconds, env):
    """jit_loop under the agent: (rc, stdout, stderr, cpu, profile files). The map the
    workload leaves behind is removed."""
    out = os.path.join(ctx.dir, "out")
    env = dict({"DD_PROFILING_OUTPUT_DIR": out}, **env)
    rc, stdout, stderr, cpu, _wall = run_profiled(
        [os.path.join(WORKLOADS, "jit_loop"), str(seconds), mode], env)
    m = re.search(r"pid (\d+)", stdout)
    if m and os.path.lexists(perf_map_path(int(m.group(1)))):
        os.unlink(perf_map_path(int(m.group(1))))
    check(rc == 0, "jit_loop %s: exit %d: %s" % (mode, rc, stderr[-2000:]))
    check(cpu is not None and cpu >= seconds * 0.95, "jit_loop reported %s CPU seconds" % cpu)
    files = profile_files(out)
    check(files, "jit_loop %s: no profile written (stderr: %s)" % (mode, stderr[-2000:]))
    return rc, stdout, stderr, cpu, files


def go_pprof_raw(path):
    env = dict(os.environ)
    env.setdefault("HOME", tempfile.gettempdir())
    env["PPROF_TMPDIR"] = tempfile.gettempdir()
    r = subprocess.run(["go", "tool", "pprof", "-raw", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120, env=env)
    check(r.returncode == 0, "go tool pprof -raw failed on %s: %s" % (path, r.stderr.decode()))
    return r.stdout.decode()


def raw_function_mappings(text):
    """From go tool pprof -raw: {function name of a location's first line: set of the
    file names of its locations' mappings ("" for none)}."""
    mappings, names = {}, {}
    section = None
    loc_re = re.compile(r"^\s*\d+: 0x[0-9a-f]+ (?:M=(\d+) )?(.*?) \S*:\d+ s=\d+$")
    for line in text.splitlines():
        if line in ("Locations", "Mappings"):
            section = line
            continue
        if section == "Locations":
            m = loc_re.match(line)
            if m:
                names.setdefault(m.group(2), set()).add(m.group(1) or "")
        elif section == "Mappings":
            m = re.match(r"^\s*(\d+): \S+ (\S+)", line)
            if m:
                mappings[m.group(1)] = m.group(2)
    return {f: {mappings.get(i, "") for i in ids} for f, ids in names.items()}


def self_of(profs, ti, names):
    return sum(p["functions"].get(n, {"self": [0, 0]})["self"][ti] for p in profs for n in names)


def test_jit_frames_are_named_from_the_perf_map(ctx):
    """>= 95% of jit_loop's CPU named by its map, split 25/75, rooted through the JIT
    frames at _start, the JIT frames' mapping [jit]: our decoder and go tool pprof; the
    flame graph of the same files colours the JIT frames as JIT code and run_jit as the
    program's."""
    rc, stdout, stderr, cpu, files = run_jit(ctx, "good", 2.0, {"DD_PROFILING_CPU_HZ": "1000"})
    check(MAP_WARNING not in stderr, "a warning about a good map: %s" % stderr)
    profs = dump(files, stacks=True)
    ti = value_index(profs[0], "cpu-time")
    total = app_total(profs, ti)
    inner, outer = self_of(profs, ti, ["jit_inner"]), self_of(profs, ti, ["jit_outer"])
    named = 100.0 * (inner + outer) / total
    check(named >= 95, "%.1f%% of the CPU in jit_inner/jit_outer, expected >= 95%%" % named)
    # The kernel checks CPU timers at its tick (250 Hz here): ~500 samples in 2 s, so a
    # share of 75% has a standard deviation of ~1.9 points; 6 points is over 3 of them.
    share_inner = 100.0 * inner / (inner + outer)
    check(abs(share_inner - 75) <= 6,
          "jit_inner %.1f%% of the JIT CPU, expected 75 within 6 points" % share_inner)
    jit_ns = rooted = 0
    for p in profs:
        for st in p["stacks"]:
            fr = st["frames"]
            if not fr or fr[0] not in ("jit_inner", "jit_outer"):
                continue
            jit_ns += st["values"][ti]
            chain = ["jit_outer", "run_jit", "main"] if fr[0] == "jit_inner" else ["run_jit", "main"]
            if fr[1:1 + len(chain)] == chain and fr[-1] == "_start":
                rooted += st["values"][ti]
    check(rooted >= 0.95 * jit_ns, "only %.1f%% of the JIT CPU has the stack "
          "jit_inner <- jit_outer <- run_jit <- main ... _start" % (100.0 * rooted / max(jit_ns, 1)))
    jit_maps = [m for p in profs for m in p["mappings"] if m["filename"] == "[jit]"]
    check(jit_maps and all(m["has_functions"] for m in jit_maps),
          "no [jit] mapping with functions: %s" % [m["filename"] for p in profs for m in p["mappings"]])
    for f in files:
        fm = raw_function_mappings(go_pprof_raw(f))
        for name in ("jit_inner", "jit_outer"):
            check(fm.get(name) == {"[jit]"}, "go tool pprof -raw: %s's locations are in mappings "
                  "%s, expected [jit]" % (name, fm.get(name)))
        check(fm.get("run_jit") == {os.path.join(WORKLOADS, "jit_loop")},
              "run_jit's mappings %s" % fm.get("run_jit"))
        top = go_pprof_top(f)
        check("jit_inner" in top and "jit_outer" in top, "go tool pprof -top:\n%s" % top)
    rc, page, err = flamegraph(files)
    check(rc == 0 and not err, "scripts/flamegraph exit %d: %s" % (rc, err))
    data = page_data(page)
    want = {"jit_inner": "jit", "jit_outer": "jit", "run_jit": "program"}
    got = {n: data["categories"][data["cat"][i]] for i, n in enumerate(data["names"])
           if n in want}
    check(got == want, "flame graph categories %r, expected %r" % (got, want))
    return "named %.1f%%, inner/outer %.1f/%.1f, rooted %.1f%%, cpu %.2fs" % (
        named, share_inner, 100 - share_inner, 100.0 * rooted / jit_ns, cpu)


def test_jit_map_removed_before_exit_still_names_its_code(ctx):
    """jit_loop removes its map once its 2 s loop is done, before it exits; its only
    profile is the exit's (60 s periods): >= 95% of its CPU is still named jit_inner or
    jit_outer, from the map as the profiler read it while the code ran (every tenth of a
    period, a second at most). 0% was named when the map was read at the profile."""
    rc, stdout, stderr, cpu, files = run_jit(ctx, "unlink", 2.0, {"DD_PROFILING_CPU_HZ": "1000"})
    check(len(files) == 1, "profiles: %s" % files)
    profs = dump(files, stacks=True)
    ti = value_index(profs[0], "cpu-time")
    total = app_total(profs, ti)
    named = 100.0 * self_of(profs, ti, ["jit_inner", "jit_outer"]) / total
    check(named >= 95, "%.1f%% of the CPU in jit_inner/jit_outer, expected >= 95%%" % named)
    return "named %.1f%% of %.2f s" % (named, cpu)


def test_jit_map_growth_is_read_between_uploads(ctx):
    """jit_late, appended to the map half way, is named in the profiles after it;
    profiles every 0.5 s."""
    rc, stdout, stderr, cpu, files = run_jit(
        ctx, "late", 3.0, {"DD_PROFILING_UPLOAD_PERIOD": "0.5", "DD_PROFILING_CPU_HZ": "200"})
    check(len(files) >= 4, "%d profiles in 3 s at 0.5 s periods" % len(files))
    profs = dump(files)
    ti = value_index(profs[0], "cpu-time")
    total = app_total(profs, ti)
    named = 100.0 * self_of(profs, ti, JIT_NAMES) / total
    check(named >= 95, "%.1f%% of the CPU named by the map, expected >= 95%%" % named)
    late = [i for i, p in enumerate(profs) if "jit_late" in p["functions"]]
    inner = [i for i, p in enumerate(profs) if "jit_inner" in p["functions"]]
    check(late and inner and min(late) > 0 and max(inner) < len(profs) - 1,
          "jit_inner in profiles %s, jit_late in %s of %d: expected inner first, then late"
          % (inner, late, len(profs)))
    late_share = 100.0 * self_of(profs, ti, ["jit_late"]) / total
    check(late_share >= 25, "jit_late %.1f%% of the CPU, expected about 37%%" % late_share)
    return "%d profiles, named %.1f%%, jit_late %.1f%% (from profile %d)" % (
        len(files), named, late_share, min(late))


def test_jit_address_reused_for_other_code_keeps_each_samples_name(ctx):
    """Half way through a 3 s run, jit_loop writes other code at jit_inner's address and
    appends a line naming it jit_reused. One profile covers the whole run (4 s period:
    the perf map is read every 0.4 s): jit_inner keeps the CPU it had before the reuse
    and jit_reused gets the CPU after, each within what 0.4 s of the loop makes (plus
    3% of the run), where naming by the map's last state gave jit_reused both halves.
    go tool pprof reads both names."""
    period, seconds = 4.0, 3.0
    rc, stdout, stderr, cpu, files = run_jit(
        ctx, "reuse", seconds, {"DD_PROFILING_UPLOAD_PERIOD": str(period),
                                "DD_PROFILING_CPU_HZ": "1000"})
    run_from = float(re.search(r"run_from ([\d.]+)", stdout).group(1))
    reuse_at = float(re.search(r"reuse_at ([\d.]+)", stdout).group(1))
    profs = dump(files)
    ti = value_index(profs[0], "cpu-time")
    inner = self_of(profs, ti, ["jit_inner"]) / 1e9
    reused = self_of(profs, ti, ["jit_reused"]) / 1e9
    # jit_inner's own loop is 3/4 of each turn of the JIT code (jit_loop.c).
    want_inner = 0.75 * (reuse_at - run_from)
    want_reused = 0.75 * (cpu - reuse_at)
    slack = 0.75 * period / 10 + 0.03 * cpu
    check(abs(inner - want_inner) <= slack and abs(reused - want_reused) <= slack,
          "jit_inner %.3f s (want %.3f), jit_reused %.3f s (want %.3f), slack %.3f s; %d "
          "profiles" % (inner, want_inner, reused, want_reused, slack, len(files)))
    top = go_pprof_top(files[-1])
    check("jit_inner" in top and "jit_reused" in top,
          "go tool pprof does not show both names: %s" % top[:800])
    return "jit_inner %.2f/%.2f s, jit_reused %.2f/%.2f s (slack %.2f s) in %d profile(s)" % (
        inner, want_inner, reused, want_reused, slack, len(files))


def ignored_map(ctx, mode, why):
    """The map refused or skipped: exactly one warning line, the JIT frames unnamed, the
    profile whole (its CPU, stacks through the JIT code still rooted in run_jit)."""
    rc, stdout, stderr, cpu, files = run_jit(ctx, mode, 1.0, {})
    lines = [l for l in stderr.splitlines() if MAP_WARNING in l]
    check(len(lines) == 1, "%s: %d warning lines about the map, expected 1: %r"
          % (mode, len(lines), stderr))
    check(why in lines[0], "%s: the warning does not say '%s': %s" % (mode, why, lines[0]))
    profs = dump(files)
    ti = value_index(profs[0], "cpu-time")
    total = app_total(profs, ti)
    check(not any(n in p["functions"] for p in profs for n in JIT_NAMES),
          "%s: JIT names from an ignored map" % mode)
    check(abs(total / 1e9 / cpu - 1) <= 0.1, "%s: profile %.2f s vs kernel %.2f s"
          % (mode, total / 1e9, cpu))
    run_jit_total = sum(p["functions"].get("run_jit", {"total": [0, 0]})["total"][ti] for p in profs)
    check(run_jit_total >= 0.9 * total, "%s: only %.1f%% of the CPU under run_jit"
          % (mode, 100.0 * run_jit_total / total))
    return lines[0]


def test_jit_map_owned_by_another_user_is_ignored(ctx):
    if os.geteuid() != 0:
        return "skipped: chown to nobody needs root"
    return ignored_map(ctx, "foreign", "owned by another user")


def test_jit_map_writable_by_its_group_is_ignored(ctx):
    return ignored_map(ctx, "groupw", "writable by group or others")


def test_jit_map_past_the_size_cap_is_ignored(ctx):
    return ignored_map(ctx, "huge", "64 MiB")


def test_jit_map_of_random_bytes_is_skipped_with_one_warning(ctx):
    return ignored_map(ctx, "garbage", "lines skipped")


def test_node_perf_basic_prof_names_javascript_functions(ctx):
    """node --perf-basic-prof: the JavaScript functions of a CPU loop are named in the
    profile from V8's perf map (V8 keeps frame pointers: the stacks are rooted too)."""
    node = shutil.which("node")
    if not node:
        return "skipped: node is not installed (scripts/install-deps installs nodejs)"
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, cpu, _wall = run_profiled(
        # V8 logs code events to a file beside the perf map: into the test's directory.
        [node, "--perf-basic-prof", "--no-logfile-per-isolate",
         "--logfile=" + os.path.join(ctx.dir, "v8.log"),
         os.path.join(ROOT, "test", "workloads", "js_loop.js"), "2"],
        {"DD_PROFILING_OUTPUT_DIR": out})
    m = re.search(r"pid (\d+)", stdout)
    if m and os.path.lexists(perf_map_path(int(m.group(1)))):
        os.unlink(perf_map_path(int(m.group(1))))
    check(rc == 0, "node exit %d: %s" % (rc, stderr[-2000:]))
    check(MAP_WARNING not in stderr, "a warning about V8's map: %s" % stderr)
    files = profile_files(out)
    check(files, "node wrote no profile (stderr: %s)" % stderr[-2000:])
    profs = dump(files, stacks=True)
    ti = value_index(profs[0], "cpu-time")
    total = app_total(profs, ti)
    js = rooted = 0
    for p in profs:
        for st in p["stacks"]:
            fr = st["frames"]
            if fr and ("hotOuter" in fr[0] or "hotInner" in fr[0]):
                js += st["values"][ti]
                rooted += st["values"][ti] if fr[-1] == "_start" else 0
    share = 100.0 * js / total
    check(share >= 50, "%.1f%% of node's CPU in hotOuter/hotInner, expected >= 50%%" % share)
    check(rooted >= 0.5 * js, "only %.1f%% of the JavaScript CPU rooted at _start"
          % (100.0 * rooted / js))
    top = go_pprof_top(files[-1])
    check("hotOuter" in top or "hotInner" in top, "go tool pprof -top:\n%s" % top)
    return "JS functions %.1f%% of %.2f s, rooted %.1f%%" % (share, cpu, 100.0 * rooted / js)
