"""scripts/flamegraph: the page it writes, opened in headless Chromium, shows what the
profiles hold. Frame widths against go tool pprof's shares, zoom, search, the tooltip,
the icicle toggle, the thread and process filters (against pprof-dump's per-thread and
per-file totals), a screenshot's colours; and the script's own decoding: one warning per
bad file, never a traceback, the sample type chosen by name.

The page's test harness (scripts/flamegraph.html: a URL ending in #test=STEP;STEP...)
runs the steps at load and writes a snapshot after each into #test-result, which
chromium --dump-dom prints; frame geometry there is in fractions of the chart's width.
"""
import html
import json
import os
import random
import re
import shutil
import struct
import subprocess
import tempfile
import zlib

from itest import (ROOT, WORKLOADS, check, dump, profile_files, run_profiled, value_index)

FLAMEGRAPH = os.path.join(ROOT, "scripts", "flamegraph")
PYTHON = "/usr/bin/python3"
# The window of the DOM checks (wide: 1 px of the chart is under 0.1% of it) and of the
# screenshot (smaller: its PNG is decoded in Python, pixel by pixel).
DOM_WINDOW = "1400,900"
SHOT_WINDOW = (800, 450)
CHROMIUM_TIMEOUT_S = 60
# Widths against the profile's shares: the page lays frames out in percent of the chart,
# Chromium in 1/64 px; go tool pprof prints shares with two decimals.
SHARE_REL_TOL = 0.01
FULL_WIDTH_TOL = 1e-3


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


NO_CHROMIUM = "skipped: chromium not installed (scripts/install-deps installs it)"


def flamegraph(files, *args):
    """Runs scripts/flamegraph with Debian's Python: (exit status, page, stderr)."""
    r = subprocess.run([PYTHON, FLAMEGRAPH] + list(args) + list(files), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def page_data(page):
    """The JSON the page embeds (the merged tree)."""
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    check(m, "no data script in the page (%d bytes)" % len(page))
    return json.loads(m.group(1))


def write_page(ctx, files, *args):
    rc, page, err = flamegraph(files, *args)
    check(rc == 0, "scripts/flamegraph exit %d: %s" % (rc, err))
    check(err == "", "scripts/flamegraph wrote on stderr: %s" % err)
    path = os.path.join(ctx.dir, "flame.html")
    with open(path, "w") as f:
        f.write(page)
    return path, page_data(page)


def run_chromium(ctx, args):
    prof = tempfile.mkdtemp(prefix="chromium-", dir=ctx.dir)
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-extensions", "--user-data-dir=" + prof] + args
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=CHROMIUM_TIMEOUT_S, env=dict(os.environ, HOME=ctx.dir))
    check(r.returncode == 0, "chromium exit %d: %s" % (r.returncode, r.stderr.decode()[-1500:]))
    return r.stdout.decode(errors="replace")


def browse(ctx, page, steps):
    """The page's snapshots after load and after each step (its #test= harness)."""
    url = "file://%s#test=%s" % (page, ";".join(steps))
    dom = run_chromium(ctx, ["--window-size=" + DOM_WINDOW, "--dump-dom", url])
    m = re.search(r'<pre id="test-result">(.*?)</pre>', dom, re.S)
    check(m and m.group(1), "the page wrote no test result (%d bytes of DOM)" % len(dom))
    snaps = json.loads(html.unescape(m.group(1)))
    check(snaps[-1]["step"] != "error", "the page's harness failed: %s" % snaps[-1])
    check([s["step"] for s in snaps] == ["load"] + steps,
          "snapshots %s for steps %s" % ([s["step"] for s in snaps], steps))
    return snaps


def width(snap, name):
    """The fraction of the chart's width the frames named name take."""
    return sum(f[3] for f in snap["frames"] if f[0] == name)


def frames_named(snap, name):
    return [f for f in snap["frames"] if f[0] == name]


def go_cum_shares(files, sample_index):
    """cum% of every function in go tool pprof -top of files merged, as fractions."""
    env = dict(os.environ, HOME=tempfile.gettempdir(), PPROF_TMPDIR=tempfile.gettempdir())
    r = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=1000000",
                        "-sample_index=" + sample_index] + list(files),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, env=env)
    check(r.returncode == 0, "go tool pprof -top failed: %s" % r.stderr.decode())
    shares = {}
    for line in r.stdout.decode().splitlines():
        m = re.match(r"^\s*\S+\s+[\d.]+%\s+[\d.]+%\s+\S+\s+([\d.]+)%\s+(.+?)\s*$", line)
        if m:
            shares[m.group(2)] = float(m.group(1)) / 100
    return shares


def check_shares(snap, expected, what):
    """Each function's rendered width against its share (expected: name -> fraction)."""
    seen = {}
    for fn, share in expected.items():
        w = width(snap, fn)
        seen[fn] = w
        check(abs(w - share) <= SHARE_REL_TOL * share,
              "%s: %s's frames take %.4f of the chart, its share is %.4f (within %.0f%%)"
              % (what, fn, w, share, 100 * SHARE_REL_TOL))
    return seen


def check_zoom(before, after, fn):
    """after clicking fn's frame: it is the chart's width; it and its ancestors only."""
    z = frames_named(after, fn)
    check(len(z) >= 1, "no %s frame after clicking it" % fn)
    check(abs(z[0][3] - 1) <= FULL_WIDTH_TOL and abs(z[0][2]) <= FULL_WIDTH_TOL,
          "after a click on %s its frame is at %.4f, %.4f of the width; expected 0, 1"
          % (fn, z[0][2], z[0][3]))
    check(after["zoom"] != 0 and width(before, fn) < 1 - FULL_WIDTH_TOL,
          "%s was full width before the click (%.4f): the zoom proves nothing"
          % (fn, width(before, fn)))
    return z[0][3]


def check_search(snap, term, expected_share):
    """Frames are highlighted exactly when their name holds term; the share shown."""
    wrong = [f[0] for f in snap["frames"] if f[6] != (term.lower() in f[0].lower())]
    check(not wrong, "search %r: frames highlighted wrongly: %s" % (term, wrong[:10]))
    check(any(f[6] for f in snap["frames"]), "search %r highlights nothing" % term)
    check(snap["matched"] is not None, "search %r shows no matched share" % term)
    share = snap["matched"][1]
    check(abs(share - expected_share) <= SHARE_REL_TOL * expected_share,
          "search %r shows %.4f matched, the profile's share is %.4f"
          % (term, share, expected_share))
    return share


def png_pixels(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG (Chromium's)."""
    with open(path, "rb") as f:
        data = f.read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % path)
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _c, _f, interlace = hdr
    check(depth == 8 and ctype in (2, 6) and interlace == 0, "PNG header %s" % (hdr,))
    bpp = 3 if ctype == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        ft, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if ft == 1:
                line[x] = (line[x] + a) & 255
            elif ft == 2:
                line[x] = (line[x] + b) & 255
            elif ft == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def screenshot_colours(ctx, page):
    """Screenshot of the page: the fractions of its pixels in the program's warm
    colours and in libc's teal (scripts/flamegraph.html's PALETTE)."""
    shot = os.path.join(ctx.dir, "flame.png")
    run_chromium(ctx, ["--window-size=%d,%d" % SHOT_WINDOW, "--screenshot=" + shot,
                       "--hide-scrollbars", "file://" + page])
    check(os.path.exists(shot), "no screenshot written")
    w, h, bpp, rows = png_pixels(shot)
    check((w, h) == SHOT_WINDOW, "screenshot %dx%d, window %s" % (w, h, SHOT_WINDOW))
    warm = teal = 0
    for line in rows:
        for x in range(0, w * bpp, bpp):
            r, g, b = line[x], line[x + 1], line[x + 2]
            if r >= 200 and r - b >= 90 and g < r:
                warm += 1
            elif b >= 120 and g >= 120 and r + 50 <= g:
                teal += 1
    return warm / (w * h), teal / (w * h)


def test_flamegraph_of_cpu_split_in_chromium(ctx):
    """cpu_split (75% hot_a, 25% hot_b, in 4 burner threads), several profiles merged:
    in Chromium, each hot function's frames are as wide as its cum share from go tool
    pprof (within 1%); a click on hot_a makes it the chart's width, a click on the root
    unzooms; a search for hot_b highlights exactly the hot_b frames and shows its share;
    the tooltip names the frame with its value and share; a thread's filter shows that
    thread's total (pprof-dump's); the icicle toggle puts the root on top; the
    screenshot shows the program's and libc's colours."""
    if not chromium():
        return NO_CHROMIUM
    out = os.path.join(ctx.dir, "out")
    rc, _o, stderr, _cpu, _wall = run_profiled(
        [os.path.join(WORKLOADS, "cpu_split"), "4", "0.8"],
        {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_UPLOAD_PERIOD": "0.5"})
    check(rc == 0, "workload exit %d: %s" % (rc, stderr))
    files = profile_files(out)
    check(len(files) >= 2, "%d profiles; expected several to merge" % len(files))
    profs = dump(files)
    ti = value_index(profs[0], "cpu-time")
    total = sum(p["totals"][ti] for p in profs)
    go = go_cum_shares(files, "cpu-time")
    expected = {fn: go.get(fn, 0) for fn in ("hot_a", "hot_b", "worker")}
    check(expected["hot_a"] > 0.5 and expected["hot_b"] > 0.1, "go tool pprof shares %s" % expected)
    page, data = write_page(ctx, files)
    check(data["sampleType"] == "cpu-time" and len(data["files"]) == len(files),
          "page of %s from %d files" % (data["sampleType"], len(data["files"])))
    cats = {n: data["categories"][c] for n, c in zip(data["names"], data["cat"])}
    want = {"hot_a": "program", "worker": "program", "start_thread": "libc",
            "clone3": "libc", "[profiler]": "profiler"}
    check(all(cats.get(n) == c for n, c in want.items()),
          "colour categories %s, expected %s" % ({n: cats.get(n) for n in want}, want))
    # A burner thread: its total is pprof-dump's per-thread value.
    tids = {}
    for p in profs:
        for tid, t in p["threads"].items():
            if t["name"] == "burner-0":
                tids[tid] = tids.get(tid, 0) + t["values"][ti]
    check(len(tids) == 1, "burner-0 thread ids %s" % tids)
    tid, tid_total = next(iter(tids.items()))
    steps = ["hover:hot_a", "click:hot_a", "click:all", "search:hot_b", "thread:" + tid, "invert"]
    s = dict(zip(["load"] + steps, browse(ctx, page, steps)))
    load = s["load"]
    check(abs(load["total"] - total) <= 1e-6 * total,
          "shown total %d, the profiles' %d" % (load["total"], total))
    seen = check_shares(load, expected, "cpu_split")
    tip = s["hover:hot_a"]["tooltip"] or ""
    m = re.search(r"value: [\d.]+ (ms|s) \(([\d.]+)% of the total", tip)
    check(tip.startswith("hot_a") and m and abs(float(m.group(2)) / 100 - seen["hot_a"]) < 1e-4,
          "tooltip %r: expected hot_a, its value in ms or s and its share %.4f"
          % (tip, seen["hot_a"]))
    zw = check_zoom(load, s["click:hot_a"], "hot_a")
    check(not frames_named(s["click:hot_a"], "hot_b"), "hot_b still shown zoomed on hot_a")
    check(s["click:all"]["zoom"] == 0 and abs(width(s["click:all"], "hot_a") - seen["hot_a"]) < 1e-6,
          "a click on the root did not unzoom: %s" % s["click:all"]["frames"][:3])
    matched = check_search(s["search:hot_b"], "hot_b", expected["hot_b"])
    th = s["thread:" + tid]
    check(abs(th["total"] - tid_total) <= 0.01 * tid_total,
          "thread %s shows %d, pprof-dump's total for it is %d" % (tid, th["total"], tid_total))
    check(0.6 <= width(th, "hot_a") <= 0.9, "hot_a takes %.3f of thread %s" % (width(th, "hot_a"), tid))
    root_rows = [f[5] for snap in (load, s["invert"]) for f in snap["frames"] if f[0] == "all"]
    check(root_rows[0] >= 4 and root_rows[1] == 0,
          "root row %s before and after the icicle toggle: expected at the bottom, then 0"
          % root_rows)
    warm, teal = screenshot_colours(ctx, page)
    check(warm >= 0.03 and teal >= 0.02,
          "screenshot: %.1f%% of pixels in the program's colours, %.1f%% in libc's"
          % (100 * warm, 100 * teal))
    return ("%d files; widths hot_a %.4f (pprof %.4f) hot_b %.4f (%.4f) worker %.4f (%.4f); "
            "zoomed %.4f; search %.4f; thread %s %.3fs; screenshot warm %.1f%% teal %.1f%%"
            % (len(files), seen["hot_a"], expected["hot_a"], seen["hot_b"], expected["hot_b"],
               seen["worker"], expected["worker"], zw, matched, tid, th["total"] / 1e9,
               100 * warm, 100 * teal))


def test_flamegraph_merges_fork_children_and_filters_by_pid(ctx):
    """fork_sampled: a parent and 4 children, each burning CPU in child_work, a profile
    per process. The merged page in Chromium: child_work's width is its go tool pprof
    share; zoom and search work; selecting one pid (a child, then the parent) shows
    that pid's total from its own files (pprof-dump) within 1%; a screenshot shows the
    program's frames in their colours."""
    if not chromium():
        return NO_CHROMIUM
    out = os.path.join(ctx.dir, "out")
    rc, stdout, stderr, _cpu, _wall = run_profiled(
        [os.path.join(WORKLOADS, "fork_sampled"), "0.3", "4", "0.2", "0.05"],
        {"DD_PROFILING_OUTPUT_DIR": out})
    m = re.search(r"parent (\d+) pids ([\d,]+)", stdout)
    check(rc == 0 and m, "fork_sampled exit %d printed %r: %s" % (rc, stdout, stderr[-500:]))
    parent, children = m.group(1), m.group(2).split(",")
    per_pid = {}
    for pid in [parent] + children:
        fs = profile_files(out, pid)
        if fs:
            profs = dump(fs)
            ti = value_index(profs[0], "cpu-time")
            per_pid[pid] = sum(p["totals"][ti] for p in profs)
    check(parent in per_pid and len(per_pid) >= 3,
          "profiles of pids %s; expected the parent %s and children %s" % (sorted(per_pid), parent,
                                                                          children))
    child = max((p for p in per_pid if p != parent), key=lambda p: per_pid[p])
    files = profile_files(out)
    go = go_cum_shares(files, "cpu-time")
    # gcc may name it child_work.isra.0 (a clone with fewer arguments).
    work = [fn for fn in go if fn.split(".")[0] == "child_work"]
    check(len(work) == 1 and go[work[0]] > 0.5, "go tool pprof shares %s" % go)
    work = work[0]
    expected = {work: go[work]}
    page, data = write_page(ctx, files)
    pids = sorted({str(g[0]) for g in data["groups"]})
    check(pids == sorted(per_pid), "the page's pids %s, the files' %s" % (pids, sorted(per_pid)))
    steps = ["click:" + work, "search:child", "pid:" + child, "pid:" + parent]
    s = dict(zip(["load"] + steps, browse(ctx, page, steps)))
    load = s["load"]
    total = sum(per_pid.values())
    check(abs(load["total"] - total) <= 1e-6 * total,
          "shown total %d, the profiles' %d" % (load["total"], total))
    seen = check_shares(load, expected, "fork_sampled")
    check_zoom(load, s["click:" + work], work)
    matched = check_search(s["search:child"], "child", expected[work])
    shown = {}
    for pid in (child, parent):
        snap = s["pid:" + pid]
        shown[pid] = snap["total"]
        check(abs(snap["total"] - per_pid[pid]) <= 0.01 * per_pid[pid],
              "pid %s selected: the page shows %d, its files hold %d"
              % (pid, snap["total"], per_pid[pid]))
        check(snap["total"] < 0.9 * load["total"], "pid %s: the filter changed nothing" % pid)
    warm, _teal = screenshot_colours(ctx, page)
    check(warm >= 0.03, "screenshot: %.1f%% of pixels in the program's colours" % (100 * warm))
    return ("%d files of %d pids; %s %.4f (pprof %.4f); search %.4f; child %s %.1f ms "
            "(files %.1f), parent %s %.1f ms (files %.1f); screenshot warm %.1f%%"
            % (len(files), len(per_pid), work, seen[work], expected[work], matched,
               child, shown[child] / 1e6, per_pid[child] / 1e6, parent, shown[parent] / 1e6,
               per_pid[parent] / 1e6, 100 * warm))


def test_flamegraph_warns_once_per_bad_file(ctx):
    """Truncated gzip, random bytes, gzip of random bytes, text, an empty file, a missing
    file: one warning each naming the file, never a traceback; the good file's page
    still written (exit 0), no usable file at all exits non-zero. An unknown sample
    type lists those there are; --sample-type picks the column (cpu-samples, and
    alloc-space of an allocation profile, against pprof-dump's totals)."""
    out = os.path.join(ctx.dir, "out")
    # Two processes with the same columns: one allocates (alloc-space), one computes
    # (cpu-samples: the allocating one is too short for a sample).
    for argv in (["alloc_sites", "sites", "256"], ["cpu_split", "1", "0.3"]):
        rc, _o, stderr, _cpu, _wall = run_profiled(
            [os.path.join(WORKLOADS, argv[0])] + argv[1:],
            {"DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_ALLOCATION_ENABLED": "true"})
        check(rc == 0, "%s exit %d: %s" % (argv[0], rc, stderr))
    good = profile_files(out)
    check(len(good) == 2, "profiles %s, expected one per process" % good)
    with open(good[0], "rb") as f:
        blob = f.read()
    rnd = random.Random(27)
    bad = {"truncated.pprof": blob[:len(blob) // 2], "random.pprof": rnd.randbytes(4096),
           "random-gzip.pprof": zlib.compress(rnd.randbytes(4096), wbits=31),
           "text.pprof": b"not a profile at all\n", "empty.pprof": b""}
    paths = []
    for name, content in sorted(bad.items()):
        paths.append(os.path.join(ctx.dir, name))
        with open(paths[-1], "wb") as f:
            f.write(content)
    paths.append(os.path.join(ctx.dir, "missing.pprof"))
    rc, page, err = flamegraph(paths + good)
    lines = err.splitlines()
    check(rc == 0 and "Traceback" not in err, "exit %d with a good file: %s" % (rc, err))
    for p in paths:
        mine = [line for line in lines if p in line]
        check(len(mine) == 1 and "warning" in mine[0],
              "%s: expected one warning, got %s" % (os.path.basename(p), mine))
    check(len(lines) == len(paths), "%d stderr lines for %d bad files: %s" % (len(lines), len(paths), err))
    profs = dump(good)
    data = page_data(page)
    ti = value_index(profs[0], "cpu-time")
    cpu = sum(p["totals"][ti] for p in profs)
    check(sum(data["values"][2::3]) == cpu, "page total %d, cpu-time %d" % (sum(data["values"][2::3]), cpu))
    rc, page, err2 = flamegraph(paths)
    check(rc != 0 and "Traceback" not in err2 and "no usable profile" in err2 and page == "",
          "only bad files: exit %d, stdout %d bytes: %s" % (rc, len(page), err2))
    rc, page, err3 = flamegraph(good, "--sample-type", "wall-time")
    check(rc != 0 and "Traceback" not in err3 and "cpu-samples" in err3 and "alloc-space" in err3,
          "unknown sample type: exit %d: %s" % (rc, err3))
    totals = {}
    for st in ("cpu-samples", "alloc-space"):
        rc, page, err4 = flamegraph(good, "--sample-type", st)
        check(rc == 0 and err4 == "", "--sample-type %s: exit %d: %s" % (st, rc, err4))
        data = page_data(page)
        want = sum(p["totals"][value_index(p, st)] for p in profs)
        totals[st] = sum(data["values"][2::3])
        check(data["sampleType"] == st and totals[st] == want and want > 0,
              "--sample-type %s: page total %d, pprof-dump's %d" % (st, totals[st], want))
        names = set(data["names"])
        check(st != "alloc-space" or {"site_a", "site_b"} <= names,
              "alloc-space page without site_a and site_b: %s" % sorted(names)[:20])
    return "%d bad files, one warning each; cpu-samples %d, alloc-space %d bytes" % (
        len(paths), totals["cpu-samples"], totals["alloc-space"])
