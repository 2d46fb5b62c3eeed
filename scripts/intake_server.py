#!/usr/bin/python3
"""A local profile intake speaking the Datadog and Pyroscope protocols (PROTOCOL.md).

Used by the integration tests (test/integration/tests_upload.py) and by `make demo`.
Standard library only (Debian's /usr/bin/python3).

Endpoints (POST):
  /profiling/v1/input   Datadog agent
  /api/v2/profile       Datadog agentless intake
  /ingest               Grafana Pyroscope
Every request is recorded into --out as <seq>.json (method, path, query, headers,
multipart parts with their headers, the parsed event.json, the status answered,
arrival time) plus one file per part, <seq>.<part name>, holding its bytes. Files are
written under a temporary name and renamed, so a reader never sees half of one.

usage:
  intake_server.py --out DIR [--port N] [--port-file F] [--unix PATH]
                   [--statuses 500,200] [--delay SECONDS]
  intake_server.py --summary DIR      print one line per recorded request

--statuses is the sequence of HTTP statuses answered, request after request; the last
one repeats (default 200). --delay waits that long before answering each request (the
request is recorded on arrival). --port 0 picks a free port; --port-file receives it.
"""
import argparse
import json
import os
import re
import socketserver
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROTOCOLS = {
    "/profiling/v1/input": "datadog-agent",
    "/api/v2/profile": "datadog-agentless",
    "/ingest": "pyroscope",
}
MAX_BODY = 64 << 20  # refuse bigger bodies (413) rather than hold them in memory


class State:
    def __init__(self, out, statuses, delay):
        self.out = out
        self.statuses = statuses
        self.delay = delay
        self.lock = threading.Lock()
        self.seq = 0

    def next(self):
        """(sequence number, status to answer) of a new request."""
        with self.lock:
            seq = self.seq
            self.seq += 1
        return seq, self.statuses[min(seq, len(self.statuses) - 1)]


def parse_params(value):
    """'form-data; name="a"; filename="b"' -> ('form-data', {'name': 'a', ...})."""
    items = [p.strip() for p in value.split(";")]
    params = {}
    for item in items[1:]:
        if "=" in item:
            k, v = item.split("=", 1)
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] == '"':
                v = v[1:-1]
            params[k.strip().lower()] = v
    return items[0].lower(), params


def parse_multipart(body, content_type):
    """List of (headers dict, bytes) of a multipart/form-data body; raises ValueError."""
    kind, params = parse_params(content_type)
    if kind != "multipart/form-data" or "boundary" not in params:
        raise ValueError("not multipart/form-data with a boundary: %r" % content_type)
    delim = b"--" + params["boundary"].encode()
    chunks = body.split(delim)
    if len(chunks) < 3 or not chunks[-1].startswith(b"--"):
        raise ValueError("no closing boundary")
    parts = []
    for chunk in chunks[1:-1]:
        if not chunk.startswith(b"\r\n") or not chunk.endswith(b"\r\n"):
            raise ValueError("part not framed by CRLF")
        head, sep, data = chunk[2:-2].partition(b"\r\n\r\n")
        if not sep:
            raise ValueError("part without a blank line after its headers")
        headers = {}
        for line in head.decode("latin-1").split("\r\n"):
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        parts.append((headers, data))
    return parts


def safe_name(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80] or "part"


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real intakes
    server_version = "libddprof-intake/1"

    def log_message(self, fmt, *args):  # quiet; also unix sockets have no address
        pass

    def answer(self, status, text):
        body = (json.dumps({"status": status, "message": text}) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/info":  # the Datadog agent's discovery endpoint
            return self.answer(200, "libddprof local intake")
        return self.answer(404, "unknown path")

    def do_POST(self):
        state = self.server.state
        arrival = time.time()
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            return self.answer(413, "body too large")
        body = self.rfile.read(length)
        seq, status = state.next()
        rec = {
            "seq": seq,
            "time": arrival,
            "method": "POST",
            "path": url.path,
            "protocol": PROTOCOLS.get(url.path, "unknown"),
            "query": {k: v[0] if len(v) == 1 else v
                      for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()},
            "raw_query": url.query,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body_bytes": len(body),
            "parts": [],
            "event": None,
            "error": None,
            "status": status,
            "delay": state.delay,
        }
        try:
            for headers, data in parse_multipart(body, self.headers.get("Content-Type", "")):
                _, disp = parse_params(headers.get("content-disposition", ""))
                name = disp.get("name", "")
                fname = "%06d.%s" % (seq, safe_name(name))
                write_atomic(os.path.join(state.out, fname), data)
                rec["parts"].append({"name": name, "filename": disp.get("filename"),
                                     "content_type": headers.get("content-type"),
                                     "size": len(data), "file": fname})
                if name == "event":
                    rec["event"] = json.loads(data.decode())
        except ValueError as e:  # json.JSONDecodeError is a ValueError too
            rec["error"] = str(e)
        write_atomic(os.path.join(state.out, "%06d.json" % seq),
                     json.dumps(rec, indent=1, sort_keys=True).encode())
        if state.delay > 0:
            time.sleep(state.delay)
        self.answer(status, rec["error"] or "recorded as %d" % seq)


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        sock, _ = self.socket.accept()
        return sock, ("unix", 0)  # BaseHTTPRequestHandler wants a (host, port)


def summary(directory):
    recs = []
    for name in sorted(os.listdir(directory)):
        if re.fullmatch(r"\d+\.json", name):
            with open(os.path.join(directory, name)) as f:
                recs.append(json.load(f))
    for r in recs:
        ev = r.get("event") or {}
        sizes = ",".join("%s=%dB" % (p["name"], p["size"]) for p in r["parts"])
        if r["protocol"].startswith("datadog"):
            what = "start=%s end=%s" % (ev.get("start"), ev.get("end"))
            tags = dict(t.split(":", 1) for t in ev.get("tags_profiler", "").split(",") if ":" in t)
            what += " service=%s runtime-id=%s" % (tags.get("service"), tags.get("runtime-id"))
        else:
            q = r["query"]
            what = "name=%s from=%s until=%s" % (q.get("name"), q.get("from"), q.get("until"))
        print("#%d %s %s -> HTTP %d  %s  [%s]" % (r["seq"], r["protocol"], r["path"],
                                                  r["status"], what, sizes))
    print("%d requests" % len(recs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--unix")
    ap.add_argument("--statuses", default="200")
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--summary")
    a = ap.parse_args()
    if a.summary:
        summary(a.summary)
        return 0
    if not a.out:
        ap.error("--out is required")
    os.makedirs(a.out, exist_ok=True)
    state = State(a.out, [int(s) for s in a.statuses.split(",") if s.strip()] or [200],
                  a.delay)
    servers = []
    tcp = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    tcp.daemon_threads = True
    servers.append(tcp)
    if a.unix:
        if os.path.exists(a.unix):
            os.unlink(a.unix)
        servers.append(UnixServer(a.unix, Handler))
    for s in servers:
        s.state = state
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    port = tcp.server_address[1]
    if a.port_file:
        write_atomic(a.port_file, str(port).encode())
    print("intake listening on 127.0.0.1:%d%s, recording into %s"
          % (port, " and " + a.unix if a.unix else "", a.out), flush=True)
    try:
        tcp.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
