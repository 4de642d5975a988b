#!/usr/bin/env python3
"""PyG parity: loads a neargnn checkpoint into the equivalent PyTorch Geometric model (SAGEConv
for GraphSAGE with --combine sum, GCNConv for GCN), runs it on the whole graph, and compares its
logits with neargnn's (`neargnn predict --split all --logits --out L.npy`): prints the largest
absolute difference and exits 1 when it exceeds --tol (1e-4).

The model is read from the checkpoint's own description (model.kind, model.layerL,
train.normalize: docs/training.md), so no option is repeated. Name mapping (neargnn stores
[in, out] for x @ W; torch.nn.Linear holds [out, in], hence the transposes):

  GraphSAGE  layers.L.w_neigh -> SAGEConv.lin_l.weight (.T)   aggregated neighbours
             layers.L.w_self  -> SAGEConv.lin_r.weight (.T)   the node itself
             layers.L.bias    -> SAGEConv.lin_l.bias
  GCN        layers.L.weight  -> GCNConv.lin.weight (.T)
             layers.L.bias    -> GCNConv.bias

Needs torch, torch_geometric, numpy and safetensors (the GPU machine's python3 has them):
  python3 eval/baselines/pyg_parity.py --dataset D --checkpoint C --logits L.npy [--device cuda]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors import safe_open
from torch_geometric.nn import GCNConv, SAGEConv

AGGR = {"mean": "mean", "sum": "add", "max": "max", "min": "min"}


def layer_desc(text):
    return dict(field.split("=", 1) for field in text.split())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, help="the neargnn dataset folder")
    p.add_argument("--checkpoint", required=True, help="a checkpoint of neargnn train")
    p.add_argument("--logits", required=True, help="neargnn's float32 logits [nodes, classes]")
    p.add_argument("--device", default="cpu")
    p.add_argument("--tol", type=float, default=1e-4)
    args = p.parse_args()

    with safe_open(args.checkpoint, "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if "model.kind" not in meta:
        sys.exit(f"{args.checkpoint}: no model description (a checkpoint from before issue 27)")
    kind, n_layers = meta["model.kind"], int(meta["model.layers"])
    layers = [layer_desc(meta[f"model.layer{l}"]) for l in range(n_layers)]

    load = lambda name: np.load(os.path.join(args.dataset, name + ".npy"))
    x = load("features").astype(np.float32)
    if meta["train.normalize"] == "row":  # as neargnn: the sum in double, then x * float(1/sum)
        s = x.astype(np.float64).sum(axis=1, keepdims=True)
        inv = np.where(s != 0, 1.0 / np.where(s != 0, s, 1.0), 0.0).astype(np.float32)
        x = x * inv
    indptr, indices = load("indptr"), load("indices").astype(np.int64)
    n = indptr.shape[0] - 1
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    # Row v of the CSR lists the nodes v aggregates from: messages flow indices[e] -> v.
    edge_index = torch.from_numpy(np.stack([indices, dst]))

    dev = torch.device(args.device)
    convs = []
    in_dim = int(meta["model.in_dim"])
    with torch.no_grad():
        for l, d in enumerate(layers):
            out_dim, bias = int(d["out_dim"]), d["bias"] == "1"
            if kind == "sage":
                if d["combine"] != "sum" or d["aggregator"] not in AGGR:
                    sys.exit(f"layer {l}: combine {d['combine']}, aggregator {d['aggregator']}: "
                             "no SAGEConv equivalent here (sum combine, mean/sum/max/min only)")
                conv = SAGEConv(in_dim, out_dim, aggr=AGGR[d["aggregator"]], root_weight=True,
                                bias=bias)
                conv.lin_l.weight.copy_(tensors[f"layers.{l}.w_neigh"].T)
                conv.lin_r.weight.copy_(tensors[f"layers.{l}.w_self"].T)
                if bias:
                    conv.lin_l.bias.copy_(tensors[f"layers.{l}.bias"])
            elif kind == "gcn":
                if d["aggregator"] != "gcn":
                    sys.exit(f"layer {l}: a GCN with aggregator {d['aggregator']} is not GCNConv")
                conv = GCNConv(in_dim, out_dim, add_self_loops=True, normalize=True, bias=bias)
                conv.lin.weight.copy_(tensors[f"layers.{l}.weight"].T)
                if bias:
                    conv.bias.copy_(tensors[f"layers.{l}.bias"])
            else:
                sys.exit(f"unknown model kind {kind}")
            convs.append((conv.to(dev).eval(), d["activation"]))
            in_dim = out_dim
        h = torch.from_numpy(x).to(dev)
        ei = edge_index.to(dev)
        for conv, act in convs:
            h = conv(h, ei)
            if act == "relu":
                h = h.relu()
        ours = h.cpu().double().numpy()
    theirs = np.load(args.logits).astype(np.float64)
    if theirs.shape != ours.shape:
        sys.exit(f"{args.logits}: shape {theirs.shape}, the model gives {ours.shape}")
    diff = float(np.abs(ours - theirs).max())
    labels = load("labels")
    test = load("test_idx")
    report = {"kind": kind, "layers": n_layers, "device": str(dev), "nodes": n,
              "max_abs_diff": diff, "max_abs_logit": float(np.abs(theirs).max()),
              "predictions_equal": float((ours.argmax(1) == theirs.argmax(1)).mean()),
              "pyg_test_acc": float((ours.argmax(1)[test] == labels[test]).mean()),
              "neargnn_test_acc": float((theirs.argmax(1)[test] == labels[test]).mean()),
              "tol": args.tol, "ok": diff <= args.tol, "torch": torch.__version__}
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
