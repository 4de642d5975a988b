#!/usr/bin/env python3
"""Sums up a timeline written by `neargnn train --trace FILE` (docs/scheduler.md).

    python3 eval/harness/trace_summary.py trace.json [--skip-epochs 1] [--gaps 10]

For the device thread and for the workers together it prints where their time went: each span
kind's share of the thread time and its mean per iteration. The device thread's time is that of
its epochs (not the caller's work between them), and its untraced time is its own bookkeeping
(marks, counters). The workers' time runs from their first span to their last, and their
iterations include any produced for an epoch that never ran. Then each epoch's length, how long a pool
took to start in it (workers go on from one epoch into the next, so only the first epoch, or
one after a failure or a load, starts one) and how long the device waited for the epoch's
first package; and the longest waits of the device thread for a package, with what the
workers were doing meanwhile.
"""

import argparse
import json
import sys
from collections import defaultdict


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


def breakdown(spans, tids, title):
    """Each span kind's share of the threads' time (first start to last end per thread)."""
    total, per_kind, count = 0.0, defaultdict(float), defaultdict(int)
    for tid in tids:
        mine = [s for s in spans if s[0] == tid]
        eps = [s for s in mine if s[1] == "epoch"]
        if eps:  # the device thread: its epochs only
            mine = [s for s in mine if any(e[2] <= s[2] <= e[2] + e[3] for e in eps)]
        if not mine:
            continue
        if eps:
            total += sum(e[3] for e in eps)
        else:
            total += max(s[2] + s[3] for s in mine) - mine[0][2]
        for s in mine:
            if s[1] == "epoch":  # encloses the device thread's other spans
                continue
            per_kind[s[1]] += s[3]
            count[s[1]] += 1
    if total <= 0:
        return
    # Every iteration has one forward on the device thread and one fetch on some worker.
    iters = count["forward"] if 0 in tids else count["fetch"]
    n = max(1, iters)
    print(f"{title}: {len(tids)} thread(s), {total / 1e3:.1f} thread-ms, {iters} iterations")
    print(f"  {'span':<12} {'share':>7} {'us/iter':>9}")
    for kind, us in sorted(per_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<12} {100 * us / total:6.1f}% {us / n:9.1f}")
    rest = total - sum(per_kind.values())
    print(f"  {'(untraced)':<12} {100 * rest / total:6.1f}% {rest / n:9.1f}")


def epochs(spans):
    device = [s for s in spans if s[0] == 0]
    eps = [s for s in device if s[1] == "epoch"]
    if not eps:
        return
    print("epochs: length, pool start in it, wait for its first package (ms)")
    for ep in eps:
        lo, hi = ep[2], ep[2] + ep[3]
        inside = [s for s in device if lo <= s[2] <= hi]
        start = sum(s[3] for s in inside if s[1] == "start")
        first = next((s for s in inside if s[1] == "take wait"), None)
        print(f"  {ep[4].get('epoch', '?'):>5} {ep[3] / 1e3:8.2f} {start / 1e3:7.2f} "
              f"{(first[3] / 1e3 if first else 0):7.2f}")


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
        what = ", ".join(f"{k} {v / (hi - lo):.1f}" for k, v in
                         sorted(busy.items(), key=lambda kv: -kv[1]))
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
    workers = sorted({s[0] for s in spans if s[0] > 0})
    breakdown(spans, [0], names.get(0, "device thread"))
    if workers:
        breakdown(spans, workers, "workers")
    epochs(spans)
    gaps(spans, a.gaps)


if __name__ == "__main__":
    main()
