"""Uploads to real intakes (issue 4): Datadog agent (TCP and unix socket), agentless,
Pyroscope, against scripts/intake_server.py on a free local port per test.

Each test checks what the intake received (every field and tag of PROTOCOL.md), that
each profile arrives exactly once (the uploaded pprof bodies are byte-identical to the
files the file exporter wrote in the same run), and what failures cost the process.
"""
import calendar
import glob
import hashlib
import json
import os
import re
import socket
import subprocess
import time

from itest import (free_port, PYTHON, ROOT, WORKLOADS, app_total, check, dump, profile_files, run_profiled,
                   value_index)

SERVER = os.path.join(ROOT, "scripts", "intake_server.py")
CPU_SPLIT = os.path.join(WORKLOADS, "cpu_split")
with open(os.path.join(ROOT, "VERSION")) as _f:
    VERSION = _f.read().strip()
RFC3339_NS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
WARNING = "libddprof: warning:"
HZ = "199"


class Intake:
    """scripts/intake_server.py in a subprocess, recording into its own directory."""

    def __init__(self, ctx, name, *args):
        self.dir = os.path.join(ctx.dir, name)
        port_file = self.dir + ".port"
        self.proc = subprocess.Popen(
            [PYTHON, SERVER, "--out", self.dir, "--port-file", port_file] + list(args),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file):
            if self.proc.poll() is not None:  # stderr is read only once it has ended
                raise AssertionError("intake server died: %s" % self.proc.stderr.read().decode())
            check(time.monotonic() < deadline, "intake server did not start in 10 s")
            time.sleep(0.02)
        with open(port_file) as f:
            self.port = int(f.read())
        self.url = "http://127.0.0.1:%d" % self.port

    def records(self):
        recs = []
        for path in sorted(glob.glob(os.path.join(self.dir, "[0-9]*.json"))):
            with open(path) as f:
                recs.append(json.load(f))
        return recs

    def part(self, rec, name):
        for p in rec["parts"]:
            if p["name"] == name:
                return os.path.join(self.dir, p["file"])
        raise AssertionError("request #%d has no part %r: %s" % (rec["seq"], name, rec["parts"]))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def rfc3339_ns(s):
    check(RFC3339_NS.match(s or ""), "%r is not RFC 3339 UTC with nanoseconds" % s)
    secs = calendar.timegm(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S"))
    return secs * 10**9 + int(s[20:29])


def parse_tags(s):
    tags = {}
    for t in s.split(","):
        check(":" in t, "tag %r of %r is not key:value" % (t, s))
        k, v = t.split(":", 1)
        tags.setdefault(k, v)
    return tags


def warnings(stderr):
    return [l for l in stderr.splitlines() if l.startswith(WARNING)]


def check_cpu(files, cpu):
    profs = dump(files)
    ti = value_index(profs[0], "cpu-time")
    total = app_total(profs, ti) / 1e9
    ratio = total / cpu
    check(abs(ratio - 1) <= 0.05, "uploaded cpu-time %.3f s vs kernel %.3f s: ratio %.3f, "
          "expected within 5%%" % (total, cpu, ratio))
    return profs, ratio


def check_same_profiles(uploaded, outdir):
    """The uploaded bodies are exactly the profiles the file exporter wrote: each
    profile arrived once, none is missing, none is extra."""
    files = profile_files(outdir)
    up = sorted(sha(f) for f in uploaded)
    written = sorted(sha(f) for f in files)
    check(len(set(up)) == len(up), "a profile was accepted more than once")
    check(up == written, "%d profiles accepted, %d written to files; they differ"
          % (len(up), len(files)))
    return files


def run_split(env, threads=2, secs=2.5, **kw):
    rc, out, err, cpu, wall = run_profiled([CPU_SPLIT, str(threads), str(secs)], env, **kw)
    check(rc == 0, "workload exit %d: %s" % (rc, err))
    return out, err, cpu, wall


def test_upload_datadog_agent_each_period_with_every_field(ctx):
    out = os.path.join(ctx.dir, "out")
    with Intake(ctx, "agent") as intake:
        _o, err, cpu, wall = run_split({
            "DD_TRACE_AGENT_URL": intake.url, "DD_PROFILING_OUTPUT_DIR": out,
            "DD_PROFILING_UPLOAD_PERIOD": "1", "DD_PROFILING_CPU_HZ": HZ,
            "DD_SERVICE": "svc-it", "DD_ENV": "test", "DD_VERSION": "1.2.3",
            "DD_TAGS": "team:prof,k2=v2"})
        recs = intake.records()
    check(not warnings(err), "warnings: %s" % err)
    check(int(wall) <= len(recs) <= int(wall) + 2,
          "%d uploads in %.2f s at 1 s periods, expected one per period plus one at exit"
          % (len(recs), wall))
    spans, runtime_ids, pids = [], set(), set()
    for r in recs:
        where = "request #%d" % r["seq"]
        check(r["path"] == "/profiling/v1/input" and r["status"] == 200 and not r["error"],
              "%s: %s %s -> %s (%s)" % (where, r["method"], r["path"], r["status"], r["error"]))
        h = r["headers"]
        check(h.get("dd-evp-origin") == "libddprof", "%s: DD-EVP-ORIGIN %r" % (where, h))
        check(h.get("dd-evp-origin-version") == VERSION, "%s: DD-EVP-ORIGIN-VERSION %r"
              % (where, h.get("dd-evp-origin-version")))
        check("dd-api-key" not in h, "%s: the agent got an API key header" % where)
        check(re.fullmatch(r"[0-9a-f-]{32,}", h.get("datadog-container-id", "0" * 64)),
              "%s: Datadog-Container-ID %r" % (where, h.get("datadog-container-id")))
        check(h["content-type"].startswith("multipart/form-data; boundary="),
              "%s: Content-Type %r" % (where, h["content-type"]))
        parts = {p["name"]: p for p in r["parts"]}
        check(sorted(parts) == ["event", "profile.pprof"], "%s: parts %s" % (where, parts))
        check(parts["event"]["filename"] == "event.json" and
              parts["event"]["content_type"] == "application/json", "%s: event part %s"
              % (where, parts["event"]))
        check(parts["profile.pprof"]["content_type"] == "application/octet-stream",
              "%s: profile part %s" % (where, parts["profile.pprof"]))
        ev = r["event"]
        check(ev["attachments"] == ["profile.pprof"] and ev["family"] == "native" and
              ev["version"] == "4", "%s: event %s" % (where, ev))
        tags = parse_tags(ev["tags_profiler"])
        expected = {"service": "svc-it", "env": "test", "version": "1.2.3",
                    "host": socket.gethostname(), "language": "native",
                    "profiler_version": VERSION, "team": "prof", "k2": "v2"}
        for k, v in expected.items():
            check(tags.get(k) == v, "%s: tag %s is %r, expected %r (tags_profiler %r)"
                  % (where, k, tags.get(k), v, ev["tags_profiler"]))
        check(UUID4.match(tags.get("runtime-id", "")), "%s: runtime-id %r is not a UUID v4"
              % (where, tags.get("runtime-id")))
        runtime_ids.add(tags["runtime-id"])
        pids.add(tags.get("process_id"))
        start, end = rfc3339_ns(ev["start"]), rfc3339_ns(ev["end"])
        check(start < end, "%s: start %s not before end %s" % (where, ev["start"], ev["end"]))
        prof = dump([intake.part(r, "profile.pprof")])[0]
        check(prof["time_nanos"] == start and prof["time_nanos"] + prof["duration_nanos"] == end,
              "%s: event start/end %s..%s do not bound the pprof's %d + %d"
              % (where, ev["start"], ev["end"], prof["time_nanos"], prof["duration_nanos"]))
        check([str(p) for p in prof["process_ids"]] == [tags.get("process_id")],
              "%s: process_id tag %s vs pprof labels %s"
              % (where, tags.get("process_id"), prof["process_ids"]))
        spans.append((start, end))
    check(len(runtime_ids) == 1 and len(pids) == 1,
          "one process, yet runtime-ids %s and process_ids %s" % (runtime_ids, pids))
    spans.sort()
    for (s0, e0), (s1, _e1) in zip(spans, spans[1:]):
        check(s1 >= e0, "profiles overlap: one ends at %d, the next starts at %d" % (e0, s1))
    files = check_same_profiles([intake.part(r, "profile.pprof") for r in recs], out)
    _profs, ratio = check_cpu([intake.part(r, "profile.pprof") for r in recs], cpu)
    return "%d uploads in %.2fs (= %d files), cpu ratio %.3f" % (len(recs), wall, len(files),
                                                                 ratio)


def test_upload_pyroscope_each_period_with_labels(ctx):
    out = os.path.join(ctx.dir, "out")
    with Intake(ctx, "pyroscope") as intake:
        _o, err, cpu, wall = run_split({
            "PYROSCOPE_SERVER_ADDRESS": intake.url + "/", "DD_PROFILING_OUTPUT_DIR": out,
            "DD_PROFILING_UPLOAD_PERIOD": "1", "DD_PROFILING_CPU_HZ": HZ,
            "PYROSCOPE_APPLICATION_NAME": "it.app", "PYROSCOPE_TAGS": "region=eu",
            "DD_TAGS": "team:prof,region:us", "PYROSCOPE_AUTH_TOKEN": "tok-123",
            "PYROSCOPE_TENANT_ID": "tenant-1"})
        recs = intake.records()
    check(not warnings(err), "warnings: %s" % err)
    check(int(wall) <= len(recs) <= int(wall) + 2,
          "%d uploads in %.2f s at 1 s periods" % (len(recs), wall))
    bounds = []
    for r in recs:
        where = "request #%d" % r["seq"]
        q = r["query"]
        check(r["path"] == "/ingest" and r["status"] == 200 and not r["error"],
              "%s: %s -> %s (%s)" % (where, r["path"], r["status"], r["error"]))
        # PYROSCOPE_TAGS first; DD_TAGS adds the keys not taken yet.
        check(q.get("name") == "it.app{region=eu,team=prof}", "%s: name %r"
              % (where, q.get("name")))
        check("name=it.app%7Bregion%3Deu%2Cteam%3Dprof%7D&" in r["raw_query"],
              "%s: name not URL-encoded: %s" % (where, r["raw_query"]))
        check(q.get("format") == "pprof" and q.get("spyName") == "libddprof",
              "%s: query %s" % (where, q))
        check(r["headers"].get("authorization") == "Bearer tok-123" and
              r["headers"].get("x-scope-orgid") == "tenant-1",
              "%s: headers %s" % (where, r["headers"]))
        check([p["name"] for p in r["parts"]] == ["profile", "sample_type_config"],
              "%s: parts %s" % (where, r["parts"]))
        with open(intake.part(r, "sample_type_config")) as f:
            check("cpu-samples" in json.load(f), "%s: sample_type_config" % where)
        frm, until = int(q["from"]), int(q["until"])
        prof = dump([intake.part(r, "profile")])[0]
        check(frm == prof["time_nanos"] // 10**9 and
              until == (prof["time_nanos"] + prof["duration_nanos"]) // 10**9,
              "%s: from/until %d/%d do not bound the pprof (%d + %d ns)"
              % (where, frm, until, prof["time_nanos"], prof["duration_nanos"]))
        bounds.append((frm, until))
    bounds.sort()
    for (f0, u0), (f1, _u1) in zip(bounds, bounds[1:]):
        check(f1 >= u0, "from/until overlap: %d..%d then %d" % (f0, u0, f1))
    check_same_profiles([intake.part(r, "profile") for r in recs], out)
    _profs, ratio = check_cpu([intake.part(r, "profile") for r in recs], cpu)
    return "%d uploads in %.2fs, cpu ratio %.3f" % (len(recs), wall, ratio)


def test_upload_agent_over_unix_socket(ctx):
    sock = os.path.join(ctx.dir, "apm.socket")
    with Intake(ctx, "unix", "--unix", sock) as intake:
        _o, err, cpu, _wall = run_split({"DD_TRACE_AGENT_URL": "unix://" + sock,
                                         "DD_PROFILING_CPU_HZ": HZ}, threads=1, secs=0.6)
        recs = intake.records()
    check(not warnings(err), "warnings: %s" % err)
    # The TCP port was never given to the agent: whatever arrived came by the socket.
    check(len(recs) == 1, "%d requests over %s, expected the one at exit" % (len(recs), sock))
    r = recs[0]
    check(r["path"] == "/profiling/v1/input" and r["status"] == 200 and r["event"],
          "request: %s %s" % (r["path"], r["status"]))
    _profs, ratio = check_cpu([intake.part(r, "profile.pprof")], cpu)
    return "1 upload over the unix socket, cpu ratio %.3f" % ratio


def test_fork_child_uploads_under_its_own_runtime_id(ctx):
    script = ("import os, time\n"
              "def burn(s):\n"
              "    t = time.process_time()\n"
              "    while time.process_time() - t < s: pass\n"
              "burn(0.3)\n"
              "pid = os.fork()\n"
              "burn(0.3)\n"
              "if pid: os.waitpid(pid, 0)\n")
    with Intake(ctx, "fork") as intake:
        rc, _o, err, _cpu, _wall = run_profiled([PYTHON, "-c", script],
                                                {"DD_TRACE_AGENT_URL": intake.url,
                                                 "DD_PROFILING_CPU_HZ": HZ})
        recs = intake.records()
    check(rc == 0 and not warnings(err), "exit %d, stderr %s" % (rc, err))
    ids = {}
    for r in recs:
        tags = parse_tags(r["event"]["tags_profiler"])
        ids.setdefault(tags["process_id"], set()).add(tags["runtime-id"])
    check(len(ids) == 2 and all(len(v) == 1 for v in ids.values()) and
          len(set.union(*ids.values())) == 2,
          "expected 2 processes with one runtime-id each, distinct; got %s" % ids)
    return "parent and child: %s" % sorted(ids)


def test_intake_down_costs_the_app_nothing(ctx):
    """Nothing listens on the agent's port: run time as with file export only."""
    port = free_port()
    base_env = {"DD_PROFILING_UPLOAD_PERIOD": "0.5", "DD_PROFILING_CPU_HZ": HZ}
    walls = {"file": [], "down": []}
    err_down = ""
    for i in range(3):  # interleaved, best of three: the machine's cores are shared
        for kind in ("file", "down"):
            env = dict(base_env, DD_PROFILING_OUTPUT_DIR=os.path.join(ctx.dir, "%s%d" % (kind, i)))
            if kind == "down":
                env["DD_TRACE_AGENT_URL"] = "http://127.0.0.1:%d" % port
            # One burner: the uploader thread has the other core, as on a real host.
            _o, err, cpu, wall = run_split(env, threads=1, secs=1.2)
            walls[kind].append(wall)
            if kind == "down":
                err_down = err
                # The other exporter is unaffected: a file every period, and at exit.
                files = profile_files(env["DD_PROFILING_OUTPUT_DIR"])
                check(len(files) >= int(wall / 0.5), "%d files in %.2f s at 0.5 s periods"
                      % (len(files), wall))
    base, down = min(walls["file"]), min(walls["down"])
    # A profiler that waited on the network would cost seconds (retries, timeouts).
    check(down - base <= max(0.25, 0.1 * base),
          "with the intake down the run took %.3f s, %.3f s with file export only" % (down, base))
    w = warnings(err_down)
    check(1 <= len(w) <= 2, "expected one or two warning lines, got %d:\n%s" % (len(w), err_down))
    check("dropped" in w[0] and "127.0.0.1:%d" % port in w[0], "warning: %s" % w[0])
    return "wall %.3fs vs %.3fs file-only; %d warning: %s" % (down, base, len(w), w[0][:120])


def test_slow_intake_delays_exit_at_most_the_flush_timeout(ctx):
    """The intake answers after 30 s; DD_PROFILING_EXIT_FLUSH_TIMEOUT=1 bounds the exit."""
    with Intake(ctx, "slow", "--delay", "30") as intake:
        results = []
        for period in ("1", "60"):  # a periodic upload in flight at exit; only the final
            base = run_split({"DD_PROFILING_OUTPUT_DIR": os.path.join(ctx.dir, "b" + period)},
                             threads=1, secs=1.4)[3]
            _o, err, _cpu, wall = run_split({
                "DD_TRACE_AGENT_URL": intake.url, "DD_PROFILING_UPLOAD_PERIOD": period,
                "DD_PROFILING_EXIT_FLUSH_TIMEOUT": "1"}, threads=1, secs=1.4)
            extra = wall - base
            check(extra <= 1.0 + 0.4, "period %s: exit took %.2f s longer than without upload "
                  "(%.2f vs %.2f s); the flush timeout is 1 s" % (period, extra, wall, base))
            check(len(warnings(err)) <= 3, "too many warnings: %s" % err)
            results.append("period %s: +%.2fs" % (period, extra))
        check(len(intake.records()) >= 2, "the slow intake saw %d requests"
              % len(intake.records()))
    return ", ".join(results)


def test_500_then_200_profile_arrives_once(ctx):
    out = os.path.join(ctx.dir, "out")
    with Intake(ctx, "retry", "--statuses", "500,200") as intake:
        _o, err, _cpu, _wall = run_split({
            "DD_TRACE_AGENT_URL": intake.url, "DD_PROFILING_OUTPUT_DIR": out,
            "DD_PROFILING_UPLOAD_PERIOD": "1", "DD_PROFILING_CPU_HZ": HZ}, threads=1, secs=1.5)
        recs = intake.records()
    check(not warnings(err), "a retried success must not warn: %s" % err)
    key = lambda r: (parse_tags(r["event"]["tags_profiler"])["runtime-id"], r["event"]["start"])
    check(recs and recs[0]["status"] == 500, "first answer: %s" % [r["status"] for r in recs])
    accepted = [key(r) for r in recs if r["status"] == 200]
    check(len(accepted) == len(set(accepted)), "a profile was accepted twice: %s" % accepted)
    check(key(recs[0]) in accepted, "the profile answered 500 never arrived: %s" % (key(recs[0]),))
    check(len(recs) == len(accepted) + 1, "%d requests for %d profiles, expected one retry"
          % (len(recs), len(accepted)))
    check_same_profiles([intake.part(r, "profile.pprof") for r in recs if r["status"] == 200], out)
    return "statuses %s" % [r["status"] for r in recs]


def test_413_and_400_are_not_retried(ctx):
    results = []
    for status in ("413", "400"):
        out = os.path.join(ctx.dir, "out" + status)
        with Intake(ctx, "reject" + status, "--statuses", status) as intake:
            _o, err, _cpu, _wall = run_split({
                "DD_TRACE_AGENT_URL": intake.url, "DD_PROFILING_OUTPUT_DIR": out,
                "DD_PROFILING_UPLOAD_PERIOD": "0.5", "DD_PROFILING_CPU_HZ": HZ},
                threads=1, secs=1.2)
            recs = intake.records()
        files = profile_files(out)
        keys = {(r["event"]["tags_profiler"], r["event"]["start"]) for r in recs}
        check(len(recs) == len(files) == len(keys) and len(recs) >= 2,
              "HTTP %s: %d requests for %d profiles (%d distinct): retried?"
              % (status, len(recs), len(files), len(keys)))
        w = warnings(err)
        check(len(w) == 1 and "rejected" in w[0] and status in w[0],
              "HTTP %s: expected one 'rejected' warning, got:\n%s" % (status, err))
        results.append("%s: %d requests = %d profiles" % (status, len(recs), len(files)))
    return "; ".join(results)


API_KEY = "0123456789abcdefSECRETKEY0123456"


def test_agentless_refuses_plain_http_and_never_logs_the_key(ctx):
    with Intake(ctx, "agentless") as intake:
        _o, err, _cpu, _wall = run_split({
            "DD_PROFILING_AGENTLESS": "true", "DD_API_KEY": API_KEY,
            "DD_PROFILING_AGENTLESS_URL": intake.url + "/api/v2/profile",
            "DD_PROFILING_LOG_LEVEL": "debug", "DD_PROFILING_UPLOAD_PERIOD": "0.3"},
            threads=1, secs=0.8)
        recs = intake.records()
    check(not recs, "%d requests reached the intake over plain http" % len(recs))
    refusal = [l for l in warnings(err) if "DD_PROFILING_AGENTLESS_URL" in l]
    check(len(refusal) == 1 and "https" in refusal[0] and "DD_API_KEY" in refusal[0],
          "expected one clear refusal naming the variable, https and DD_API_KEY:\n%s" % err)
    check(API_KEY not in err, "the API key appears in stderr")
    # Over https (to a closed port: the request is built, with the key, then fails).
    out = os.path.join(ctx.dir, "out")
    _o, err2, _cpu, _wall = run_split({
        "DD_PROFILING_AGENTLESS": "true", "DD_API_KEY": API_KEY,
        "DD_PROFILING_AGENTLESS_URL": "https://127.0.0.1:%d/api/v2/profile" % free_port(),
        "DD_PROFILING_OUTPUT_DIR": out, "DD_PROFILING_LOG_LEVEL": "debug",
        "DD_PROFILING_UPLOAD_PERIOD": "0.3"}, threads=1, secs=0.8)
    check("datadog-agentless" in err2 and "dropped" in err2,
          "the https agentless exporter did not try: %s" % err2[-2000:])
    check(API_KEY not in err2, "the API key appears in stderr at debug level")
    for f in profile_files(out):
        with open(f, "rb") as fh:
            check(API_KEY.encode() not in fh.read(), "the API key is in %s" % f)
    return "refused: %s" % refusal[0][len(WARNING):].strip()[:140]


def test_http_agent_upload_loads_no_libcurl(ctx):
    """http:// intakes use libddprof's own HTTP client: libcurl's ~30 libraries would be
    mapped in the application (and copied by every fork) for nothing."""
    with Intake(ctx, "agent") as intake:
        _o, err, _cpu, _wall = run_split({"DD_TRACE_AGENT_URL": intake.url,
                                          "DD_PROFILING_UPLOAD_PERIOD": "1",
                                          "DD_PROFILING_LOG_LEVEL": "debug"},
                                         threads=1, secs=1.5)
        recs = intake.records()
    check(len(recs) >= 1 and all(r["status"] == 200 for r in recs),
          "uploads: %s" % [(r["status"], r["error"]) for r in recs])
    check(all(r["headers"].get("user-agent") == "libddprof/" + VERSION for r in recs),
          "User-Agent: %s" % [r["headers"].get("user-agent") for r in recs])
    check("loaded libcurl" not in err, "an http:// upload loaded libcurl: %s" % err[-2000:])
    return "%d uploads over plain HTTP, libcurl never loaded" % len(recs)


def test_output_dir_alone_uploads_nothing_and_loads_no_libcurl(ctx):
    """The default agent exporter stays off when only files are asked for, and a process
    that never uploads never loads libcurl."""
    out = os.path.join(ctx.dir, "out")
    _o, err, _cpu, _wall = run_split({"DD_PROFILING_OUTPUT_DIR": out,
                                      "DD_PROFILING_LOG_LEVEL": "debug"}, threads=1, secs=0.3)
    check("datadog-agent" not in err and "loaded libcurl" not in err,
          "file export alone started HTTP: %s" % err[-2000:])
    # The exporters are made by the uploader thread as it starts, which /bin/true never
    # needs (it ends before its first sample): the configuration says which.
    rc, _o, err, _cpu, _wall = run_profiled(["/bin/true"], {"DD_PROFILING_LOG_LEVEL": "debug"})
    check(rc == 0 and "agent=1 (http://localhost:8126)" in err,
          "default exporter: %s" % err[-2000:])
    check("loaded libcurl" not in err, "/bin/true loaded libcurl: %s" % err[-2000:])
    return "no HTTP for file export; /bin/true never loads libcurl"
