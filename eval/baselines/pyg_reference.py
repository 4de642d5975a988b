#!/usr/bin/env python3
"""The PyTorch + PyG reference for `neargnn train`: what a PyTorch user writes instead.

It trains the same GraphSAGE-mean model as `neargnn train --model sage` on a neargnn dataset
folder, with mini-batches sampled by plain torch operations on the CPU (the GPU machine's PyG has
no pyg-lib, torch-sparse or torch-scatter, so PyG's NeighborLoader cannot sample there), and
reports throughput (it/s, median and p99 iteration time) and the loss curve. With
--load-weights it instead loads a neargnn checkpoint into the PyG model and runs full-neighbour
inference, to check that both compute the same function. eval/baselines/README.md explains the
measurements and how the weights map.

Only the standard library is imported at module level: `--selftest` runs its pure-Python checks
(safetensors parsing, option parsing, statistics) anywhere, and its torch checks (sampler,
weight mapping, end-to-end runs) where torch, numpy and torch_geometric are installed.
"""
import argparse
import json
import math
import os
import re
import struct
import sys
import tempfile
import time
import warnings

PROG = "pyg_reference"


class Failure(Exception):
    """An error to report in one line (what is wrong and what to do), without a traceback."""


# ---- pure helpers: no torch, no numpy ----


def parse_int_list(text, option):
    """Parses "25,10" into [25, 10]; every value must be a positive integer or -1 (all)."""
    values = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"-?\d+", part):
            raise Failure(f"--{option}: '{text}' is not a comma-separated list of integers")
        v = int(part)
        if v == 0 or v < -1:
            raise Failure(f"--{option}: {v} is not a positive integer or -1 (all)")
        values.append(v)
    if not 1 <= len(values) <= 8:
        raise Failure(f"--{option}: give 1 to 8 values (one per layer), not {len(values)}")
    return values


def parse_float_list(text, option, count):
    """One non-negative value for every layer, or one per layer from the input layer."""
    try:
        values = [float(p) for p in text.split(",")]
    except ValueError:
        raise Failure(f"--{option}: '{text}' is not a comma-separated list of numbers") from None
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise Failure(f"--{option}: '{text}' has a negative or non-finite value")
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise Failure(f"--{option} has {len(values)} values for {count} layers: give one value, "
                      "or one per layer (input layer first)")
    return values


def percentile(values, q):
    """The nearest-rank q-th percentile (0 < q <= 100) of a non-empty list."""
    s = sorted(values)
    return s[max(0, math.ceil(q / 100.0 * len(s)) - 1)]


def median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def loss_curve(losses, every):
    """Mean loss of each window of `every` iterations (the last window may be shorter), as
    [{"iteration": iterations done at the window's end, "loss": mean}]."""
    curve = []
    for begin in range(0, len(losses), every):
        window = losses[begin:begin + every]
        curve.append({"iteration": begin + len(window), "loss": sum(window) / len(window)})
    return curve


# Safetensors: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
# data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the raw little-endian data;
# offsets count from the first byte after the header.
ST_DTYPES = {"F64": ("<f8", 8), "F32": ("<f4", 4), "F16": ("<f2", 2), "I64": ("<i8", 8),
             "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1), "U8": ("u1", 1),
             "BOOL": ("?", 1)}


def read_safetensors_header(path):
    """Returns (metadata, tensors): tensors maps a name to {"dtype", "shape", "offset" (absolute
    in the file), "nbytes"}. Every entry is checked against the file's size."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise Failure(f"{path}: too short for a safetensors file (no 8-byte header length)")
            (hlen,) = struct.unpack("<Q", head)
            if hlen > size - 8 or hlen > 100 << 20:
                raise Failure(f"{path}: header length {hlen} exceeds the file ({size} bytes): "
                              "not a safetensors file, or a truncated one")
            text = f.read(hlen)
    except OSError as e:
        raise Failure(f"cannot read {path}: {e.strerror}") from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Failure(f"{path}: the safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise Failure(f"{path}: the safetensors header is not a JSON object")
    data_start, data_len = 8 + hlen, size - 8 - hlen
    metadata = header.pop("__metadata__", {}) or {}
    if not isinstance(metadata, dict):
        raise Failure(f"{path}: __metadata__ is not an object")
    tensors = {}
    for name, info in header.items():
        ok = isinstance(info, dict) and info.get("dtype") in ST_DTYPES
        shape = info.get("shape") if ok else None
        offs = info.get("data_offsets") if ok else None
        ok = ok and isinstance(shape, list) and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ok = ok and isinstance(offs, list) and len(offs) == 2 and all(
            isinstance(o, int) and not isinstance(o, bool) for o in offs)
        if not ok:
            raise Failure(f"{path}: tensor '{name}' has no valid dtype, shape and data_offsets")
        count = 1
        for d in shape:
            count *= d
        begin, end = offs
        if not 0 <= begin <= end <= data_len or end - begin != count * ST_DTYPES[info["dtype"]][1]:
            raise Failure(f"{path}: tensor '{name}' ({info['dtype']} {shape}) has data_offsets "
                          f"{offs} that do not match its size or lie outside the file's "
                          f"{data_len} data bytes: the file is truncated or corrupt")
        tensors[name] = {"dtype": info["dtype"], "shape": list(shape),
                         "offset": data_start + begin, "nbytes": end - begin}
    return metadata, tensors


def read_tensor_bytes(path, info):
    """The raw little-endian bytes of one tensor of read_safetensors_header's answer."""
    with open(path, "rb") as f:
        f.seek(info["offset"])
        raw = f.read(info["nbytes"])
    if len(raw) != info["nbytes"]:
        raise Failure(f"{path}: truncated while reading a tensor")
    return raw


SAGE_PARTS = ("w_self", "w_neigh", "bias")


def sage_layers_from_header(path, metadata, tensors):
    """The GraphSAGE layers of a neargnn checkpoint: [{"in", "out", "bias"}], input layer
    first. Names other than layers.* (the optimizer's moments) are not weights and are
    ignored. GCN checkpoints and GraphSAGE CONCAT ones are refused: they are not SAGEConv."""
    if metadata.get("model", "0") != "0":
        raise Failure(f"{path}: a neargnn checkpoint of model kind {metadata.get('model')} "
                      "(1 = GCN); this reference implements GraphSAGE (--model sage) only")
    found = {}
    for name in tensors:
        if not name.startswith("layers."):
            continue
        m = re.fullmatch(r"layers\.(\d+)\.(\w+)", name)
        if not m:
            raise Failure(f"{path}: unexpected tensor name '{name}'")
        part = m.group(2)
        if part == "weight":
            raise Failure(f"{path}: '{name}' is a GCN weight; this reference implements "
                          "GraphSAGE (--model sage) only")
        if part not in SAGE_PARTS:
            raise Failure(f"{path}: unexpected tensor '{name}' (GraphSAGE layers have "
                          "w_self, w_neigh and bias)")
        found.setdefault(int(m.group(1)), {})[part] = tensors[name]
    if not found or sorted(found) != list(range(len(found))):
        raise Failure(f"{path}: the layers.N.* tensors do not number the layers 0, 1, ...: "
                      f"found layers {sorted(found)}")
    layers = []
    for index in range(len(found)):
        t = found[index]
        for part in ("w_self", "w_neigh"):
            if part not in t:
                raise Failure(f"{path}: layers.{index}.{part} is missing")
            if t[part]["dtype"] != "F32" or len(t[part]["shape"]) != 2:
                raise Failure(f"{path}: layers.{index}.{part} is not a float32 matrix "
                              f"({t[part]['dtype']} {t[part]['shape']})")
        rows, cols = t["w_self"]["shape"]
        if t["w_neigh"]["shape"] != [rows, cols]:
            raise Failure(f"{path}: layers.{index}: w_self {t['w_self']['shape']} and w_neigh "
                          f"{t['w_neigh']['shape']} differ in shape")
        bias = t.get("bias")
        if bias is not None and (bias["dtype"] != "F32" or len(bias["shape"]) != 1):
            raise Failure(f"{path}: layers.{index}.bias is not a float32 vector")
        if bias is not None and bias["shape"][0] != cols:
            raise Failure(f"{path}: layers.{index}.bias has {bias['shape'][0]} values for "
                          f"{cols} columns: a GraphSAGE CONCAT checkpoint (--combine concat), "
                          "which SAGEConv cannot express; use --combine sum")
        if layers and layers[-1]["out"] != rows:
            raise Failure(f"{path}: layer {index} takes {rows} inputs but layer {index - 1} "
                          f"gives {layers[-1]['out']}")
        layers.append({"in": rows, "out": cols, "bias": bias is not None})
    return layers


# ---- the dataset ----


def _from_numpy(array):
    """A torch view of a numpy array, memory-mapped ones included; the arrays are never written,
    so PyTorch's warning about read-only arrays does not apply."""
    import torch
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable.*")
        return torch.from_numpy(array)


def _load_npy(folder, name, dtypes, shape):
    import numpy as np
    path = os.path.join(folder, name)
    try:
        a = np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise Failure(f"{path} is missing: dataset.json says it is present") from None
    except ValueError:
        a = np.load(path)  # numpy cannot memory-map an empty array
    if a.dtype.name not in dtypes or tuple(a.shape) != tuple(shape):
        raise Failure(f"{path}: {a.dtype.name} {list(a.shape)}, expected {'/'.join(dtypes)} "
                      f"{list(shape)} (docs/dataset-format.md)")
    return a


def load_dataset(folder, normalize):
    """The dataset's arrays as CPU tensors over the memory-mapped files (features copied only
    when row-normalised, as neargnn does)."""
    import numpy as np
    meta_path = os.path.join(folder, "dataset.json")
    try:
        with open(meta_path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise Failure(f"cannot read {meta_path}: {e}: is --dataset a neargnn dataset folder "
                      "(neargnn convert / neargnn generate)?") from None
    if meta.get("format") != "neargnn-dataset" or meta.get("version") != 1:
        raise Failure(f"{meta_path}: not a version-1 neargnn dataset")
    n, e = int(meta["nodes"]), int(meta["edges"])
    dim, classes = int(meta["feature_dim"]), int(meta["classes"])
    if dim == 0 or classes == 0:
        raise Failure(f"{folder}: the dataset has no {'features' if dim == 0 else 'labels'}: "
                      "training and inference need both")
    indptr = _load_npy(folder, "indptr.npy", ("int64",), (n + 1,))
    indices = _load_npy(folder, "indices.npy", (meta["index_dtype"],), (e,))
    features = _load_npy(folder, "features.npy", ("float32",), (n, dim))
    labels = _load_npy(folder, "labels.npy", ("int32",), (n,))
    splits = {}
    for key in ("train", "val", "test"):
        count = int(meta["splits"].get(key, 0))
        if count:
            ids = _load_npy(folder, f"{key}_idx.npy", ("int64",), (count,))
            splits[key] = _from_numpy(np.array(ids, dtype=np.int64))
    if normalize == "row":
        # As neargnn's trainer: each row times (float)(1 / its sum in double), 0 for a zero sum.
        out = np.empty((n, dim), dtype=np.float32)
        step = max(1, (64 << 20) // max(1, 4 * dim))
        for r0 in range(0, n, step):
            block = np.asarray(features[r0:r0 + step])
            s = block.sum(axis=1, dtype=np.float64)
            inv = np.divide(1.0, s, out=np.zeros_like(s), where=s != 0).astype(np.float32)
            out[r0:r0 + step] = block * inv[:, None]
        features = out
    return {"name": meta.get("name", os.path.basename(os.path.normpath(folder))), "nodes": n,
            "edges": e, "dim": dim, "classes": classes, "indptr": _from_numpy(indptr),
            "indices": _from_numpy(indices), "features": _from_numpy(features),
            "labels": _from_numpy(labels), "splits": splits}


# ---- neighbour sampling with torch operations on the CPU ----

DENSE_LIMIT = 4  # rows up to DENSE_LIMIT * fanout long draw random keys for every position


def choose_positions(deg, k, gen):
    """For each row of length deg[i] > k, k distinct positions in [0, deg[i]), uniformly among
    the k-subsets, sorted: [rows, k] int64.

    Rows up to DENSE_LIMIT * k long give every position a random key and keep the k smallest.
    Longer rows (hubs) draw k positions with replacement and redraw the surplus copies of
    repeated ones until all are distinct: O(k) work per row whatever its length, and few rounds,
    as a draw repeats with probability below 1 / DENSE_LIMIT. The result is uniform because each
    round depends only on the set of distinct positions so far and draws uniformly: the
    procedure commutes with any relabelling of the row's positions, and the only distribution on
    k-subsets that every relabelling preserves is the uniform one."""
    import torch
    out = torch.empty((deg.numel(), k), dtype=torch.long)
    dense = deg <= DENSE_LIMIT * k
    rows = dense.nonzero().squeeze(1)
    if rows.numel():
        d = deg.index_select(0, rows)
        width = int(d.max())
        keys = torch.rand((rows.numel(), width), generator=gen)
        keys.masked_fill_(torch.arange(width) >= d.unsqueeze(1), 2.0)  # never among the k least
        pick = keys.topk(k, dim=1, largest=False, sorted=False).indices
        out[rows] = pick.sort(dim=1).values
    rows = (~dense).nonzero().squeeze(1)
    if rows.numel():
        d = deg.index_select(0, rows).unsqueeze(1)
        p = torch.rand((rows.numel(), k), generator=gen, dtype=torch.float64).mul_(d).long()
        p = torch.minimum(p, d - 1)
        while True:
            p = p.sort(dim=1).values
            dup = torch.zeros_like(p, dtype=torch.bool)
            dup[:, 1:] = p[:, 1:] == p[:, :-1]
            n_dup = int(dup.sum())
            if n_dup == 0:
                break
            d_dup = d.expand_as(p)[dup]
            redraw = torch.rand(n_dup, generator=gen, dtype=torch.float64).mul_(d_dup).long()
            p[dup] = torch.minimum(redraw, d_dup - 1)
        out[rows] = p
    return out


def sample_hop(indptr, indices, dst, fanout, gen):
    """One hop of node-wise uniform sampling without replacement: each node of `dst` keeps
    min(fanout, row length) of its row (the whole row for -1), in the row's order.
    Returns (neighbour global ids, index into dst of each edge, edge ids into `indices`)."""
    import torch
    start = indptr.index_select(0, dst)
    deg = indptr.index_select(0, dst + 1) - start
    take = deg if fanout < 0 else deg.clamp(max=fanout)
    first = torch.cumsum(take, 0) - take  # where each row's edges begin in the output
    total = int(take.sum())
    row = torch.repeat_interleave(torch.arange(dst.numel()), take, output_size=total)
    pos = torch.arange(total) - first.index_select(0, row)  # whole rows: 0, 1, ..., deg - 1
    if fanout > 0:
        over = (deg > fanout).nonzero().squeeze(1)
        if over.numel():
            chosen = choose_positions(deg.index_select(0, over), fanout, gen)
            slots = first.index_select(0, over).unsqueeze(1) + torch.arange(fanout)
            pos[slots.reshape(-1)] = chosen.reshape(-1)
    eid = start.index_select(0, row) + pos
    return indices.index_select(0, eid).long(), row, eid


def build_block(dst, nbr, row):
    """Numbers the nodes of one hop locally: the sources are dst (distinct) followed by the new
    neighbours in order of first appearance, so destinations are a prefix of the sources.
    Returns (global ids of the sources, edge_index [2, E] = (local source, local destination))."""
    import torch
    cand = torch.cat([dst, nbr])
    uniq, inv = torch.unique(cand, return_inverse=True)
    first = torch.full((uniq.numel(),), cand.numel(), dtype=torch.long)
    first.scatter_reduce_(0, inv, torch.arange(cand.numel()), reduce="amin")
    order = torch.argsort(first)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    local = rank.index_select(0, inv)
    return uniq.index_select(0, order), torch.stack([local[dst.numel():], row])


def sample_minibatch(ds, targets, fanouts, gen):
    """Blocks for the targets, fanouts in the command line's order (hop 1 = the targets' own
    neighbours first). Returns (input node ids, [(edge_index, n_dst)] input layer first,
    sampled edges)."""
    nodes, blocks, edges = targets, [], 0
    for fanout in fanouts:
        nbr, row, _ = sample_hop(ds["indptr"], ds["indices"], nodes, fanout, gen)
        src, edge_index = build_block(nodes, nbr, row)
        blocks.append((edge_index, nodes.numel()))
        edges += row.numel()
        nodes = src
    blocks.reverse()
    return nodes, blocks, edges


# ---- the model ----


def build_model(dims):
    """SAGEConv layers dims[0] -> dims[1] -> ... with neargnn's initialisation: Glorot-uniform
    weights, zero bias (PyG's own default is Kaiming-uniform)."""
    import torch
    from torch_geometric.nn import SAGEConv
    convs = torch.nn.ModuleList(
        SAGEConv(dims[i], dims[i + 1], aggr="mean") for i in range(len(dims) - 1))
    for conv in convs:
        torch.nn.init.xavier_uniform_(conv.lin_l.weight)
        torch.nn.init.xavier_uniform_(conv.lin_r.weight)
        torch.nn.init.zeros_(conv.lin_l.bias)
    return convs


def conv_block(conv, x, edge_index, n_dst):
    """One layer on a bipartite block: lin_l(mean of the sources) + lin_r(destination rows),
    i.e. neargnn's agg @ w_neigh + bias + h_dst @ w_self; x holds the sources, destinations
    first."""
    return conv((x, x[:n_dst]), edge_index, size=(x.size(0), n_dst))


def model_forward(convs, x, blocks, dropout, training):
    """Dropout on every layer's input (the features too, as neargnn), ReLU between layers."""
    import torch.nn.functional as F
    for layer, (conv, (edge_index, n_dst)) in enumerate(zip(convs, blocks)):
        x = F.dropout(x, p=dropout, training=training)
        x = conv_block(conv, x, edge_index, n_dst)
        if layer + 1 < len(convs):
            x = F.relu(x)
    return x


def load_weights(convs, path, layers):
    """Copies a neargnn checkpoint into the SAGEConv layers: neargnn stores [in, out] for
    x @ W, a Linear holds [out, in], so each matrix goes in transposed."""
    import numpy as np
    import torch

    def tensor(info):
        a = np.frombuffer(read_tensor_bytes(path, info), dtype="<f4").reshape(info["shape"])
        return torch.from_numpy(a.copy())

    _, tensors = read_safetensors_header(path)
    with torch.no_grad():
        for index, (conv, layer) in enumerate(zip(convs, layers)):
            conv.lin_r.weight.copy_(tensor(tensors[f"layers.{index}.w_self"]).T)
            conv.lin_l.weight.copy_(tensor(tensors[f"layers.{index}.w_neigh"]).T)
            if layer["bias"]:
                conv.lin_l.bias.copy_(tensor(tensors[f"layers.{index}.bias"]))
            else:
                conv.lin_l.bias.zero_()


def infer_all(convs, ds, dev, chunk):
    """Full-neighbour layer-wise inference of every node, as neargnn's evaluation: layer 1 of
    all nodes in chunks of destinations, then layer 2 from those, and so on. A layer's input
    table moves to the GPU when it takes under half of the free memory; otherwise its rows are
    gathered on the CPU per chunk. Returns the logits [nodes, classes] on the CPU."""
    import torch
    n = ds["nodes"]
    h = ds["features"]
    convs.eval()
    with torch.no_grad():
        for layer, conv in enumerate(convs):
            table = h
            if dev.type == "cuda":
                free, _ = torch.cuda.mem_get_info(dev)
                if h.numel() * h.element_size() < free // 2:
                    table = h.to(dev)
            out = torch.empty((n, conv.out_channels), dtype=torch.float32)
            for c0 in range(0, n, chunk):
                dst = torch.arange(c0, min(n, c0 + chunk))
                nbr, row, _ = sample_hop(ds["indptr"], ds["indices"], dst, -1, None)
                src, edge_index = build_block(dst, nbr, row)
                x = table.index_select(0, src.to(table.device)).to(dev)
                y = conv_block(conv, x, edge_index.to(dev), dst.numel())
                if layer + 1 < len(convs):
                    y = y.relu()
                out[c0:c0 + dst.numel()] = y.cpu()
            h = out
    return h


# ---- training ----


class Staging:
    """Pinned host buffers, grown to the largest mini-batch and reused. The copies out of them
    are queued before the step, and every iteration ends by reading the loss, which waits for
    the stream, so a buffer is free again when the next iteration refills it."""

    def __init__(self, pin):
        self.pin, self.bufs = pin, {}

    def get(self, name, shape, dtype):
        import torch
        numel = math.prod(shape)
        buf = self.bufs.get(name)
        if buf is None or buf.numel() < numel:
            cap = max(numel, 1, 0 if buf is None else buf.numel() * 3 // 2)
            buf = torch.empty(cap, dtype=dtype, pin_memory=self.pin)
            self.bufs[name] = buf
        return buf[:numel].view(shape)


def train(args, ds, convs, dev, fanouts, weight_decay):
    """Trains and measures; returns the results for the report."""
    import torch
    import torch.nn.functional as F
    if "train" not in ds["splits"]:
        raise Failure(f"{args.dataset}: the dataset has no training split")
    gen = torch.Generator().manual_seed(args.seed)
    train_ids = ds["splits"]["train"]
    n_train = train_ids.numel()
    batch = min(args.batch, n_train) if args.batch > 0 else n_train
    per_epoch = (n_train + batch - 1) // batch
    total = args.warmup + args.iters if args.iters else args.epochs * per_epoch
    warmup = min(args.warmup, total - 1)
    opt = torch.optim.Adam(
        [{"params": list(conv.parameters()), "weight_decay": wd}
         for conv, wd in zip(convs, weight_decay)], lr=args.lr)
    staging = Staging(pin=dev.type == "cuda")
    feats, labels, dim = ds["features"], ds["labels"], ds["dim"]
    losses, times, t_sample, t_gather, t_step, edges_timed = [], [], [], [], [], 0
    t_device = []
    convs.train()
    epoch_loss, epoch_t0 = 0.0, time.perf_counter()
    timed_t0 = None
    for it in range(total):
        epoch, i = divmod(it, per_epoch)
        if i == 0:
            perm = train_ids.index_select(0, torch.randperm(n_train, generator=gen))
        if it == warmup:
            timed_t0 = time.perf_counter()
        t0 = time.perf_counter()
        targets = perm[i * batch:(i + 1) * batch]
        node_ids, blocks, edges = sample_minibatch(ds, targets, fanouts, gen)
        t1 = time.perf_counter()
        x_host = staging.get("x", (node_ids.numel(), dim), torch.float32)
        torch.index_select(feats, 0, node_ids, out=x_host)
        y_host = staging.get("y", (targets.numel(),), torch.int64)
        y_host.copy_(labels.index_select(0, targets))
        t2 = time.perf_counter()
        x = x_host.to(dev, non_blocking=True)
        y = y_host.to(dev, non_blocking=True)
        dev_blocks = [(ei.to(dev, non_blocking=True), n_dst) for ei, n_dst in blocks]
        # The device step alone (forward, loss, backward, Adam), timed with CUDA events: what
        # neargnn's op profile sums as its device step.
        ev = ([torch.cuda.Event(enable_timing=True) for _ in range(2)]
              if dev.type == "cuda" else None)
        if ev:
            ev[0].record()
        out = model_forward(convs, x, dev_blocks, args.dropout, True)
        loss = F.cross_entropy(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if ev:
            ev[1].record()
        loss_value = loss.item()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        t3 = time.perf_counter()
        if not math.isfinite(loss_value):
            raise Failure(f"epoch {epoch} iteration {i}: the training loss is {loss_value}: "
                          "lower --lr or pass --normalize-features row")
        losses.append(loss_value)
        epoch_loss += loss_value
        if it >= warmup:
            times.append(t3 - t0)
            t_sample.append(t1 - t0)
            t_gather.append(t2 - t1)
            t_step.append(t3 - t2)
            if ev:
                t_device.append(ev[0].elapsed_time(ev[1]) * 1e-3)
            edges_timed += edges
        if i + 1 == per_epoch:
            secs = time.perf_counter() - epoch_t0
            print(f"epoch {epoch:4d}  loss {epoch_loss / per_epoch:.4f}  "
                  f"{per_epoch / secs:.1f} it/s  {secs:.2f} s", flush=True)
            epoch_loss, epoch_t0 = 0.0, time.perf_counter()
    wall = time.perf_counter() - timed_t0
    curve = loss_curve(losses, args.log_every)
    return {"iterations": total, "warmup_iterations": warmup, "timed_iterations": len(times),
            "timed_seconds": wall, "it_per_s": len(times) / wall,
            "median_ms": 1e3 * median(times), "p99_ms": 1e3 * percentile(times, 99),
            "mean_ms": 1e3 * sum(times) / len(times),
            "phase_median_ms": {"sample": 1e3 * median(t_sample),
                                "gather": 1e3 * median(t_gather),
                                "transfer_and_step": 1e3 * median(t_step),
                                "device_step": 1e3 * median(t_device) if t_device else None},
            "edges_per_s": edges_timed / wall, "final_loss": curve[-1]["loss"],
            "loss_curve": curve}


# ---- inference, comparisons and the report ----


def accuracy(preds, ds, split):
    ids = ds["splits"].get(split)
    if ids is None:
        return None
    return float((preds.index_select(0, ids) == ds["labels"].index_select(0, ids).long())
                 .double().mean())


def compare(report, ds, logits, preds, args):
    import numpy as np
    import torch
    n, classes = ds["nodes"], ds["classes"]
    if args.compare_predictions:
        other = np.load(args.compare_predictions)
        if other.shape != (n,) or other.dtype.kind not in "iu":
            raise Failure(f"{args.compare_predictions}: {other.dtype} {list(other.shape)}, "
                          f"expected an integer class per node [{n}]")
        same = preds == torch.from_numpy(other.astype(np.int64))
        report["predictions_agreement"] = float(same.double().mean())
        report["predictions_differing"] = int((~same).sum())
    if args.compare_logits:
        other = np.load(args.compare_logits)
        if other.shape != (n, classes) or other.dtype.kind != "f":
            raise Failure(f"{args.compare_logits}: {other.dtype} {list(other.shape)}, "
                          f"expected float logits [{n}, {classes}]")
        diff = (logits.double() - torch.from_numpy(other.astype(np.float64))).abs()
        report["logits_max_abs_diff"] = float(diff.max()) if diff.numel() else 0.0
        report["logits_max_abs"] = float(logits.abs().max()) if logits.numel() else 0.0


def write_json(path, obj):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def make_parser():
    p = argparse.ArgumentParser(
        prog=PROG, description="PyTorch + PyG (SAGEConv) reference for `neargnn train`: "
        "GraphSAGE-mean with neighbour sampling written in torch operations.")
    p.add_argument("--dataset", metavar="DIR", help="neargnn dataset folder")
    p.add_argument("--fanouts", default="25,10",
                   help="neighbours per hop from the targets outwards (25,10: 25 of each target, "
                   "then 10 of each of those); -1 = all; one value per layer (default 25,10)")
    p.add_argument("--batch", type=int, default=1024,
                   help="targets per mini-batch; 0 = the whole training split (default 1024)")
    p.add_argument("--hidden", type=int, default=256, help="hidden width (default 256)")
    p.add_argument("--lr", type=float, default=0.01, help="Adam learning rate (default 0.01)")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="dropout on every layer's input in training (default 0)")
    p.add_argument("--weight-decay", default="0",
                   help="L2 coefficient: one value, or one per layer from the input (default 0)")
    p.add_argument("--normalize-features", choices=("none", "row"), default="none",
                   help="row: divide each feature row by its sum, as neargnn's option")
    p.add_argument("--epochs", type=int, default=10, help="epochs to train (default 10)")
    p.add_argument("--iters", type=int, default=0,
                   help="train WARMUP + N iterations instead of --epochs (epochs wrap around)")
    p.add_argument("--warmup", type=int, default=3,
                   help="first iterations left out of the timings (they still train; default 3)")
    p.add_argument("--log-every", type=int, default=10,
                   help="loss curve: mean loss of every N iterations (default 10)")
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--precision", choices=("fp32", "tf32"), default="fp32",
                   help="matrix products in fp32 (default) or TF32, as neargnn's --precision")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads; 0 = PyTorch's default")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--eval", action="store_true",
                   help="after training: full-neighbour val and test accuracy")
    p.add_argument("--eval-chunk", type=int, default=16384,
                   help="destination nodes per chunk in full-neighbour inference (default 16384)")
    p.add_argument("--load-weights", metavar="FILE",
                   help="no training: load a neargnn checkpoint (safetensors) and run "
                   "full-neighbour inference on every node")
    p.add_argument("--compare-predictions", metavar="NPY",
                   help="fraction of nodes whose predicted class equals this int array [nodes]")
    p.add_argument("--compare-logits", metavar="NPY",
                   help="largest absolute difference to these float logits [nodes, classes]")
    p.add_argument("--save-predictions", metavar="NPY", help="write int32 predictions [nodes]")
    p.add_argument("--save-logits", metavar="NPY", help="write float32 logits [nodes, classes]")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument("--selftest", action="store_true",
                   help="run the built-in checks (the torch ones only where torch is installed)")
    return p


def run(args):
    import numpy as np
    import torch
    if not args.dataset:
        raise Failure("--dataset DIR is required")
    if min(args.batch, args.iters, args.warmup, args.threads) < 0:
        raise Failure("--batch, --iters, --warmup and --threads must be non-negative")
    if min(args.hidden, args.epochs, args.log_every, args.eval_chunk) < 1 or not args.lr > 0:
        raise Failure("--hidden, --epochs, --log-every, --eval-chunk and --lr must be positive")
    if not 0 <= args.dropout < 1:
        raise Failure("--dropout must be in [0, 1)")
    fanouts = parse_int_list(args.fanouts, "fanouts")
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise Failure("--device cuda: PyTorch sees no CUDA device; run on the GPU machine or "
                      "pass --device cpu")
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    ds = load_dataset(args.dataset, args.normalize_features)
    if args.load_weights:
        metadata, tensors = read_safetensors_header(args.load_weights)
        layers = sage_layers_from_header(args.load_weights, metadata, tensors)
        if layers[0]["in"] != ds["dim"] or layers[-1]["out"] != ds["classes"]:
            raise Failure(f"{args.load_weights}: the model maps {layers[0]['in']} inputs to "
                          f"{layers[-1]['out']} classes, the dataset has {ds['dim']} feature "
                          f"columns and {ds['classes']} classes")
        dims = [layers[0]["in"]] + [layer["out"] for layer in layers]
    else:
        dims = [ds["dim"]] + [args.hidden] * (len(fanouts) - 1) + [ds["classes"]]
    convs = build_model(dims)
    weight_decay = parse_float_list(args.weight_decay, "weight-decay", len(convs))
    workload = {"dataset": os.path.abspath(args.dataset), "name": ds["name"],
                "nodes": ds["nodes"], "edges": ds["edges"], "feature_dim": ds["dim"],
                "classes": ds["classes"], "layers": len(convs), "dims": dims,
                "normalize_features": args.normalize_features, "device": args.device,
                "threads": torch.get_num_threads(), "eval_chunk": args.eval_chunk}
    if args.load_weights:
        workload["load_weights"] = os.path.abspath(args.load_weights)
    else:
        workload.update({"fanouts": fanouts, "batch": args.batch, "hidden": args.hidden,
                         "lr": args.lr, "dropout": args.dropout, "weight_decay": weight_decay,
                         "epochs": None if args.iters else args.epochs,
                         "iters": args.iters or None, "warmup": args.warmup,
                         "seed": args.seed})
    report = {"tool": PROG, "mode": "inference" if args.load_weights else "train",
              "workload": workload,
              "environment": {"python": sys.version.split()[0], "torch": torch.__version__,
                              "torch_geometric": __import__("torch_geometric").__version__,
                              "gpu": torch.cuda.get_device_name(dev)
                              if dev.type == "cuda" else None}}
    if args.load_weights:
        load_weights(convs, args.load_weights, layers)
        convs.to(dev)
    else:
        convs.to(dev)
        r = train(args, ds, convs, dev, fanouts, weight_decay)
        report.update(r)
        print(f"{PROG}: {r['timed_iterations']} timed iterations after "
              f"{r['warmup_iterations']} warm-up: {r['it_per_s']:.2f} it/s, median "
              f"{r['median_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms (sample "
              f"{r['phase_median_ms']['sample']:.2f}, gather {r['phase_median_ms']['gather']:.2f}"
              f", transfer+step {r['phase_median_ms']['transfer_and_step']:.2f} ms medians"
              + (f"; device step {r['phase_median_ms']['device_step']:.3f} ms"
                 if r['phase_median_ms']['device_step'] is not None else "") + "), "
              f"{r['edges_per_s']:.3g} sampled edges/s, final loss {r['final_loss']:.4f}")
    if (args.load_weights or args.eval or args.compare_predictions or args.compare_logits
            or args.save_predictions or args.save_logits):
        t0 = time.perf_counter()
        logits = infer_all(convs, ds, dev, args.eval_chunk)
        preds = logits.argmax(dim=1) if logits.numel() else torch.zeros(0, dtype=torch.long)
        report["eval_seconds"] = time.perf_counter() - t0
        for split in ("val", "test"):
            report[f"{split}_acc"] = accuracy(preds, ds, split)
        compare(report, ds, logits, preds, args)
        if args.save_predictions:
            np.save(args.save_predictions, preds.numpy().astype(np.int32))
        if args.save_logits:
            np.save(args.save_logits, logits.numpy())
        line = f"{PROG}: full-neighbour inference of {ds['nodes']} nodes in " \
               f"{report['eval_seconds']:.2f} s"
        for key in ("val_acc", "test_acc"):
            line += f", {key} " + ("n/a" if report[key] is None else f"{report[key]:.4f}")
        if "predictions_agreement" in report:
            line += (f", predictions equal on {report['predictions_agreement']:.6f} "
                     f"({report['predictions_differing']} differ)")
        if "logits_max_abs_diff" in report:
            line += f", logits max |diff| {report['logits_max_abs_diff']:.3g}"
        print(line, flush=True)
    if args.json:
        write_json(args.json, report)
    return report


def join_fanouts(argv):
    """neargnn takes `--fanouts -1,-1`, but argparse reads a value that starts with '-' as an
    option unless it is a plain number: such a value is joined to its option instead."""
    out, i = [], 0
    while i < len(argv):
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if argv[i] == "--fanouts" and re.fullmatch(r"-\d+(,-?\d+)+", value):
            out.append(f"--fanouts={value}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv=None):
    args = make_parser().parse_args(join_fanouts(sys.argv[1:] if argv is None else argv))
    if args.selftest:
        return selftest()
    try:
        run(args)
    except Failure as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    return 0


# ---- self-test ----


def _write_safetensors(path, tensors, metadata):
    """Writes float32 tensors {name: (shape, flat values)} with the standard library only."""
    header, blobs, at = {}, [], 0
    for name, (shape, values) in tensors.items():
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _expect_failure(fn, fragment):
    try:
        fn()
    except Failure as e:
        assert fragment in str(e), f"error '{e}' lacks '{fragment}'"
        return
    raise AssertionError(f"no error (expected one about '{fragment}')")


def _selftest_pure(tmp):
    import random
    assert parse_int_list("25,10", "fanouts") == [25, 10]
    assert parse_int_list("-1", "fanouts") == [-1]
    for bad in ("0", "1,,2", "-2", "a", "1,2,3,4,5,6,7,8,9"):
        _expect_failure(lambda: parse_int_list(bad, "fanouts"), "--fanouts")
    assert parse_float_list("5e-4,0", "weight-decay", 2) == [5e-4, 0.0]
    assert parse_float_list("0.1", "weight-decay", 3) == [0.1] * 3
    _expect_failure(lambda: parse_float_list("1,2", "weight-decay", 3), "2 values for 3")
    _expect_failure(lambda: parse_float_list("-1", "weight-decay", 1), "negative")
    values = list(range(1, 101))
    assert percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([5.0], 99) == 5.0 and median([3, 1, 2]) == 2 and median([4, 1]) == 2.5
    for argv, want in ((["--fanouts", "-1,-1"], "-1,-1"), (["--fanouts", "-1"], "-1"),
                       (["--fanouts", "25,-1"], "25,-1"), (["--fanouts=-1,5"], "-1,5")):
        assert make_parser().parse_args(join_fanouts(argv)).fanouts == want, argv
    assert loss_curve([4, 2, 3, 1, 5], 2) == [{"iteration": 2, "loss": 3.0},
                                              {"iteration": 4, "loss": 2.0},
                                              {"iteration": 5, "loss": 5.0}]

    # A checkpoint as neargnn writes it: two GraphSAGE layers and the optimizer's moments.
    rng = random.Random(7)
    shapes = {"layers.0.w_self": [5, 4], "layers.0.w_neigh": [5, 4], "layers.0.bias": [4],
              "layers.1.w_self": [4, 3], "layers.1.w_neigh": [4, 3], "layers.1.bias": [3]}
    tensors = {k: (s, [rng.uniform(-1, 1) for _ in range(math.prod(s))])
               for k, s in shapes.items()}
    n_params = sum(math.prod(s) for s in shapes.values())
    tensors["optimizer.state1"] = ([n_params], [rng.uniform(-1, 1) for _ in range(n_params)])
    tensors["optimizer.state2"] = ([n_params], [rng.uniform(0, 1) for _ in range(n_params)])
    meta = {"format": "neargnn-checkpoint", "version": "1", "model": "0"}
    path = os.path.join(tmp, "ck.safetensors")
    _write_safetensors(path, tensors, meta)
    got_meta, got = read_safetensors_header(path)
    assert got_meta == meta and set(got) == set(tensors)
    for name, (shape, values) in tensors.items():
        assert got[name]["shape"] == shape and got[name]["dtype"] == "F32"
        raw = read_tensor_bytes(path, got[name])
        decoded = struct.unpack(f"<{len(values)}f", raw)
        assert all(abs(a - b) < 1e-6 for a, b in zip(decoded, values)), name
    layers = sage_layers_from_header(path, got_meta, got)
    assert layers == [{"in": 5, "out": 4, "bias": True}, {"in": 4, "out": 3, "bias": True}]

    def variant(drop=(), add=None, meta_over=None):
        t = {k: v for k, v in tensors.items() if k not in drop}
        t.update(add or {})
        p = os.path.join(tmp, "variant.safetensors")
        _write_safetensors(p, t, dict(meta, **(meta_over or {})))
        m, h = read_safetensors_header(p)
        return lambda: sage_layers_from_header(p, m, h)

    _expect_failure(variant(drop=("layers.1.w_neigh",)), "layers.1.w_neigh is missing")
    _expect_failure(variant(meta_over={"model": "1"}), "GraphSAGE (--model sage) only")
    _expect_failure(variant(add={"layers.0.weight": ([5, 4], [0.0] * 20)}), "GCN weight")
    _expect_failure(variant(add={"layers.3.bias": ([3], [0.0] * 3)}), "number the layers")
    _expect_failure(variant(add={"layers.1.w_self": ([5, 3], [0.0] * 15)}), "differ in shape")
    _expect_failure(variant(add={"layers.1.w_self": ([3, 3], [0.0] * 9),
                                 "layers.1.w_neigh": ([3, 3], [0.0] * 9)}), "gives 4")
    _expect_failure(variant(add={"layers.0.bias": ([8], [0.0] * 8)}), "CONCAT")
    assert sage_layers_from_header(path, {}, got)[1]["out"] == 3  # no metadata: by names
    no_bias = variant(drop=("layers.0.bias",))()
    assert no_bias[0]["bias"] is False and no_bias[1]["bias"] is True

    # Damaged files: truncated data, a header length past the end, a header that is not JSON.
    with open(path, "rb") as f:
        whole = f.read()
    broken = os.path.join(tmp, "broken.safetensors")
    for data, fragment in ((whole[:-4], "truncated or corrupt"),
                           (struct.pack("<Q", len(whole)) + whole[8:], "exceeds the file"),
                           (struct.pack("<Q", 4) + b"{no}", "not valid JSON"),
                           (b"\x01\x02", "too short")):
        with open(broken, "wb") as f:
            f.write(data)
        _expect_failure(lambda: read_safetensors_header(broken), fragment)


def _chi_square_ok(counts, expected, label):
    """Pearson's statistic below its mean plus 6 standard deviations (dof = cells - 1)."""
    stat = sum((c - expected) ** 2 / expected for c in counts)
    dof = len(counts) - 1
    limit = dof + 6 * math.sqrt(2 * dof)
    assert stat < limit, f"{label}: chi-square {stat:.1f} over {limit:.1f} ({dof} dof)"


def _selftest_sampler():
    import itertools
    import torch
    gen = torch.Generator().manual_seed(3)
    # Every k-subset equally likely, on both paths: rows of 6 (random keys), 9 and 13 (redraws,
    # just above DENSE_LIMIT * k, where repeats are most frequent).
    for deg, k, trials in ((6, 2, 30000), (9, 2, 30000), (13, 3, 60000)):
        p = choose_positions(torch.full((trials,), deg, dtype=torch.long), k, gen)
        assert bool((p[:, 1:] > p[:, :-1]).all()) and int(p.min()) >= 0 and int(p.max()) < deg
        subsets = {s: i for i, s in enumerate(itertools.combinations(range(deg), k))}
        counts = [0] * len(subsets)
        for row in p.tolist():
            counts[subsets[tuple(row)]] += 1
        _chi_square_ok(counts, trials / len(subsets), f"subsets of {k} of {deg}")
    for deg, k in ((40, 3), (1000, 200), (10 ** 7, 25), (26, 25)):
        p = choose_positions(torch.full((500,), deg, dtype=torch.long), k, gen)
        assert bool((p[:, 1:] > p[:, :-1]).all()) and int(p.max()) < deg, (deg, k)
    p = choose_positions(torch.full((20000,), 40, dtype=torch.long), 3, gen)
    _chi_square_ok(torch.bincount(p.reshape(-1), minlength=40).tolist(), 20000 * 3 / 40,
                   "positions of 3 of 40")

    # A graph with empty rows, duplicate entries, self loops and a hub.
    rows = [[], [0], [2, 2, 3], list(range(10)), [4] * 3 + [5] * 3, list(range(2, 62)),
            [5, 1, 7, 1, 0, 9, 8]] + [[(v * 7 + j) % 70 for j in range(v % 12)]
                                      for v in range(7, 70)]
    indptr = torch.tensor([0] + list(itertools.accumulate(len(r) for r in rows)))
    indices = torch.tensor([x for r in rows for x in r], dtype=torch.int32)
    for fanout in (1, 2, 3, 5, -1):
        dst = torch.tensor([5, 0, 3, 2, 6, 4, 1, 30, 11])
        nbr, row, eid = sample_hop(indptr, indices, dst, fanout, gen)
        for j, v in enumerate(dst.tolist()):
            mine = eid[row == j].tolist()
            lo, hi = int(indptr[v]), int(indptr[v + 1])
            want = hi - lo if fanout < 0 else min(fanout, hi - lo)
            assert len(mine) == want and len(set(mine)) == want, (fanout, v, mine)
            assert all(lo <= e < hi for e in mine) and mine == sorted(mine), (fanout, v, mine)
        assert nbr.tolist() == indices[eid].long().tolist()
        src, edge_index = build_block(dst, nbr, row)
        assert src[:dst.numel()].tolist() == dst.tolist()
        assert len(set(src.tolist())) == src.numel() and set(src.tolist()) == set(
            dst.tolist()) | set(nbr.tolist())
        assert src[edge_index[0]].tolist() == nbr.tolist()
        assert edge_index[1].tolist() == row.tolist()
        firsts = [x for x in dict.fromkeys(nbr.tolist()) if x not in set(dst.tolist())]
        assert src[dst.numel():].tolist() == firsts  # new sources in order of appearance
    ds = {"indptr": indptr, "indices": indices}
    node_ids, blocks, edges = sample_minibatch(ds, torch.tensor([3, 9, 5]), [4, 2], gen)
    (ei0, nd0), (ei1, nd1) = blocks
    assert nd1 == 3 and nd0 >= 3 and int(ei1[0].max()) < nd0 and int(ei0[0].max()) < \
        node_ids.numel() and edges == ei0.size(1) + ei1.size(1)
    return rows


def _reference_logits(rows, x, weights):
    """GraphSAGE-mean in float64 written from neargnn's formula, node by node:
    h_v @ w_self + mean(h_u, u in row v) @ w_neigh + bias, ReLU between layers."""
    import torch
    h = x.double()
    for layer, (ws, wn, b) in enumerate(weights):
        agg = torch.zeros_like(h)
        for v, r in enumerate(rows):
            if r:
                agg[v] = h[torch.tensor(r)].mean(0)
        h = h @ ws.double() + agg @ wn.double() + b.double()
        if layer + 1 < len(weights):
            h = h.relu()
    return h


def _selftest_end_to_end(tmp, rows, dev):
    import numpy as np
    import torch
    n, dim, classes = len(rows), 6, 3
    rng = np.random.default_rng(5)
    labels = rng.integers(0, classes, n).astype(np.int32)
    features = (rng.normal(size=(n, dim)) + 3.0 * np.eye(classes, dim)[labels]).astype(np.float32)
    perm = rng.permutation(n)
    folder = os.path.join(tmp, "ds")
    os.makedirs(folder)
    indptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
    np.save(f"{folder}/indptr.npy", indptr)
    np.save(f"{folder}/indices.npy", np.array([x for r in rows for x in r], dtype=np.int32))
    np.save(f"{folder}/features.npy", features)
    np.save(f"{folder}/labels.npy", labels)
    splits = {"train": np.sort(perm[:40]), "val": perm[40:50], "test": perm[50:]}
    for key, ids in splits.items():
        np.save(f"{folder}/{key}_idx.npy", ids.astype(np.int64))
    with open(f"{folder}/dataset.json", "w") as f:
        json.dump({"format": "neargnn-dataset", "version": 1, "name": "selftest", "nodes": n,
                   "edges": int(indptr[-1]), "index_dtype": "int32", "feature_dim": dim,
                   "feature_dtype": "float32", "classes": classes,
                   "splits": {k: len(v) for k, v in splits.items()}}, f)

    # Training: the loss falls, the report is complete, accuracy beats chance (1/3) clearly.
    out = os.path.join(tmp, "train.json")
    assert main(["--dataset", folder, "--fanouts", "3,2", "--batch", "16", "--hidden", "8",
                 "--epochs", "40", "--lr", "0.02", "--dropout", "0.1", "--weight-decay", "1e-4,0",
                 "--device", dev.type, "--eval", "--eval-chunk", "13", "--log-every", "3",
                 "--json", out]) == 0
    with open(out) as f:
        r = json.load(f)
    assert r["timed_iterations"] == 40 * 3 - 3 and r["it_per_s"] > 0 and r["p99_ms"] >= \
        r["median_ms"] > 0 and len(r["loss_curve"]) == 40
    assert r["loss_curve"][-1]["loss"] < 0.7 * r["loss_curve"][0]["loss"], r["loss_curve"]
    assert r["test_acc"] > 0.6 and r["val_acc"] is not None, r
    assert main(["--dataset", folder, "--iters", "5", "--warmup", "2", "--fanouts", "-1,2",
                 "--device", dev.type, "--json", out, "--hidden", "4"]) == 0
    with open(out) as f:
        r = json.load(f)
    assert r["iterations"] == 7 and r["timed_iterations"] == 5

    # Inference from a neargnn-layout checkpoint against the float64 formula.
    gen = torch.Generator().manual_seed(11)
    dims = [dim, 5, 4, classes]
    weights = [(torch.randn(dims[i], dims[i + 1], generator=gen),
                torch.randn(dims[i], dims[i + 1], generator=gen),
                torch.randn(dims[i + 1], generator=gen)) for i in range(3)]
    tensors = {}
    for i, (ws, wn, b) in enumerate(weights):
        tensors[f"layers.{i}.w_self"] = (list(ws.shape), ws.reshape(-1).tolist())
        tensors[f"layers.{i}.w_neigh"] = (list(wn.shape), wn.reshape(-1).tolist())
        tensors[f"layers.{i}.bias"] = (list(b.shape), b.tolist())
    n_params = sum(len(v) for _, v in tensors.values())
    tensors["optimizer.state1"] = ([n_params], [0.5] * n_params)
    tensors["optimizer.state2"] = ([n_params], [0.25] * n_params)
    ck = os.path.join(tmp, "model.safetensors")
    _write_safetensors(ck, tensors, {"format": "neargnn-checkpoint", "model": "0"})
    ref = _reference_logits(rows, torch.from_numpy(features), weights)
    np.save(os.path.join(tmp, "ref_logits.npy"), ref.float().numpy())
    np.save(os.path.join(tmp, "ref_preds.npy"), ref.argmax(1).int().numpy())
    wrong = ref.argmax(1).int().numpy().copy()
    wrong[:7] = (wrong[:7] + 1) % classes
    np.save(os.path.join(tmp, "wrong_preds.npy"), wrong)
    for preds_file, agreement in (("ref_preds.npy", 1.0), ("wrong_preds.npy", 1 - 7 / n)):
        assert main(["--dataset", folder, "--load-weights", ck, "--device", dev.type,
                     "--eval-chunk", "9", "--compare-predictions",
                     os.path.join(tmp, preds_file), "--compare-logits",
                     os.path.join(tmp, "ref_logits.npy"), "--save-logits",
                     os.path.join(tmp, "mine.npy"), "--json", out]) == 0
        with open(out) as f:
            r = json.load(f)
        assert abs(r["predictions_agreement"] - agreement) < 1e-12, r
        assert r["logits_max_abs_diff"] < 1e-4 * max(1.0, r["logits_max_abs"]), r
    assert np.load(os.path.join(tmp, "mine.npy")).shape == (n, classes)
    # A checkpoint for other input columns is refused with a message, not a traceback.
    tensors["layers.0.w_self"] = ([dim + 1, 5], [0.0] * (dim + 1) * 5)
    tensors["layers.0.w_neigh"] = ([dim + 1, 5], [0.0] * (dim + 1) * 5)
    _write_safetensors(ck, tensors, {"format": "neargnn-checkpoint", "model": "0"})
    assert main(["--dataset", folder, "--load-weights", ck, "--device", dev.type]) == 1


def selftest():
    with tempfile.TemporaryDirectory(prefix="pyg-ref-") as tmp:
        _selftest_pure(tmp)
        print(f"{PROG} selftest: option parsing, statistics and safetensors parsing: ok")
        try:
            import numpy  # noqa: F401
            import torch
            import torch_geometric  # noqa: F401
        except ImportError as e:
            print(f"{PROG} selftest: sampler, weight mapping and end-to-end checks skipped "
                  f"({e})")
            return 0
        rows = _selftest_sampler()
        print(f"{PROG} selftest: sampler (uniform without replacement, blocks): ok")
        devices = [torch.device("cpu")]
        if torch.cuda.is_available():
            devices.append(torch.device("cuda"))
        for dev in devices:
            folder = os.path.join(tmp, dev.type)
            os.makedirs(folder)
            _selftest_end_to_end(folder, rows, dev)
            print(f"{PROG} selftest: training, checkpoint loading and inference on "
                  f"{dev.type}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
