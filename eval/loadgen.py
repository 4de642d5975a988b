#!/usr/bin/env python3
"""Open-loop load generator for `neargnn serve` (KServe v2 infer requests), standard library only.

    python3 eval/loadgen.py --url http://127.0.0.1:8000/v2/models/cora --rate 500 --duration 10 \
        --dataset data/cora [--hub-share 0.1] [--connections 32] [--processes 2] [--json]

tests/cli_serve.sh drives the server with it for a few seconds. Benchmarks use eval/loadgen.c
(`loadgen`, docs/eval.md), which reaches rates that Python threads cannot.

Requests arrive as a Poisson process at --rate per second, fixed in advance, whatever the server
does: a request's latency is measured from its *intended* send time, so a slow server that keeps
the connections busy is charged for the queueing it causes (no coordinated omission). Each of
--connections threads holds one keep-alive connection and sends the next request due; when every
connection is busy the next request waits, and that wait counts. A send that starts more than
1 ms after its intended time is counted as late: many late sends mean the generator itself, not
the server, was the limit (add --connections or --processes).

Nodes: --dataset reads the degrees from the dataset's indptr.npy (a small .npy reader, memory
mapped; on graphs above --sample nodes a random sample of them is ranked) and calls the top
--hub-top share of them by degree hubs; each request asks for a hub with probability --hub-share,
else for an ordinary node (--mix degree instead picks nodes in proportion to their degree, the
natural power-law mix). --nodes FILE / --hubs FILE give the lists directly (one id a line);
--max-node N picks uniformly from [0, N) (no hubs). Latency is reported for all requests, for hub
and ordinary ones (by the node lists), and by the path the engine reports ("parameters": {"hub"}).

Reports p50, p90, p99, p99.9 and max latency (ms), the offered and achieved rates, and error
counts by status; --json prints one JSON object instead. Exit status 0, or 2 on a usage error.
"""
import argparse
import ast
import bisect
import http.client
import itertools
import json
import mmap
import multiprocessing
import os
import random
import struct
import sys
import threading
import time
import urllib.parse


# ---- nodes ----

def read_npy_1d(path):
    """Maps a 1-D little-endian int32/int64 .npy file; returns (memoryview of ints, count)."""
    f = open(path, "rb")
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if mm[:6] != b"\x93NUMPY":
        raise ValueError("%s: not a .npy file" % path)
    major = mm[6]
    if major == 1:
        hlen = struct.unpack("<H", mm[8:10])[0]
        start = 10
    else:
        hlen = struct.unpack("<I", mm[8:12])[0]
        start = 12
    header = mm[start:start + hlen].decode("latin1")
    d = ast.literal_eval(header)  # numpy writes a Python dict literal
    if d.get("fortran_order") or len(d["shape"]) != 1:
        raise ValueError("%s: expected a 1-D array, got %r" % (path, d))
    code = {"<i8": "q", "<i4": "i", "=i8": "q", "=i4": "i"}.get(d["descr"])
    if not code:
        raise ValueError("%s: dtype %s is not int32/int64" % (path, d["descr"]))
    off = start + hlen
    view = memoryview(mm)[off:off + d["shape"][0] * struct.calcsize(code)].cast(code)
    return view, d["shape"][0]


def read_list(path):
    with open(path) as f:
        return [int(line.split()[0]) for line in f if line.strip() and not line.startswith("#")]


def pick_nodes(args, rng):
    """(hubs, ordinary, weights-or-None): the node lists requests draw from."""
    if args.nodes or args.hubs:
        ordinary = read_list(args.nodes) if args.nodes else []
        hubs = read_list(args.hubs) if args.hubs else []
        return hubs, ordinary, None
    if args.dataset:
        indptr, n1 = read_npy_1d(os.path.join(args.dataset, "indptr.npy"))
        nodes = n1 - 1
        ids = range(nodes) if nodes <= args.sample else rng.sample(range(nodes), args.sample)
        ranked = sorted(ids, key=lambda v: indptr[v + 1] - indptr[v], reverse=True)
        k = max(1, int(round(len(ranked) * args.hub_top)))
        hubs, ordinary = ranked[:k], ranked[k:]
        weights = None
        if args.mix == "degree":
            weights = [max(1, indptr[v + 1] - indptr[v]) for v in ranked]
        return hubs, ordinary, weights
    return [], list(range(args.max_node)), None


# ---- one process: a schedule, connections, results ----

def percentiles(xs):
    if not xs:
        return None
    xs = sorted(xs)

    def q(p):  # nearest rank
        return xs[min(len(xs) - 1, max(0, int(-(-p * len(xs) // 1)) - 1))]

    return {"count": len(xs), "p50": q(0.50), "p90": q(0.90), "p99": q(0.99), "p999": q(0.999),
            "max": xs[-1], "mean": sum(xs) / len(xs)}


def run_process(args, rate, seed):
    rng = random.Random(seed)
    hubs, ordinary, weights = pick_nodes(args, rng)
    hub_set = set(hubs)
    ranked = hubs + ordinary
    cum = list(itertools.accumulate(weights)) if weights else None
    if not ranked:
        raise SystemExit("loadgen: no nodes to ask for")

    def one_node():
        if cum:
            return ranked[bisect.bisect_left(cum, rng.random() * cum[-1])]
        if hubs and (not ordinary or rng.random() < args.hub_share):
            return rng.choice(hubs)
        return rng.choice(ordinary)

    params = {}
    if args.fanouts:
        params["fanouts"] = [int(x) for x in args.fanouts.split(",")]
        params["seed"] = args.seed
    outputs = [{"name": o} for o in args.outputs.split(",")]
    schedule = []  # (intended offset s, body bytes, is hub)
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= args.duration:
            break
        ids = [one_node() for _ in range(args.nodes_per_request)]
        req = {"inputs": [{"name": "node_ids", "datatype": "INT64", "shape": [len(ids)],
                           "data": ids}], "outputs": outputs}
        if params:
            req["parameters"] = params
        schedule.append((t, json.dumps(req).encode(), any(v in hub_set for v in ids)))

    url = urllib.parse.urlsplit(args.url)
    path = url.path.rstrip("/") + "/infer"
    results = []  # (intended offset, latency s, status, node class hub, engine hub, late)
    lock = threading.Lock()
    nxt = itertools.count()
    start = time.monotonic() + 0.2  # every thread connected before the first arrival

    def worker():
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=args.timeout)
        local = []
        while True:
            k = next(nxt)
            if k >= len(schedule):
                break
            off, body, is_hub = schedule[k]
            due = start + off
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            late = time.monotonic() - due > 0.001
            status, engine_hub = 0, None
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                status = resp.status
                if status == 200:
                    tail = data[data.rfind(b'"parameters"'):]
                    engine_hub = b'"hub":true' in tail
            except (OSError, http.client.HTTPException):
                status = -1
                conn.close()
                conn = http.client.HTTPConnection(url.hostname, url.port or 80,
                                                  timeout=args.timeout)
            local.append((off, time.monotonic() - due, status, is_hub, engine_hub, late))
        conn.close()
        with lock:
            results.extend(local)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.connections)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    end = time.monotonic()
    return {"results": results, "scheduled": len(schedule), "wall": end - start,
            "hubs": len(hubs), "ordinary": len(ordinary)}


def _run_process_star(a):
    return run_process(*a)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True,
                    help="the model's URL, http://HOST:PORT/v2/models/NAME (as serve prints it)")
    ap.add_argument("--rate", type=float, required=True, help="offered requests per second")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of arrivals")
    ap.add_argument("--warmup", type=float, default=0.0,
                    help="seconds at the start left out of the statistics")
    ap.add_argument("--connections", type=int, default=32,
                    help="keep-alive connections (threads) per process")
    ap.add_argument("--processes", type=int, default=1,
                    help="generator processes, each with rate/P (Python threads share one core)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds before a request fails")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--dataset", help="dataset folder: hubs by degree from indptr.npy")
    src.add_argument("--nodes", help="file of ordinary node ids, one a line")
    ap.add_argument("--hubs", help="file of hub node ids, one a line (with --nodes)")
    ap.add_argument("--max-node", type=int, default=0,
                    help="without --dataset or --nodes: ids uniform in [0, N)")
    ap.add_argument("--hub-top", type=float, default=0.01,
                    help="--dataset: share of the nodes, by degree, that are hubs")
    ap.add_argument("--hub-share", type=float, default=0.1,
                    help="share of requests that ask for a hub")
    ap.add_argument("--mix", choices=["share", "degree"], default="share",
                    help="share: --hub-share; degree: nodes in proportion to their degree")
    ap.add_argument("--sample", type=int, default=1000000,
                    help="--dataset: most nodes ranked by degree (a random sample above that)")
    ap.add_argument("--nodes-per-request", type=int, default=1)
    ap.add_argument("--outputs", default="class", help="comma-separated: logits,embedding,class")
    ap.add_argument("--fanouts", help="sample with these fanouts (targets outwards) instead of "
                                      "the full neighbourhood")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.rate <= 0 or args.duration <= 0 or args.connections < 1 or args.processes < 1:
        ap.error("--rate, --duration, --connections and --processes must be positive")
    if not (args.dataset or args.nodes or args.hubs or args.max_node > 0):
        ap.error("give --dataset DIR, --nodes FILE or --max-node N")
    if args.hubs and not args.nodes and args.hub_share < 1:
        ap.error("--hubs needs --nodes (or --hub-share 1)")

    jobs = [(args, args.rate / args.processes, args.seed * 1000003 + p)
            for p in range(args.processes)]
    if args.processes == 1:
        parts = [run_process(*jobs[0])]
    else:
        with multiprocessing.get_context("fork").Pool(args.processes) as pool:
            parts = pool.map(_run_process_star, jobs)
    results = [r for p in parts for r in p["results"] if r[0] >= args.warmup]
    span = args.duration - args.warmup
    wall = max(p["wall"] for p in parts)
    ok = [r for r in results if r[2] == 200]
    errors = {}
    for r in results:
        if r[2] != 200:
            key = "connection" if r[2] == -1 else str(r[2])
            errors[key] = errors.get(key, 0) + 1
    ms = lambda rs: percentiles([r[1] * 1e3 for r in rs])
    report = {
        "url": args.url,
        "offered_rate": args.rate,
        "scheduled": sum(p["scheduled"] for p in parts),
        "measured": len(results),
        "ok": len(ok),
        "achieved_rate": len(ok) / span if span > 0 else 0.0,
        "duration_s": args.duration,
        "wall_s": wall,
        "errors": errors,
        "late_sends": sum(1 for r in results if r[5]),
        "connections": args.connections * args.processes,
        "hub_nodes": parts[0]["hubs"],
        "latency_ms": {
            "all": ms(ok),
            "hub": ms([r for r in ok if r[3]]),
            "ordinary": ms([r for r in ok if not r[3]]),
        },
        "engine_path_latency_ms": {
            "hub": ms([r for r in ok if r[4]]),
            "ordinary": ms([r for r in ok if r[4] is False]),
        },
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print("offered %.1f/s  achieved %.1f/s  ok %d of %d  errors %s  late sends %d" % (
        report["offered_rate"], report["achieved_rate"], report["ok"], report["measured"],
        errors or "none", report["late_sends"]))
    for name, p in list(report["latency_ms"].items()) + [
            ("engine:" + k, v) for k, v in report["engine_path_latency_ms"].items()]:
        if p:
            print("%-16s n %7d  p50 %8.3f  p90 %8.3f  p99 %8.3f  p99.9 %8.3f  max %8.3f ms" % (
                name, p["count"], p["p50"], p["p90"], p["p99"], p["p999"], p["max"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
