"""report.py's sections of the C micro-benchmarks that scripts/bench/run runs: the
handler's cost per sample, the stack trie's puts and pprof serialization.
"""
import os

from report_common import fmt


def handler_section(path):
    rows = []
    header = ""
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                header = line[1:].strip()
                continue
            parts = line.split()
            if len(parts) >= 4:
                rows.append(parts)
    out = ["## Handler cost per sample", "",
           "What one sample costs inside the signal handler: unwind the interrupted stack "
           "and record it in the stack trie (`scripts/bench/bench_handler.c`). Same "
           "recursion, captured once, unwound and recorded 200k times; median of 7 runs. "
           "`fp`: frame-pointer unwinder on code with frame pointers (the baseline); "
           "`dwarf`: the DWARF CFI unwinder on the same stack; `dwarf-nofp`: the DWARF "
           "unwinder on the same recursion built without frame pointers; "
           "`dwarf-nofp-no-table`: the same before any unwind table is built (a process "
           "whose profiler thread has not started yet), every frame's rule read from the "
           "module's `.eh_frame_hdr` in memory (`agent/unwind/boot_cfi.c`; 4000 walks, ratio "
           "against `fp` measured alongside). The kernel's "
           "signal delivery to a no-op handler is shown for scale (every profiler pays "
           "it). Target: < 2 us at depth 10 with DWARF.", ""]
    if header:
        out += ["Unwind tables of this process: %s." % header, ""]
    out += ["| unwinder | depth | frames | ns per sample | ratio vs fp |",
            "|---|---|---|---|---|"]
    for name, depth, ns, ratio, *rest in rows:
        if name == "signal-delivery":
            continue
        frames = rest[0] if rest else ""
        out.append("| %s | %s | %s | %.0f | %.2f |" % (name, depth, frames, float(ns),
                                                       float(ratio)))
    for name, depth, ns, ratio, *rest in rows:
        if name == "signal-delivery":
            out += ["", "Kernel signal delivery + return (raise to a no-op handler): "
                    "%.0f ns." % float(ns)]
    return "\n".join(out) + "\n"


def trie_section(path):
    data = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3:
                data[(parts[0], int(parts[1]))] = float(parts[2])
    threads = sorted({t for _, t in data})
    out = ["## Stack trie", "",
           "Puts per second through `profiles_record` (what the signal handler calls), "
           "stacks of 16 pcs (`scripts/bench/bench_trie.c`). `existing`: each thread "
           "re-records 64 stacks it recorded before (lookups and atomic adds only, the "
           "steady state); `new`: every put is a stack never seen (allocation + CAS); "
           "`existing, trie only`: as `existing` but `trie_put` and the node's counters "
           "alone, without the profile's counters shared by all threads (writer count, "
           "totals), to show what those cost. The "
           "same total number of puts is split over the threads; median of 5 runs. This "
           "machine has %d cores, so more threads than that cannot go faster; the "
           "`scaling` columns are puts/s relative to 1 thread." % os.cpu_count(), "",
           "| threads | existing puts/s | scaling | new puts/s | scaling | "
           "existing, trie only | scaling |", "|---|---|---|---|---|---|---|"]
    for t in threads:
        cells = []
        for mode in ("existing", "new", "existing-trie"):
            v, v1 = data.get((mode, t)), data.get((mode, 1))
            cells += [fmt(v and v / 1e6, "%.2f M"), fmt(v and v1 and v / v1, "%.2f")]
        out.append("| %d | %s |" % (t, " | ".join(cells)))
    return "\n".join(out) + "\n"


def serialize_section(path):
    with open(path) as f:
        parts = f.read().split()
    d = dict(zip(parts[0::2], parts[1::2]))
    out = ["## Serialization", "",
           "Time for the uploader thread (never an application thread) to turn a profile "
           "of %s distinct stacks (12 pcs each, from %s distinct pcs of the program's own "
           "code, 8 threads) into gzip-compressed pprof: `pprof_build` = symbolize, "
           "encode, gzip (`scripts/bench/bench_serialize.c`). Cold: a new symbolizer "
           "(the first profile of a process); warm: the same symbolizer again (later "
           "profiles). Median of 3." % (d.get("stacks"), d.get("pool")), "",
           "| stacks | locations | cold (ms) | warm (ms) | pprof raw (KiB) | gzip (KiB) |",
           "|---|---|---|---|---|---|",
           "| %s | %s | %s | %s | %.0f | %.0f |" % (
               d.get("stacks"), d.get("locations"), d.get("cold_ms"), d.get("warm_ms"),
               int(d.get("raw_bytes", 0)) / 1024, int(d.get("gz_bytes", 0)) / 1024)]
    return "\n".join(out) + "\n"
