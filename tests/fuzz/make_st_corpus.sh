#!/usr/bin/env bash
# Writes the seed corpus of fuzz_safetensors (committed under tests/fuzz/corpus/safetensors/):
# files laid out byte for byte as safetensors.torch.save_file writes them (metadata first, data
# sorted by alignment, header padded with spaces to 8 bytes), plus a few subtly broken ones so
# that the fuzzer starts next to every validation rule. Needs python3 (standard library only).
set -euo pipefail
cd "$(dirname "$0")"
rm -rf corpus/safetensors
mkdir -p corpus/safetensors
python3 - <<'EOF'
import json, struct

SIZE = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "U8": 1, "I8": 1, "BOOL": 1}
FMT = {"F64": "d", "I64": "q", "F32": "f", "I32": "i", "U8": "B", "I8": "b", "BOOL": "B"}

def st(tensors, metadata=None, pad=True):
    """tensors: name -> (dtype, shape, values). Lays the data out as the reference writer does."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    order = sorted(tensors, key=lambda n: (-SIZE[tensors[n][0]], n))
    offsets = {}
    for name in order:
        dtype, shape, values = tensors[name]
        raw = struct.pack("<" + FMT[dtype] * len(values), *values)
        offsets[name] = (len(data), len(data) + len(raw))
        data += raw
    for name, (dtype, shape, _) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets[name])}
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data

def raw(text, data=b""):
    text = text.encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data

seeds = {
    "w_f32": st({"w": ("F32", [2], [1.0, 2.0])}),
    "pt_meta": st({"w": ("F32", [2], [1.0, 2.0])}, {"format": "pt"}),
    "every_dtype": st({
        "f32": ("F32", [2, 3], [0.5, -1, 2, 3.25, 4, -5]),
        "f64": ("F64", [], [2.5]),
        "i32": ("I32", [2, 2, 2], [1, -2, 3, -4, 5, -6, 7, -8]),
        "i64": ("I64", [3], [-(1 << 40), 0, 7]),
        "u8": ("U8", [3], [1, 2, 255]),
        "i8": ("I8", [2, 1], [-1, 5]),
        "mask": ("BOOL", [5], [1, 0, 1, 1, 0]),
        "empty": ("F32", [0, 4], []),
    }, {"format": "pt", "epoch": "3", "note": "caf\u00e9 \"quoted\""}),
    "empty_header": raw("{}"),
    "unpadded_u8": st({"b": ("U8", [3], [1, 2, 3])}, pad=False),
    "rank4": st({"t": ("F32", [1, 2, 1, 2], [1, 2, 3, 4])}),
    "whitespace": raw('{ "a" : {\n\t"dtype" : "I64", "shape" : [ 1 ], "data_offsets" : [ 0 , 8 ] } }',
                      struct.pack("<q", 9)),
    "bad_overlap": raw('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                       '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(range(1, 13))),
    "bad_gap": raw('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                   '"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}', bytes(range(1, 13))),
    "bad_size": raw('{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(range(1, 9))),
    "bad_dtype": raw('{"w":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}}', bytes(range(1, 9))),
    "bad_meta": raw('{"__metadata__":{"epoch":3}}'),
    "bad_offsets": raw('{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,1e300]}}', bytes(8)),
    "bad_header_len": struct.pack("<Q", 1 << 40) + b"{}",
}
for name, blob in seeds.items():
    with open(f"corpus/safetensors/{name}.safetensors", "wb") as f:
        f.write(blob)
EOF
ls corpus/safetensors
