#!/usr/bin/env python3
"""The PyTorch + PyG server-style loop that `neargnn serve` is compared with (issue 21).

One process, as a simple PyTorch model server runs: requests (one node each) arrive by a
Poisson process at --rate per second; the loop takes every request that has arrived (at most
--max-batch), builds their full-neighbour receptive field with torch operations on the CPU
(eval/baselines/pyg_reference.py's block builder, fanout -1 per hop), copies the input rows to
the GPU, runs the SAGEConv model and waits for the logits. A request's latency runs from its
arrival (its intended send time: queueing counts) to the end of its batch. --hub-share of the
requests go to the --hub-top share of nodes with the longest rows, as eval/loadgen.py sends them.
Reports p50/p90/p99/p99.9 overall and for hub and ordinary nodes, and the achieved rate, as JSON.

    python3 eval/baselines/pyg_serve.py --dataset DIR --fanouts -1,-1 --hidden 256 --rate 200 \
        --seconds 10 [--json OUT]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyg_reference as ref  # noqa: E402


def quantiles(values):
    if not values:
        return {}
    v = sorted(values)
    return {f"p{q}": ref.percentile(v, q) * 1e3 for q in (50, 90, 99, 99.9)}


def main(argv=None):
    p = argparse.ArgumentParser(prog="pyg_serve", description=__doc__.split("\n")[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--fanouts", default="-1,-1", help="hops from the targets outwards")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--max-batch", type=int, default=256)
    p.add_argument("--hub-share", type=float, default=0.1)
    p.add_argument("--hub-top", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json")
    a = p.parse_args(argv)
    import numpy as np
    import torch
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ds = ref.load_dataset(a.dataset, "none")
    fanouts = ref.parse_int_list(a.fanouts, "fanouts")
    dims = [ds["dim"]] + [a.hidden] * (len(fanouts) - 1) + [ds["classes"]]
    convs = ref.build_model(dims).to(dev).eval()
    rng = np.random.default_rng(a.seed)
    deg = (ds["indptr"][1:] - ds["indptr"][:-1]).numpy()
    n_hub = max(1, int(a.hub_top * ds["nodes"]))
    hubs = np.argpartition(-deg, n_hub - 1)[:n_hub]
    total = a.warmup + a.seconds
    n_req = int(rng.poisson(a.rate * total))
    arrivals = np.sort(rng.uniform(0.0, total, n_req))
    is_hub = rng.uniform(size=n_req) < a.hub_share
    nodes = np.where(is_hub, rng.choice(hubs, n_req), rng.integers(0, ds["nodes"], n_req))
    gen = torch.Generator().manual_seed(a.seed)
    lat = {"hub": [], "ordinary": []}
    batches = []
    t0 = time.perf_counter()
    i = 0
    with torch.no_grad():
        while i < n_req:
            now = time.perf_counter() - t0
            if arrivals[i] > now:
                time.sleep(min(arrivals[i] - now, 0.001))
                continue
            j = i
            while j < n_req and j - i < a.max_batch and arrivals[j] <= now:
                j += 1
            targets = torch.from_numpy(np.unique(nodes[i:j]).astype(np.int64))
            inputs, blocks, _ = ref.sample_minibatch(ds, targets, fanouts, gen)
            x = ds["features"].index_select(0, inputs).to(dev, non_blocking=False)
            blocks = [(ei.to(dev), nd) for ei, nd in blocks]
            ref.model_forward(convs, x, blocks, 0.0, False)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            done = time.perf_counter() - t0
            for k in range(i, j):
                if arrivals[k] >= a.warmup:
                    lat["hub" if is_hub[k] else "ordinary"].append(done - arrivals[k])
            batches.append(j - i)
            i = j
    elapsed = time.perf_counter() - t0
    measured = lat["hub"] + lat["ordinary"]
    out = {"system": "pytorch+pyg server loop", "dataset": ds["name"], "fanouts": fanouts,
           "offered_rate": a.rate, "achieved_rate": n_req / elapsed,
           "late_s": max(0.0, elapsed - total), "mean_batch": float(np.mean(batches)),
           "all_ms": quantiles(measured), "hub_ms": quantiles(lat["hub"]),
           "ordinary_ms": quantiles(lat["ordinary"]), "device": str(dev),
           "torch": torch.__version__}
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    try:
        main()
    except ref.Failure as e:
        print(f"pyg_serve: {e}", file=sys.stderr)
        sys.exit(2)
