#!/usr/bin/env python3
"""Sums up a timeline written by `neargnn train --trace FILE` (docs/scheduler.md).

    python3 eval/harness/trace_summary.py trace.json [--skip-epochs 1] [--gaps 10]

For the device thread and for the workers together it prints where their time went: each span
kind's share of the thread time and its mean per iteration. The device thread's time is that of
its epochs (not the caller's work between them, which the epoch list shows), and its untraced
time is its own bookkeeping (marks, counters). The workers' time runs from their first span to
their last, and their iterations include any produced for an epoch that never ran. Then each
epoch's length, how long a pool took to start in it (workers go on from one epoch into the
next, so only the first epoch, or one after a failure or a load, starts one), how long the
device waited for the epoch's first package and the caller's time before the epoch; and the
longest waits of the device thread for a package, with what the workers were doing meanwhile.
"""

import argparse
import json
import sys
from bisect import bisect_right
from collections import defaultdict


# Spans recorded inside another of their thread's (a slot's growth inside its fetch): listed, but
# not counted twice.
NESTED = {"slot grow": "fetch"}


def load(path):
    with open(path) as f:
        doc = json.load(f)
    names, spans = {}, []
    for e in doc.get("traceEvents", []):
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X":
            spans.append((e["tid"], e["name"], float(e["ts"]), float(e["dur"]), e.get("args", {})))
    spans.sort(key=lambda s: s[2])
    return names, spans


def window(spans, skip_epochs):
    """The spans from the start of epoch `skip_epochs` on (by the device thread's epoch spans)."""
    starts = [s[2] for s in spans if s[0] == 0 and s[1] == "epoch"]
    if skip_epochs <= 0 or not starts:
        return spans
    if skip_epochs >= len(starts):
        sys.exit(f"trace_summary: --skip-epochs {skip_epochs} skips every one of the "
                 f"{len(starts)} epochs")
    t0 = starts[skip_epochs]
    return [s for s in spans if s[2] >= t0]


def spread(mine):
    """From a thread's first span's start to its last span's end."""
    return max(s[2] + s[3] for s in mine) - mine[0][2]


def device_epochs(device):
    """The device thread's epoch spans, each with the device spans that start inside it, in one
    pass over the spans (sorted by start)."""
    eps = [s for s in device if s[1] == "epoch"]
    starts = [e[2] for e in eps]
    inside = [[] for _ in eps]
    for s in device:
        k = bisect_right(starts, s[2]) - 1
        if s[1] != "epoch" and k >= 0 and s[2] <= eps[k][2] + eps[k][3]:
            inside[k].append(s)
    return list(zip(eps, inside))


def breakdown(threads, title):
    """Each span kind's share of the threads' time. `threads` lists each thread's time (ms) and
    its spans."""
    total, per_kind, count = 0.0, defaultdict(float), defaultdict(int)
    for time, mine in threads:
        total += time
        for s in mine:
            per_kind[s[1]] += s[3]
            count[s[1]] += 1
    if total <= 0:
        return
    # Every iteration has one forward on the device thread and one fetch on some worker.
    iters = count["forward"] or count["fetch"]
    n = max(1, iters)
    print(f"{title}: {len(threads)} thread(s), {total / 1e3:.1f} thread-ms, {iters} iterations")
    print(f"  {'span':<12} {'share':>7} {'us/iter':>9}")
    for kind, us in sorted(per_kind.items(), key=lambda kv: -kv[1]):
        inside = f"  (inside {NESTED[kind]}, {count[kind]} times)" if kind in NESTED else ""
        print(f"  {kind:<12} {100 * us / total:6.1f}% {us / n:9.1f}{inside}")
    rest = total - sum(us for kind, us in per_kind.items() if kind not in NESTED)
    print(f"  {'(untraced)':<12} {100 * rest / total:6.1f}% {rest / n:9.1f}")
    # The sampler's rate: sampled edges over the time spent sampling, per core (sample spans
    # carry their edges since the trace recorded them).
    edges = sum(s[4].get("edges", 0) for _, mine in threads for s in mine if s[1] == "sample")
    if edges and per_kind["sample"] > 0:
        print(f"  sampler: {edges / count['sample']:.0f} edges per iteration, "
              f"{edges / per_kind['sample']:.2f} M sampled edges/s per core")


def epochs(by_epoch):
    if not by_epoch:
        return
    print("epochs: length, pool start in it, wait for its first package, the caller's time "
          "before it since the last epoch's end (ms)")
    last_end = None
    for ep, inside in by_epoch:
        start = sum(s[3] for s in inside if s[1] == "start")
        first = next((s for s in inside if s[1] == "take wait"), None)
        before = f"{(ep[2] - last_end) / 1e3:7.2f}" if last_end is not None else f"{'-':>7}"
        last_end = ep[2] + ep[3]
        print(f"  {ep[4].get('epoch', '?'):>5} {ep[3] / 1e3:8.2f} {start / 1e3:7.2f} "
              f"{(first[3] / 1e3 if first else 0):7.2f} {before}")


def gaps(spans, count):
    takes = sorted((s for s in spans if s[0] == 0 and s[1] == "take wait"), key=lambda s: -s[3])
    if not takes or count <= 0:
        return
    print(f"the device thread's {count} longest waits for a package:")
    for t in takes[:count]:
        lo, hi = t[2], t[2] + t[3]
        busy = defaultdict(float)
        for s in spans:
            if s[0] > 0 and s[2] < hi and s[2] + s[3] > lo:
                busy[s[1]] += min(hi, s[2] + s[3]) - max(lo, s[2])
        what = ", ".join(f"{k} {v / (hi - lo):.1f}" + (f" (inside {NESTED[k]})" if k in NESTED else "")
                         for k, v in sorted(busy.items(), key=lambda kv: -kv[1]))
        print(f"  iter {t[4].get('iter', '?'):>6} at {lo / 1e3:9.2f} ms: {t[3] / 1e3:7.2f} ms; "
              f"workers busy meanwhile (threads): {what or 'none'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="the JSON file of neargnn train --trace")
    ap.add_argument("--skip-epochs", type=int, default=0,
                    help="leave out the first N epochs (warm-up)")
    ap.add_argument("--gaps", type=int, default=10, help="longest device waits to list")
    a = ap.parse_args(argv)
    names, spans = load(a.trace)
    if not spans:
        sys.exit(f"trace_summary: {a.trace} holds no spans")
    spans = window(spans, a.skip_epochs)
    by_tid = defaultdict(list)
    for s in spans:
        by_tid[s[0]].append(s)
    # The device thread's time is that of its epochs; a worker's runs from its first span to its
    # last.
    by_epoch = device_epochs(by_tid.get(0, []))
    if by_epoch:
        device = [(sum(e[3] for e, _ in by_epoch), [s for _, inside in by_epoch for s in inside])]
    else:
        device = [(spread(by_tid[0]), by_tid[0])] if 0 in by_tid else []
    breakdown(device, names.get(0, "device thread"))
    workers = [(spread(by_tid[t]), by_tid[t]) for t in sorted(by_tid) if t > 0]
    if workers:
        breakdown(workers, "workers")
    epochs(by_epoch)
    gaps(spans, a.gaps)


if __name__ == "__main__":
    main()
