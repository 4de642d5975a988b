#!/usr/bin/env bash
# Writes the seed corpora of the converter and option-parser fuzz targets (committed under
# tests/fuzz/corpus/; re-run this after changing a converter's input layout):
#   corpus/planetoid/  planetoid folders in fuzz_planetoid.c's input layout
#   corpus/snap/       SNAP edge lists behind fuzz_snap.c's option byte
#   corpus/ogb/        OGB folders in fuzz_ogb.c's input layout (plain and gzip sections)
#   corpus/args/       command lines for fuzz_args.c, one argument per line
# Needs python3 (standard library only).
set -euo pipefail
cd "$(dirname "$0")"
rm -rf corpus/planetoid corpus/snap corpus/ogb corpus/args
mkdir -p corpus/planetoid corpus/snap corpus/ogb corpus/args
python3 - <<'PY'
import gzip, struct

SEP = b"\n@@\n"

def npy(descr, shape, data):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    d = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}"
    total = -(-(10 + len(d) + 1) // 64) * 64
    head = d + " " * (total - 10 - len(d) - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + data

def arr(fmt, values):
    return struct.pack("<" + fmt * len(values), *values)

def write(folder, name, data):
    with open(f"corpus/{folder}/{name}", "wb") as f:
        f.write(data)

# planetoid: edges.txt, features.npy, labels.npy, train.txt, val.txt, test.txt
edges = b"0 1\n1 2\n2 3\n# comment\n3 0\n1 1\n0 1\n"
feat = npy("<f4", (4, 2), arr("f", [0.5, -1, 2, 3.25, 4, -5, 0, 1]))
lab = npy("<i8", (4,), arr("q", [0, 1, -1, 1]))
write("planetoid", "full", SEP.join([edges, feat, lab, b"0\n", b"1\n", b"3\n"]))
write("planetoid", "no_splits", SEP.join([edges, npy("<f8", (4, 1), arr("d", [1, 2, 3, 4])),
                                          npy("<i4", (4,), arr("i", [0, 0, 1, 1]))]))
write("planetoid", "bad_edge", SEP.join([b"0 1\n1 x\n", feat, lab, b"0\n"]))
write("planetoid", "bad_split", SEP.join([edges, feat, lab, b"0\n2\n", b"0\n", b"3\n"]))

# snap: option byte, then the edge list
write("snap", "dense", b"\x00" + b"# nodes 4\n0\t1\n1\t2\n2 3\n3 0\n")
write("snap", "sparse_ids", b"\x01" + b"10 2000000000\n2000000000 7\n7 10\n7 7\n")
write("snap", "features_labels", b"\x26" + b"0 1\n1 2\n2 0\n2 3\n")
write("snap", "bad_line", b"\x00" + b"0 1\n1 -2\n")
write("snap", "crlf", b"\x31" + b"0 1\r\n1 2\r\n")

# ogb: option byte, then num-node-list, edge, node-feat, node-label, split train/valid/test
ogb = [b"4\n", b"0,1\n1,2\n2,3\n3,0\n", b"0.5,1\n-1,2e-3\n3,4\n5,6\n", b"0\n1\nnan\n1\n",
       b"0\n", b"1\n", b"3\n"]
write("ogb", "full", b"\x00" + SEP.join(ogb))
write("ogb", "undirected_no_split", b"\x01" + SEP.join(ogb[:2] + [b""] + ogb[3:4]))
write("ogb", "gzip", b"\x00" + SEP.join([gzip.compress(s, mtime=0) for s in ogb[:4]]))
write("ogb", "bad_count", b"\x00" + SEP.join([b"4\n4\n"] + ogb[1:]))
write("ogb", "bad_feature", b"\x00" + SEP.join(ogb[:2] + [b"1,2\n3\n4,5\nnan,1\n"] + ogb[3:]))

# args: one argument per line
write("args", "full", b"--dataset\nd\n--model=gcn\n--verbose\n--hidden\n64\n--nodes\n-3\n"
      b"--seed\n1.5k\n--cache-bytes\n2GiB\n--lr\n1e-3\n--dropout=0.5\n--cache-ratio\n1\nx\n--\n-y")
write("args", "help", b"--help")
write("args", "bad_range", b"--dataset=d\n--hidden\n0\nx")
write("args", "typo", b"--datset\nd\nx")
write("args", "repeat", b"--dataset\nd\n--dataset\ne\nx\ny\nz\nw")
PY
