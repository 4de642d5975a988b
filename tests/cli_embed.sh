#!/usr/bin/env bash
# `neargnn embed`: a tiny Cora model trained with a checkpoint, then its logits and hidden-layer
# embeddings for every node and for a node list (text and .npy); shapes and dtypes read by NumPy,
# logits' argmax equal to `train --predictions` of the same checkpoint, subsets equal to the rows
# of the full output, on a renumbered dataset too (original ids); errors for bad input.
# Also `train`'s memory estimate (printed, in --json) and --max-host-memory's refusal. And
# --for-serve: layer 0's rows loaded by `serve --embedding-cache-prefill` (every node cached at
# start, answers equal to embed's logits, no row computed), refused for another dataset or
# checkpoint.
# $1: the neargnn binary; NG_DATA_DIR: the real datasets. NumPy comes from Debian's python3.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}
PY=/usr/bin/python3
$PY -c 'import numpy' 2>/dev/null || PY=python3

"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
model=(--model sage --fanouts 10,5 --hidden 16 --seed 3 --normalize-features row)
run 0 train --dataset "$TMP/cora" "${model[@]}" --batch 64 --epochs 2 --eval-every 0 --lr 0.05 \
  --progress none --checkpoint "$TMP/ck.safetensors" --predictions "$TMP/pred.npy" \
  --json "$TMP/train.json" --eval-chunk 500
has err "memory estimate"
has err "staging"

# Logits (the default), every node, with the progress lines.
run 0 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" "${model[@]}" \
  --out "$TMP/logits.npy" --progress plain
has err "2708 nodes x 7 (logits) written"
# The hidden layer's embeddings, a text node list and an .npy one.
run 0 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" "${model[@]}" --layer 0 \
  --out "$TMP/emb.npy" --progress none --eval-chunk 300
printf '2707\n# a comment\n5\n\n1000\n5\n' >"$TMP/nodes.txt"
run 0 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" "${model[@]}" --layer 0 \
  --nodes "$TMP/nodes.txt" --out "$TMP/emb-sub.npy" --progress none --infer-host-memory 1 \
  --temp-dir "$TMP"
$PY -c "import numpy; numpy.save('$TMP/nodes.npy', numpy.array([3, 2000, 17], dtype=numpy.int64))"
run 0 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" "${model[@]}" \
  --nodes "$TMP/nodes.npy" --out "$TMP/logits-sub.npy" --progress none
for f in "$TMP"/neargnn-infer* "$TMP"/*.tmp-*; do
  [ -e "$f" ] && fail "a temporary file was left behind: $f"
done

$PY - "$TMP" <<'PY' || fail "embed's outputs disagree (see above)"
import json, sys
import numpy as np
d = sys.argv[1]
lg = np.load(d + "/logits.npy")
assert lg.dtype == np.float32 and lg.shape == (2708, 7), (lg.dtype, lg.shape)
assert np.isfinite(lg).all()
pred = np.load(d + "/pred.npy")
assert pred.shape == (2708,), pred.shape
assert (lg.argmax(axis=1) == pred).all(), int((lg.argmax(axis=1) != pred).sum())
emb = np.load(d + "/emb.npy")
assert emb.dtype == np.float32 and emb.shape == (2708, 16), (emb.dtype, emb.shape)
assert (emb >= 0).all() and (emb > 0).any()  # ReLU outputs, not all zero
sub = np.load(d + "/emb-sub.npy")
assert sub.shape == (4, 16), sub.shape
assert np.array_equal(sub, emb[[2707, 5, 1000, 5]])
lsub = np.load(d + "/logits-sub.npy")
assert lsub.shape == (3, 7) and np.array_equal(lsub, lg[[3, 2000, 17]])
j = json.load(open(d + "/train.json"))
m = j["memory"]
for k in ("features", "topology", "staging", "inference", "allowance", "host_total", "peak_rss"):
    assert m[k] >= 0, (k, m)
assert m["features"] == 2708 * 1433 * 4 * 2, m  # row-normalised: the table and its copy
assert m["host_total"] == m["features"] + m["topology"] + m["staging"] + m["inference"] + m["allowance"]
assert 0 < m["peak_rss"] <= m["host_total"], m
PY

# A renumbered dataset: embed takes and writes original ids, as --predictions does.
"$BIN" reorder --dataset "$TMP/cora" --out "$TMP/cora-r" --progress none >/dev/null ||
  fail "reorder failed"
run 0 train --dataset "$TMP/cora-r" "${model[@]}" --batch 64 --epochs 1 --eval-every 0 \
  --progress none --checkpoint "$TMP/ck-r.safetensors" --predictions "$TMP/pred-r.npy"
run 0 embed --checkpoint "$TMP/ck-r.safetensors" --dataset "$TMP/cora-r" "${model[@]}" \
  --out "$TMP/logits-r.npy" --progress none
run 0 embed --checkpoint "$TMP/ck-r.safetensors" --dataset "$TMP/cora-r" "${model[@]}" \
  --nodes "$TMP/nodes.txt" --out "$TMP/logits-r-sub.npy" --progress none
$PY - "$TMP" <<'PY' || fail "embed on a renumbered dataset disagrees with --predictions"
import sys
import numpy as np
d = sys.argv[1]
lg = np.load(d + "/logits-r.npy")
assert (lg.argmax(axis=1) == np.load(d + "/pred-r.npy")).all()
assert np.array_equal(np.load(d + "/logits-r-sub.npy"), lg[[2707, 5, 1000, 5]])
PY

# Errors: a wrong model shape, a missing node list, an id out of range, a layer too deep; the
# output is never left half-written.
run 2 embed --dataset "$TMP/cora" --out "$TMP/x.npy"
has err "--checkpoint"
run 1 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" --model sage --fanouts 10,5 \
  --hidden 32 --seed 3 --normalize-features row --out "$TMP/x.npy" --progress none
has err "ck.safetensors"
run 1 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" "${model[@]}" \
  --nodes "$TMP/none.txt" --out "$TMP/x.npy" --progress none
has err "none.txt"
printf '1\n2708\n' >"$TMP/bad.txt"
run 1 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" "${model[@]}" \
  --nodes "$TMP/bad.txt" --out "$TMP/x.npy" --progress none
has err "2708"
run 1 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" "${model[@]}" --layer 2 \
  --out "$TMP/x.npy" --progress none
has err "layer 2"
[ -e "$TMP/x.npy" ] && fail "a failed embed left $TMP/x.npy"

# --for-serve: the rows the server's embedding cache holds, and what they were computed from.
run 2 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" "${model[@]}" --layer 1 \
  --for-serve --out "$TMP/x.npy" --progress none
has err "--layer 0"
run 0 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" "${model[@]}" --layer 0 \
  --for-serve --out "$TMP/l0.npy" --progress none
has err "l0.npy.prefill.json"
cmp -s "$TMP/l0.npy" "$TMP/emb.npy" || fail "--for-serve wrote other rows than --layer 0"
SPID=
trap '[ -n "$SPID" ] && kill -KILL "$SPID" 2>/dev/null; rm -rf "$TMP"' EXIT
# serve_start ARGS...: serve on a free port; sets SPID and SURL (empty when it did not start).
serve_start() {
  "$BIN" serve --host 127.0.0.1 --port 0 --threads 2 --workers 1 "$@" >"$TMP/serve.out" \
    2>"$TMP/serve.err" &
  SPID=$!
  SURL=
  for _ in $(seq 1 2400); do
    SURL=$(sed -n 's/^listening on //p' "$TMP/serve.out" | head -n 1)
    [ -n "$SURL" ] && break
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
}
# prefilled DATASET CHECKPOINT ROWS LOGITS: serve with ROWS prefilled; every node cached at start,
# answers equal to embed's LOGITS (rows in original ids: on a renumbered dataset, node v's row is
# its original id's), and no layer-0 row computed by the server.
prefilled() {
  serve_start --dataset "$1" --checkpoint "$2" --embedding-cache 4M --embedding-cache-prefill "$3"
  if [ -z "$SURL" ]; then
    fail "serve with a prefill of $3 did not start: $(cat "$TMP/serve.err")"
    return
  fi
  $PY - "$SURL" "$1" "$4" <<'PY' || fail "the server prefilled with $3 disagrees with embed"
import json, os, sys, urllib.request
import numpy as np
url, ds, logits = sys.argv[1:4]
base = url.split("/v2/models/")[0]
def metric(name):
    for line in urllib.request.urlopen(base + "/metrics", timeout=120).read().decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
assert metric("neargnn_engine_embedding_cache_rows") == 2708, metric("neargnn_engine_embedding_cache_rows")
lg = np.load(logits)
orig = np.load(ds + "/orig_id.npy") if os.path.exists(ds + "/orig_id.npy") else np.arange(2708)
ids = [0, 5, 17, 1000, 2707]
body = json.dumps({"inputs": [{"name": "node_ids", "datatype": "INT64", "shape": [len(ids)],
                               "data": ids}], "outputs": [{"name": "logits"}]}).encode()
req = urllib.request.Request(url + "/infer", data=body, headers={"Content-Type": "application/json"})
out = json.load(urllib.request.urlopen(req, timeout=120))["outputs"][0]
got = np.array(out["data"], dtype=np.float32).reshape(len(ids), 7)
assert np.array_equal(got, lg[orig[ids]]), (got, lg[orig[ids]])
assert metric("neargnn_engine_embedding_cache_misses_total") == 0
assert metric("neargnn_engine_embedding_cache_hits_total") > 0
PY
  kill -TERM "$SPID" 2>/dev/null
  wait "$SPID" 2>/dev/null || fail "serve with a prefill did not stop cleanly: $(cat "$TMP/serve.err")"
  SPID=
}
prefilled "$TMP/cora" "$TMP/ck.safetensors" "$TMP/l0.npy" "$TMP/logits.npy"
run 0 embed --checkpoint "$TMP/ck-r.safetensors" --dataset "$TMP/cora-r" "${model[@]}" --layer 0 \
  --for-serve --out "$TMP/l0-r.npy" --progress none
prefilled "$TMP/cora-r" "$TMP/ck-r.safetensors" "$TMP/l0-r.npy" "$TMP/logits-r.npy"
# Another checkpoint of the same shape, and another dataset (renumbered): refused at start.
run 1 serve --dataset "$TMP/cora" --checkpoint "$TMP/ck-r.safetensors" --port 0 \
  --embedding-cache 4M --embedding-cache-prefill "$TMP/l0.npy"
has err "another checkpoint"
run 1 serve --dataset "$TMP/cora-r" --checkpoint "$TMP/ck-r.safetensors" --port 0 \
  --embedding-cache 4M --embedding-cache-prefill "$TMP/l0.npy"
has err "another dataset"
run 1 serve --dataset "$TMP/cora" --checkpoint "$TMP/ck.safetensors" --port 0 \
  --embedding-cache-prefill "$TMP/l0.npy"
has err "cache is off"

# --max-host-memory below the estimate: refused before training, naming the estimate.
run 1 train --dataset "$TMP/cora" "${model[@]}" --epochs 1 --progress none --max-host-memory 1G
has err "estimated"
has err "--max-host-memory"
run 0 train --dataset "$TMP/cora" "${model[@]}" --epochs 1 --progress none --max-host-memory 64G
cli_finish
