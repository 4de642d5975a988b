#!/usr/bin/env python3
"""PyTorch + PyG in place of `neargnn train --task link` (eval/baselines/README.md): PyG's
LinkNeighborLoader samples the neighbourhoods of each mini-batch's positive edges and their
uniform negatives on the CPU, a GraphSAGE-mean of neargnn's shape embeds the endpoints on the
GPU, a dot-product decoder scores the pairs and the loss is BCE with logits, as neargnn's link
trainer. It reads the split that `neargnn split-edges` wrote into DIR/links/ (the
message-passing graph and train_pos.npy) and the dataset's features, memory-mapped.

    python eval/baselines/pyg_link.py --dataset /tmp/l4 --fanouts 15,10,5 --batch 1024 \
        --hidden 256 --iters 200 --warmup 10 --json "$OUT/pyg_link.json"

Prints one summary line (positive edges/s, pairs/s, it/s, the final loss) and writes JSON with
the same keys as `neargnn train --task link --json` where both have one (`edges_per_s`,
`it_per_s`, `loss`). Needs torch and torch_geometric. LinkNeighborLoader samples with pyg-lib or
torch-sparse; where neither is installed (the GPU machine's PyG), `--sampler auto` (the default)
samples the same way with pyg_reference.py's torch operations on the CPU instead (`--sampler
torch`): the union of each mini-batch's endpoints, uniform without replacement per hop, then the
same SAGEConv layers, decoder and loss.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PROG = "pyg_link.py"


class Failure(Exception):
    """A user-facing error: printed as `pyg_link.py: error: ...`, exit 1."""


def parse_fanouts(text):
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise Failure(f"--fanouts '{text}': expected integers like 15,10,5") from None
    if not vals or any(v == 0 or v < -1 for v in vals):
        raise Failure(f"--fanouts '{text}': each value is -1 (all) or at least 1")
    return vals


def load(folder, edge_index=True):
    """The message-passing graph (its CSR, and as PyG's edge_index for LinkNeighborLoader), the
    positive training edges and the features, from a neargnn dataset folder split by `neargnn
    split-edges`."""
    import numpy as np
    import torch
    try:
        with open(os.path.join(folder, "dataset.json")) as f:
            meta = json.load(f)
        with open(os.path.join(folder, "links", "links.json")) as f:
            links = json.load(f)
    except (OSError, ValueError) as e:
        raise Failure(f"{folder}: {e}: pass a dataset folder split by `neargnn split-edges`") \
            from None
    n, dim = int(meta["nodes"]), int(meta["feature_dim"])
    if dim == 0:
        raise Failure(f"{folder}: the dataset has no features")
    indptr = np.load(os.path.join(folder, "links", "indptr.npy"), mmap_mode="r")
    indices = np.load(os.path.join(folder, "links", "indices.npy"), mmap_mode="r")
    ei = None
    if edge_index:
        # Row v of neargnn's CSR lists the nodes v aggregates from: messages flow indices[e] -> v.
        dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.asarray(indptr)))
        ei = torch.stack([torch.from_numpy(np.asarray(indices, dtype=np.int64)),
                          torch.from_numpy(dst)])
    pos = np.load(os.path.join(folder, "links", "train_pos.npy"), mmap_mode="r")
    features = np.load(os.path.join(folder, "features.npy"), mmap_mode="r")
    if features.shape != (n, dim):
        raise Failure(f"{folder}/features.npy: shape {features.shape}, expected {(n, dim)}")
    from pyg_reference import _from_numpy
    return {"nodes": n, "dim": dim, "edge_index": ei, "indptr": _from_numpy(indptr),
            "indices": _from_numpy(indices),
            "train_pos": torch.from_numpy(np.ascontiguousarray(pos, dtype=np.int64)).t(),
            "features": torch.from_numpy(np.asarray(features)), "train": int(links["train"])}


def build_model(dims):
    """SAGEConv (mean) layers dims[0] -> ... -> dims[-1], Glorot weights and zero bias as
    neargnn's `--model sage`, ReLU between layers; the last layer's output is the embedding."""
    import torch
    from torch_geometric.nn import SAGEConv

    class Sage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(
                SAGEConv(dims[i], dims[i + 1], aggr="mean") for i in range(len(dims) - 1))
            for conv in self.convs:
                torch.nn.init.xavier_uniform_(conv.lin_l.weight)
                torch.nn.init.xavier_uniform_(conv.lin_r.weight)
                torch.nn.init.zeros_(conv.lin_l.bias)

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if i + 1 < len(self.convs):
                    x = torch.relu(x)
            return x

    return Sage()


def train(args, data, dev):
    import torch
    import torch.nn.functional as F
    from torch_geometric.data import Data
    from torch_geometric.loader import LinkNeighborLoader

    fanouts = parse_fanouts(args.fanouts)
    graph = Data(x=data["features"], edge_index=data["edge_index"], num_nodes=data["nodes"])
    # neg_sampling="binary" with amount K: K uniform negative pairs per positive (both ends
    # uniform), labelled 0, as neargnn's `--neg uniform --neg-per-pos K`. num_neighbors lists the
    # fanouts from the seeds outwards, as `neargnn train --fanouts`.
    loader = LinkNeighborLoader(
        graph, num_neighbors=fanouts, edge_label_index=data["train_pos"],
        neg_sampling=dict(mode="binary", amount=args.neg_per_pos), batch_size=args.batch,
        shuffle=True, num_workers=args.workers, persistent_workers=args.workers > 0,
        pin_memory=dev.type == "cuda")
    model = build_model([data["dim"]] + [args.hidden] * len(fanouts)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    total = args.warmup + args.iters
    times, losses, it = [], [], 0
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t_last = time.perf_counter()
    while it < total:
        for batch in loader:
            batch = batch.to(dev, non_blocking=True)
            h = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            logits = (h[src] * h[dst]).sum(dim=-1)
            loss = F.binary_cross_entropy_with_logits(logits, batch.edge_label.float())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sync()
            now = time.perf_counter()
            if it >= args.warmup:
                times.append(now - t_last)
                losses.append(loss.item())
            t_last = now
            it += 1
            if it >= total:
                break
    return summarize(args, times, losses, {})


def loader_available():
    """Whether LinkNeighborLoader can sample: it needs pyg-lib or torch-sparse."""
    import importlib.util
    return any(importlib.util.find_spec(m) for m in ("pyg_lib", "torch_sparse"))


def train_torch(args, data, dev):
    """The loop of `train`, sampled with pyg_reference.py's torch operations: each mini-batch's
    positives (the next `batch` of an epoch's shuffle) and K uniform negative pairs each; the
    pairs' ends, each once, are the targets of one sampled block set (as LinkNeighborLoader
    samples the union of a batch's endpoints); their input rows gathered into pinned memory and
    copied to the device; SAGEConv layers, the dot decoder and BCE with logits."""
    import torch
    import torch.nn.functional as F
    from pyg_reference import Staging, build_model as sage_layers, model_forward, \
        sample_minibatch

    fanouts = parse_fanouts(args.fanouts)
    gen = torch.Generator().manual_seed(args.seed)
    pos_all, n = data["train_pos"], data["nodes"]
    n_train = pos_all.size(1)
    batch = min(args.batch, n_train)
    per_epoch = (n_train + batch - 1) // batch
    convs = sage_layers([data["dim"]] + [args.hidden] * len(fanouts)).to(dev)
    opt = torch.optim.Adam(convs.parameters(), lr=args.lr)
    staging = Staging(pin=dev.type == "cuda")
    feats = data["features"]
    total = args.warmup + args.iters
    times, losses, t_sample = [], [], []
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for it in range(total):
        i = it % per_epoch
        if i == 0:
            perm = torch.randperm(n_train, generator=gen)
        t0 = time.perf_counter()
        pos = pos_all[:, perm[i * batch:(i + 1) * batch]]
        neg = torch.randint(n, (2, pos.size(1) * args.neg_per_pos), generator=gen)
        pairs = torch.cat([pos, neg], dim=1)
        targets, inv = torch.unique(pairs.reshape(-1), return_inverse=True)
        inv = inv.view(2, -1)
        node_ids, blocks, _ = sample_minibatch(data, targets, fanouts, gen)
        t1 = time.perf_counter()
        x_host = staging.get("x", (node_ids.numel(), data["dim"]), torch.float32)
        torch.index_select(feats, 0, node_ids, out=x_host)
        x = x_host.to(dev, non_blocking=True)
        dev_blocks = [(ei.to(dev, non_blocking=True), n_dst) for ei, n_dst in blocks]
        label = torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))]).to(dev)
        u, v = inv[0].to(dev), inv[1].to(dev)
        h = model_forward(convs, x, dev_blocks, 0.0, True)
        logits = (h[u] * h[v]).sum(dim=-1)
        loss = F.binary_cross_entropy_with_logits(logits, label)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_value = loss.item()
        sync()
        if it >= args.warmup:
            times.append(time.perf_counter() - t0)
            t_sample.append(t1 - t0)
            losses.append(loss_value)
    return summarize(args, times, losses, {"sample_ms": 1000 * statistics.median(t_sample)
                                           if t_sample else None})


def summarize(args, times, losses, extra):
    secs = sum(times)
    it_per_s = len(times) / secs if secs > 0 else 0.0
    r = {"timed_iterations": len(times), "warmup_iterations": args.warmup,
         "seconds": secs, "it_per_s": it_per_s,
         "edges_per_s": it_per_s * args.batch,
         "pairs_per_s": it_per_s * args.batch * (1 + args.neg_per_pos),
         "median_ms": 1000 * statistics.median(times) if times else None,
         "loss": losses[-1] if losses else None,
         "mean_loss": statistics.fmean(losses) if losses else None}
    r.update(extra)
    return r


def make_parser():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, help="neargnn dataset folder with links/")
    p.add_argument("--fanouts", default="15,10,5", help="neighbours per hop from the seeds "
                   "outwards (default 15,10,5)")
    p.add_argument("--batch", type=int, default=1024, help="positive edges per mini-batch")
    p.add_argument("--neg-per-pos", type=int, default=1, help="uniform negatives per positive")
    p.add_argument("--hidden", type=int, default=256, help="every layer's width, the "
                   "embedding's too (default 256)")
    p.add_argument("--lr", type=float, default=0.001,
                   help="Adam learning rate (default 0.001, L4's recipe)")
    p.add_argument("--iters", type=int, default=200, help="timed iterations (default 200)")
    p.add_argument("--warmup", type=int, default=10, help="untimed first iterations")
    p.add_argument("--workers", type=int, default=0,
                   help="DataLoader worker processes for the sampling (default 0: in the loop)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    p.add_argument("--sampler", default="auto", choices=["auto", "loader", "torch"],
                   help="LinkNeighborLoader (needs pyg-lib or torch-sparse), or pyg_reference.py's "
                   "torch sampler; auto: the loader where it can sample (default auto)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    return p


def main(argv=None):
    args = make_parser().parse_args(argv)
    try:
        if args.batch < 1 or args.neg_per_pos < 1 or args.hidden < 1 or args.iters < 1:
            raise Failure("--batch, --neg-per-pos, --hidden and --iters must be positive")
        import torch
        import torch_geometric
        if args.threads:
            torch.set_num_threads(args.threads)
        dev = torch.device(args.device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise Failure("--device cuda: PyTorch sees no CUDA device")
        torch.manual_seed(args.seed)
        sampler = args.sampler
        if sampler == "auto":
            sampler = "loader" if loader_available() else "torch"
        data = load(args.dataset, edge_index=sampler == "loader")
        r = train(args, data, dev) if sampler == "loader" else train_torch(args, data, dev)
    except Failure as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        print(f"{PROG}: error: {e} (LinkNeighborLoader samples with pyg-lib or torch-sparse)",
              file=sys.stderr)
        return 1
    report = {"tool": PROG, "task": "link",
              "workload": {"dataset": os.path.abspath(args.dataset), "nodes": data["nodes"],
                           "feature_dim": data["dim"], "train_edges": data["train"],
                           "fanouts": args.fanouts, "batch": args.batch,
                           "neg_per_pos": args.neg_per_pos, "hidden": args.hidden,
                           "lr": args.lr, "device": args.device, "workers": args.workers,
                           "sampler": sampler,
                           "threads": torch.get_num_threads(), "seed": args.seed},
              "environment": {"python": sys.version.split()[0], "torch": torch.__version__,
                              "torch_geometric": torch_geometric.__version__,
                              "gpu": torch.cuda.get_device_name(dev)
                              if dev.type == "cuda" else None}}
    report.update(r)
    print(f"{PROG}: {r['timed_iterations']} timed iterations after {r['warmup_iterations']} "
          f"warm-up: {r['it_per_s']:.2f} it/s, {r['edges_per_s']:.4g} edges/s "
          f"({r['pairs_per_s']:.4g} pairs/s), median {r['median_ms']:.2f} ms, "
          f"final loss {r['loss']:.4f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
