"""micro.json of peers.py: with a before build only, the handler's, the trie's and the
serializer's micro-benchmarks of both builds, alternated.
"""
import os
import random
import subprocess

from peers_common import (BASE_DIR, BENCH, QUICK, base_env, before_after, fields,
    print_before_after, write)


MICRO_TIMEOUT = 300  # seconds; a --quick run takes 0.5-6 s


def micro_lines(out):
    """{"name arg": value} from lines "name arg value ..." (bench_handler: unwinder, depth,
    ns per sample; bench_trie: mode, threads, puts/s), without comments and the kernel's
    signal delivery (the same code in both builds)."""
    vals = {}
    for line in out.splitlines():
        p = line.split()
        if len(p) >= 3 and not p[0].startswith("#") and p[0] != "signal-delivery":
            vals["%s %s" % (p[0], p[1])] = float(p[2])
    return vals


def micro_serialize(out):
    """bench_serialize's cold and warm times (ms) from its "key value ..." line."""
    f = fields(out)
    return {"cold": f["cold_ms"], "warm": f["warm_ms"]}


# The micro-benchmarks compared: name, program, its parser, the unit (and the factor from
# the program's values to it), which way is better, the label of a key, the keys compared.
# The trie's figures at 1 and 2 threads only: at the --quick size, more threads than the 2
# cores give rates that swing by several times from run to run (thread start-up and
# scheduling, not the trie).
MICRO = (("handler", "bench_handler", micro_lines, "ns", 1, "lower",
          lambda key: "handler %s, depth %s" % tuple(key.split()), lambda key: True),
         ("trie", "bench_trie", micro_lines, "M puts/s", 1e-6, "higher",
          lambda key: "trie %s, %s thread(s)" % tuple(key.split()),
          lambda key: int(key.split()[1]) <= 2),
         ("serialize", "bench_serialize", micro_serialize, "ms", 1, "lower",
          lambda key: "serialization, %s" % key, lambda key: True))


def bench_micro(resdir):
    """The micro-benchmarks (scripts/bench/run runs the current build's at full size for
    their tables) of both builds, alternated: each round runs both builds' program in
    random order, at the --quick size (0.5-6 s a run where the full size takes 3-60 s,
    so that rounds are many and a round's two runs are seconds apart). Their figure:
    the median over the rounds of each build's value, paired: their ratio in a round."""
    rounds = 3 if QUICK else 8
    dirs = {"libddprof": BENCH, "libddprof-before": os.path.join(BASE_DIR, "build", "bench")}
    res = {"rounds": rounds, "size": "--quick", "before_after": []}
    for name, prog, parse, unit, scale, better, label, compared in MICRO:
        paths = {k: os.path.join(d, prog) for k, d in dirs.items()}
        if not os.path.exists(paths["libddprof-before"]):
            print("  %s: the before build has no %s: left out" % (name, prog))
            continue
        runs = {k: [] for k in paths}
        for _ in range(rounds):
            for k in random.sample(list(paths), len(paths)):
                out = subprocess.run([paths[k], "--quick"], env=base_env(),
                                     stdout=subprocess.PIPE, check=True,
                                     timeout=MICRO_TIMEOUT).stdout.decode()
                runs[k].append(parse(out))
        after, before = runs["libddprof"], runs["libddprof-before"]
        for key in after[0]:
            if not compared(key) or not all(key in r for r in after + before):
                continue
            a, b = [r[key] * scale for r in after], [r[key] * scale for r in before]
            res["before_after"].append(before_after(
                "%s.%s" % (name, key.replace(" ", ".")), label(key), a, b,
                [x / y for x, y in zip(a, b)], better, unit=unit))
    write(resdir, "micro.json", res)
    print_before_after(res["before_after"])
