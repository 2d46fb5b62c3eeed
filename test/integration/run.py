#!/usr/bin/python3
"""Integration tests: real programs under LD_PRELOAD=build/libddprof.so (or the build
DDPROF_TEST_LIB names: see itest.py).

Collects every test_* function of the tests_*.py modules next to this file (helpers in
itest.py) and runs them one by one, each with a fresh temporary directory.

usage: run.py [-k substring]... [-v] [--keep]
Prints one line per test (PASS, FAIL, or SKIP: a test returns "skipped: why" when this
machine cannot run it) and ends with "integration: N passed, N failed[, N skipped]".
"""
import glob
import importlib
import os
import shutil
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import itest  # noqa: E402


def collect():
    tests = []
    # DDPROF_TEST_MODULES: another directory of tests_*.py (scripts/test-guards plants
    # a test that skips there).
    here = os.environ.get("DDPROF_TEST_MODULES") or os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    for path in sorted(glob.glob(os.path.join(here, "tests_*.py"))):
        mod = importlib.import_module(os.path.basename(path)[:-3])
        for name, fn in sorted(vars(mod).items()):
            if name.startswith("test_") and callable(fn):
                tests.append((name, fn))
    return tests


def sanitizer_reports():
    """Reports of sanitized builds (make asan points ASan's and UBSan's log_path into
    $DDPROF_TEST_SANITIZER_LOGS): every file there is one process's report. Returns
    their text, and removes them, so that each is charged to the test that ran."""
    logs = os.environ.get("DDPROF_TEST_SANITIZER_LOGS")
    if not logs or not os.path.isdir(logs):
        return ""
    text = ""
    for path in sorted(glob.glob(os.path.join(logs, "*"))):
        with open(path, errors="replace") as f:
            text += "%s:\n%s\n" % (os.path.basename(path), f.read())
        os.unlink(path)
    return text


# A test that takes longer than this has hung: it fails (SIGALRM raises in whatever it
# waits for) and the run goes on, instead of waiting for CI's own limit.
TEST_DEADLINE_S = int(os.environ.get("DDPROF_TEST_DEADLINE", "300"))


# make check: every test is required, so a test that skips (it lacks root, a package)
# fails instead.
REQUIRE_ALL = os.environ.get("DDPROF_TEST_REQUIRE_ALL") == "1"


class TestHung(Exception):
    pass


def on_alarm(_sig, _frame):
    raise TestHung("still running after %d s (DDPROF_TEST_DEADLINE)" % TEST_DEADLINE_S)


def main():
    signal.signal(signal.SIGALRM, on_alarm)
    # -k may be given several times: a test runs when its name holds any of them.
    sels = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "-k"]
    for path in (itest.LIB, itest.DUMP):
        if not os.path.exists(path):
            print("integration: missing %s (run make)" % path)
            print("integration: 0 passed, 1 failed")
            return 1
    # --keep: a failing test's directory (its profiles, its workload's files) is left
    # for a look instead of removed.
    keep = "--keep" in sys.argv
    passed = failed = skipped = 0
    for name, fn in collect():
        if sels and not any(sel in name for sel in sels):
            continue
        ctx = itest.Ctx()
        t0 = time.monotonic()
        try:
            signal.alarm(TEST_DEADLINE_S)
            try:
                info = fn(ctx)
            finally:
                signal.alarm(0)
            report = sanitizer_reports()
            if report:
                raise itest.TestFailure("sanitizer report:\n" + report[:4000])
            if isinstance(info, str) and info.startswith("skipped"):
                # Reported as what it is, never as a pass; where every test is
                # required (make check), a skip fails.
                if REQUIRE_ALL:
                    raise itest.TestFailure("%s, and DDPROF_TEST_REQUIRE_ALL is set" % info)
                skipped += 1
                print("integration: SKIP %s (%.1fs) %s" % (name, time.monotonic() - t0, info))
            else:
                passed += 1
                print("integration: PASS %s (%.1fs) %s" % (name, time.monotonic() - t0,
                                                          info or ""))
        except Exception as e:  # noqa: BLE001 - report every failure, keep going
            report = sanitizer_reports()
            if report:
                e = itest.TestFailure("%s\nsanitizer report:\n%s" % (e, report[:4000]))
            failed += 1
            print("integration: FAIL %s (%.1fs): %s" % (name, time.monotonic() - t0, e))
            if keep:
                print("integration: kept %s" % ctx.dir)
                ctx.dir = None
            if itest.VERBOSE or not isinstance(e, itest.TestFailure):
                traceback.print_exc()
        finally:
            ctx.close()
        sys.stdout.flush()
    print("integration: %d passed, %d failed" % (passed, failed)
          + (", %d skipped" % skipped if skipped else ""))
    shutil.rmtree(itest.CACHE_HOME, ignore_errors=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
