"""Servers users run, started as they start them: nginx as root, its master keeping root
and its workers switched to nobody."""
import os
import signal
import subprocess
import threading
import time
import http.client

from itest import PRELOAD, check, clean_env, dump, files_by_pid, free_port, children_of
from tests_programs import shares

NGINX = "/usr/sbin/nginx"

NGINX_CONF = """
daemon off;
master_process on;
worker_processes 2;
user nobody nogroup;
pid %(dir)s/nginx.pid;
error_log stderr info;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %(dir)s/body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fastcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    gzip on;
    gzip_comp_level 9;
    gzip_min_length 0;
    gzip_types text/plain;
    server {
        listen 127.0.0.1:%(port)d reuseport;
        root %(dir)s/www;
        default_type text/plain;
    }
}
"""

LOAD_S = 3.0


def cpu_s(pid):
    """utime + stime of a live process, in seconds (/proc)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(port, until, served):
    """Requests for the page, gzip-encoded (nginx compresses it at level 9 each time),
    a connection each: with reuseport the kernel spreads them over both workers."""
    while time.time() < until:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/page.txt", headers={"Accept-Encoding": "gzip"})
        r = conn.getresponse()
        r.read()
        if r.status == 200:
            served.append(1)
        conn.close()


def test_nginx_workers_switched_to_nobody_are_profiled(ctx):
    """nginx started as root with 2 workers that switch to nobody, serving a 256 KiB
    page gzip-compressed for 3 s to two clients, then stopped gracefully (SIGQUIT). The
    output directory is root's (0755): every worker's profiles reach it (through the
    spool the master empties), holding the worker's CPU within 10% of the kernel's count,
    and nothing of the profiler is in nginx's error log."""
    if os.geteuid() != 0:
        return "skipped: needs root (nginx's workers switch to nobody)"
    if not os.path.exists(NGINX):
        raise AssertionError("nginx missing: scripts/install-deps installs nginx-light")
    d = ctx.dir
    os.chmod(d, 0o755)  # nobody passes through to the page
    os.makedirs(os.path.join(d, "www"))
    words = ("profile sample stack frame unwind symbol upload period worker master "
             "%d\n")
    with open(os.path.join(d, "www", "page.txt"), "w") as f:
        i = 0
        while f.tell() < 256 << 10:
            f.write(words % i)
            i += 1
    os.chmod(os.path.join(d, "www", "page.txt"), 0o644)
    port = free_port()
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF % {"dir": d, "port": port})
    out = os.path.join(d, "out")
    os.makedirs(out)
    os.chmod(out, 0o755)
    env = clean_env({"LD_PRELOAD": PRELOAD, "DD_PROFILING_OUTPUT_DIR": out,
                     "DD_PROFILING_UPLOAD_PERIOD": "1",
                     "XDG_CACHE_HOME": os.path.join(d, "cache")})
    p = subprocess.Popen([NGINX, "-p", d, "-e", "stderr", "-c", conf], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 10
        workers = []
        while time.time() < deadline and len(workers) < 2:
            time.sleep(0.05)
            workers = children_of(p.pid)
        check(len(workers) == 2, "nginx workers: %s" % workers)
        served = []
        until = time.time() + LOAD_S
        clients = [threading.Thread(target=load, args=(port, until, served)) for _ in range(2)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        truth = {w: cpu_s(w) for w in workers}
        p.send_signal(signal.SIGQUIT)
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    check(p.returncode == 0, "nginx exited %d: %s" % (p.returncode, err[-800:]))
    check("libddprof" not in err, "in nginx's error log: %s"
          % [l for l in err.splitlines() if "libddprof" in l][:3])
    by_pid = files_by_pid(out)
    spool = os.path.join(out, ".libddprof-spool", "65534")
    left = os.listdir(spool) if os.path.isdir(spool) else None
    check(left == [], "the spool for nobody: %r (expected made, then emptied)" % left)
    results = []
    for w in workers:
        check(truth[w] >= 0.2, "the load did not reach worker %d: %.3f s of CPU (%s)"
              % (w, truth[w], truth))
        check(w in by_pid, "worker %d has no profile: %s" % (w, sorted(by_pid)))
        got = shares(dump(by_pid[w], stacks=True))[0] / 1e9
        check(0.9 * truth[w] <= got <= 1.1 * truth[w] + 0.04,
              "worker %d's profiles hold %.3f s, the kernel counted %.3f s"
              % (w, got, truth[w]))
        results.append("%d: %d profiles, %.2f/%.2f s" % (w, len(by_pid[w]), got, truth[w]))
    return "%d requests; error log clean; spool emptied; %s" % (len(served), "; ".join(results))
