#!/usr/bin/env python3
"""Compares the parameters of two neargnn checkpoints (safetensors) for the distributed tests.

    dist_compare.py A B [--rel 1e-6]

Every parameter tensor (layers.*) of B must be A's within `rel` relative: |a - b| <= rel * max|a|
for every element of the tensor, and the optimizer's step counts must agree. Prints the largest
relative difference; exit status 1 when a tensor differs by more."""
import argparse
import array
import json
import struct
import sys

# No numpy: the GPU machine's python3 may lack it.
DTYPES = {"F32": "f", "F64": "d", "I32": "i", "I64": "q"}


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    meta = head.pop("__metadata__", {})
    out = {}
    for name, v in head.items():
        lo, hi = v["data_offsets"]
        out[name] = array.array(DTYPES[v["dtype"]], raw[8 + n + lo:8 + n + hi])
    return out, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rel", type=float, default=1e-6)
    args = ap.parse_args()
    a, ma = load(args.a)
    b, mb = load(args.b)
    if ma.get("step") != mb.get("step") or ma.get("epochs_done") != mb.get("epochs_done"):
        print(f"steps differ: {ma.get('step')} vs {mb.get('step')}", file=sys.stderr)
        return 1
    params = [k for k in a if k.startswith("layers.")]
    if not params or sorted(params) != sorted(k for k in b if k.startswith("layers.")):
        print(f"parameter tensors differ: {sorted(a)} vs {sorted(b)}", file=sys.stderr)
        return 1
    worst, worst_name = 0.0, ""
    for k in params:
        x, y = a[k], b[k]
        if len(x) != len(y):
            print(f"{k}: {len(x)} vs {len(y)} values", file=sys.stderr)
            return 1
        scale = max(max((abs(v) for v in x), default=0.0), 1e-30)
        rel = max((abs(p - q) for p, q in zip(x, y)), default=0.0) / scale
        if rel > worst:
            worst, worst_name = rel, k
    print(f"largest relative difference {worst:.3g} ({worst_name or 'none'})")
    return 0 if worst <= args.rel else 1


if __name__ == "__main__":
    sys.exit(main())
