#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets (committed under tests/fuzz/corpus/; re-run this
# after changing the dataset format):
#   tests/fuzz/corpus/npy/      .npy files as numpy writes them, valid and subtly broken
#   tests/fuzz/corpus/dataset/  whole datasets in fuzz_dataset.c's input layout
# Needs python3 (standard library only).
set -euo pipefail
cd "$(dirname "$0")"
rm -rf corpus/npy corpus/dataset
mkdir -p corpus/npy corpus/dataset
python3 - <<'EOF'
import json, struct

def npy(descr, shape, data=b"", major=1, align=64, fortran=False):
    """A .npy image byte for byte as numpy.save writes it."""
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    d = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': ({dims}), }}"
    pre = 10 if major == 1 else 12
    total = -(-(pre + len(d) + 1) // align) * align
    head = d + " " * (total - pre - len(d) - 1) + "\n"
    size = struct.pack("<H", len(head)) if major == 1 else struct.pack("<I", len(head))
    return b"\x93NUMPY" + bytes([major, 0]) + size + head.encode() + data

def arr(fmt, values):
    return struct.pack("<" + fmt * len(values), *values)

seeds = {
    "f32_2x3": npy("<f4", (2, 3), arr("f", [0.5, -1, 2, 3.25, 4, -5])),
    "i32_5": npy("<i4", (5,), arr("i", [3, -1, 4, 1, 5])),
    "i64_scalar": npy("<i8", (), arr("q", [42])),
    "u1_2x2x2": npy("|u1", (2, 2, 2), bytes(range(1, 9))),
    "b1_empty": npy("|b1", (0,)),
    "f8_v2": npy("<f8", (3,), arr("d", [1.5, 2.5, -3.5]), major=2),
    "i8_v3_native": npy("=i8", (2,), arr("q", [7, 9]), major=3),
    "i1_align16": npy("|i1", (4,), bytes([1, 255, 3, 128]), align=16),
    "bad_bigendian": npy(">f4", (1,), b"\x3f\x80\x00\x00"),
    "bad_fortran": npy("<f4", (1, 2), arr("f", [1, 2]), fortran=True),
    "bad_truncated": npy("<i4", (4,), arr("i", [1, 2, 3])),
}
for name, data in seeds.items():
    with open(f"corpus/npy/{name}.npy", "wb") as f:
        f.write(data)

SEP = b"\n@@\n"

def dataset(nodes, indptr, indices, index_dtype="int32", features=None, feature_dim=0,
            labels=None, classes=0, splits=(None, None, None), name="seed"):
    meta = {"format": "neargnn-dataset", "version": 1, "name": name, "nodes": nodes,
            "edges": len(indices), "undirected": False, "index_dtype": index_dtype,
            "feature_dim": feature_dim, "feature_dtype": "float32", "classes": classes,
            "splits": {k: len(s or []) for k, s in zip(("train", "val", "test"), splits)},
            "source": "make_corpus.sh"}
    parts = [json.dumps(meta, indent=2).encode(),
             npy("<i8", (nodes + 1,), arr("q", indptr)),
             npy("<i4" if index_dtype == "int32" else "<i8", (len(indices),),
                 arr("i" if index_dtype == "int32" else "q", indices)),
             npy("<f4", (nodes, feature_dim), arr("f", features)) if feature_dim else b"",
             npy("<i4", (nodes,), arr("i", labels)) if classes else b""]
    parts += [npy("<i8", (len(s),), arr("q", s)) if s else b"" for s in splits]
    return SEP.join(parts)

indptr = [0, 2, 5, 8, 9, 9, 10]
indices = [1, 2, 0, 2, 1, 0, 1, 3, 2, 3]
features = [0.25 * i - 1.5 for i in range(18)]
labels = [0, 1, 2, 0, -1, 1]
full = dataset(6, indptr, indices, features=features, feature_dim=3, labels=labels, classes=3,
               splits=([0, 1], [2], [3, 5]))
corpus = {
    "full": full,
    "int64_minimal": dataset(6, indptr, indices, index_dtype="int64"),
    "empty_graph": dataset(0, [0], []),
    "labels_no_splits": dataset(6, indptr, indices, labels=labels, classes=3),
    "bad_monotone": dataset(6, [0, 2, 5, 4, 9, 9, 10], indices),
    "bad_split_overlap": dataset(6, indptr, indices, labels=labels, classes=3,
                                 splits=([0, 1], [1], None)),
    "bad_json": full.replace(b'"nodes": 6', b'"nodes": "6"', 1),
    "bad_feature_nan": dataset(6, indptr, indices, features=features[:7] + [float("nan")]
                               + features[8:], feature_dim=3),
    "bad_index": dataset(6, indptr, indices[:4] + [6] + indices[5:]),
    "bad_label": dataset(6, indptr, indices, labels=labels[:2] + [3] + labels[3:], classes=3),
    "bad_split_dup": dataset(6, indptr, indices, labels=labels, classes=3,
                             splits=([0, 1, 0], None, [5])),
}
for name, data in corpus.items():
    with open(f"corpus/dataset/{name}", "wb") as f:
        f.write(data)
EOF
echo "wrote $(ls corpus/npy | wc -l) npy and $(ls corpus/dataset | wc -l) dataset seeds"
