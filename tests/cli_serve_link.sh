#!/usr/bin/env bash
# Pair scores over HTTP (docs/serving.md, "Pair scores"): `train --task link --checkpoint` on Cora
# split by `split-edges`, `serve` of that checkpoint, and a KServe v2 request with inputs src_ids
# and dst_ids answered with output "score": the decoder's dot product of the served embeddings
# (the same request's ends asked as node embeddings, summed in float32 in column order, as the
# decoder does: the same bits), the same bits however the pairs are split into requests; the
# metadata lists the pair inputs and the score; shapes that differ, an id out of range and a
# node output asked of pairs are 400s; a node-classification checkpoint's server refuses pairs.
# $1: the neargnn binary; NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}
PY=/usr/bin/python3
$PY -c 'import numpy' 2>/dev/null || PY=python3
command -v curl >/dev/null || { echo "FAIL: curl is not installed (scripts/setup.sh)" >&2; exit 1; }

"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
run 0 split-edges --dataset "$TMP/cora" --val 0.05 --test 0.1 --neg-per-pos 1 --neg-source uniform \
  --seed 1
# shellcheck disable=SC2054 # "5,5" is one value
model=(--model sage --fanouts 5,5 --hidden 16)
run 0 train --dataset "$TMP/cora" --task link "${model[@]}" --embed-dim 8 --decoder dot --batch 512 \
  --epochs 2 --eval-every 0 --seed 3 --progress none --checkpoint "$TMP/link.st"
has err "checkpoint: $TMP/link.st"
[ -s "$TMP/link.st" ] || fail "train --task link --checkpoint wrote nothing"
run 0 train --dataset "$TMP/cora" "${model[@]}" --batch 256 --epochs 1 --eval-every 0 \
  --progress none --checkpoint "$TMP/node.st"

PID=
URL=
# start_server CHECKPOINT: serve in the background on a free port; sets PID and URL.
start_server() {
  "$BIN" serve --dataset "$TMP/cora" --checkpoint "$1" --host 127.0.0.1 --port 0 --threads 2 \
    --workers 1 >"$TMP/serve.out" 2>"$TMP/serve.err" &
  PID=$!
  URL=
  for _ in $(seq 1 1200); do
    URL=$(sed -n 's/^listening on //p' "$TMP/serve.out" | head -n 1)
    [ -n "$URL" ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$URL" ] || fail "serve did not start: $(cat "$TMP/serve.err")"
}
stop_server() {
  [ -n "$PID" ] || return 0
  kill -TERM "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null
  PID=
}
trap 'stop_server; rm -rf "$TMP"' EXIT
code() { curl -s -o "$TMP/body" -w '%{http_code}' "$@"; }
post() { code -X POST "$URL/infer" -H 'Content-Type: application/json' --data-binary "$1"; }
# pairs FIRST COUNT [DST_COUNT]: a pair request over test pairs FIRST .. FIRST + COUNT - 1 (the
# positives, then their negatives, of links/test_pos.npy and test_neg.npy).
pairs() {
  $PY - "$TMP/cora/links" "$@" <<'PY'
import json, sys, numpy as np
d, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
nd = int(sys.argv[4]) if len(sys.argv) > 4 else n
p = np.concatenate([np.load(d + "/test_pos.npy").reshape(-1, 2), np.load(d + "/test_neg.npy").reshape(-1, 2)])
p = p[first:first + max(n, nd)]
src, dst = [int(x) for x in p[:n, 0]], [int(x) for x in p[:nd, 1]]
print(json.dumps({"inputs": [
    {"name": "src_ids", "datatype": "INT64", "shape": [n], "data": src},
    {"name": "dst_ids", "datatype": "INT64", "shape": [nd], "data": dst}]}))
PY
}

start_server "$TMP/link.st"
[ -n "$URL" ] || { cli_finish; exit 1; }
[ "$(code "$URL")" = 200 ] || fail "model metadata: $(cat "$TMP/body")"
$PY - "$TMP/body" <<'PY' || fail "metadata of a link model: $(cat "$TMP/body")"
import json, sys
m = json.load(open(sys.argv[1]))
assert [i["name"] for i in m["inputs"]] == ["node_ids", "src_ids", "dst_ids"], m["inputs"]
outs = {o["name"]: o for o in m["outputs"]}
assert outs["score"] == {"name": "score", "datatype": "FP32", "shape": [-1]}, outs
assert m["parameters"]["decoder"] == "dot", m["parameters"]
PY
n=$($PY -c "import numpy as np; print(2 * len(np.load('$TMP/cora/links/test_pos.npy')))")
[ "$(post "$(pairs 0 "$n")")" = 200 ] || fail "pair request: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/all.json"
half=$((n / 2 + 7))
[ "$(post "$(pairs 0 $half)")" = 200 ] || fail "first part: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/a.json"
[ "$(post "$(pairs $half $((n - half)))")" = 200 ] || fail "second part: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/b.json"
# The ends' embeddings (the last layer, layer 1) from a node request.
$PY - "$TMP/cora/links" > "$TMP/ends.json" <<'PY'
import json, sys, numpy as np
d = sys.argv[1]
p = np.concatenate([np.load(d + "/test_pos.npy").reshape(-1, 2), np.load(d + "/test_neg.npy").reshape(-1, 2)])
ends = sorted(set(int(x) for x in p.reshape(-1)))
print(json.dumps({"inputs": [{"name": "node_ids", "datatype": "INT64", "shape": [len(ends)], "data": ends}],
                  "parameters": {"embedding_layer": 1}, "outputs": [{"name": "embedding"}]}))
PY
[ "$(post "@$TMP/ends.json")" = 200 ] || fail "embeddings: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/emb.json"
$PY - "$TMP/cora/links" "$TMP/all.json" "$TMP/a.json" "$TMP/b.json" "$TMP/ends.json" \
  "$TMP/emb.json" <<'PY' || fail "pair scores wrong"
import json, sys, numpy as np
d = sys.argv[1]
a, p1, p2, req, emb = (json.load(open(f)) for f in sys.argv[2:7])
p = np.concatenate([np.load(d + "/test_pos.npy").reshape(-1, 2), np.load(d + "/test_neg.npy").reshape(-1, 2)])
n = len(p)
(out,) = a["outputs"]
assert out["name"] == "score" and out["datatype"] == "FP32" and out["shape"] == [n], out["shape"]
s = np.array(out["data"], dtype=np.float32)
parts = np.array(p1["outputs"][0]["data"] + p2["outputs"][0]["data"], dtype=np.float32)
assert s.tobytes() == parts.tobytes(), "the same pairs in other requests gave other bits"
ends = req["inputs"][0]["data"]
e = emb["outputs"][0]
assert e["shape"] == [len(ends), 8], e["shape"]
h = dict(zip(ends, np.array(e["data"], dtype=np.float32).reshape(-1, 8)))
for i, (u, v) in enumerate(p):
    acc = np.float32(0)
    for c in range(8):  # the decoder's order: one float32 sum over the columns
        acc = np.float32(acc + np.float32(h[int(u)][c] * h[int(v)][c]))
    assert acc.tobytes() == s[i].tobytes(), (i, int(u), int(v), float(acc), float(s[i]))
assert len(set(s.tolist())) > n // 2, "scores all alike"
PY
[ "$(post "$(pairs 0 3 2)")" = 400 ] && grep -q 'one shape' "$TMP/body" ||
  fail "shapes that differ: $(cat "$TMP/body")"
bad='{"inputs":[{"name":"src_ids","datatype":"INT64","shape":[1],"data":[1]},{"name":"dst_ids","datatype":"INT64","shape":[1],"data":[2708]}]}'
[ "$(post "$bad")" = 400 ] && grep -q 'dst_ids\[0\]' "$TMP/body" ||
  fail "an id out of range: $(cat "$TMP/body")"
bad='{"inputs":[{"name":"src_ids","datatype":"INT64","shape":[1],"data":[1]},{"name":"dst_ids","datatype":"INT64","shape":[1],"data":[2]}],"outputs":[{"name":"class"}]}'
[ "$(post "$bad")" = 400 ] && grep -q 'score' "$TMP/body" || fail "class of pairs: $(cat "$TMP/body")"
stop_server

start_server "$TMP/node.st"
[ -n "$URL" ] || { cli_finish; exit 1; }
[ "$(post "$(pairs 0 2)")" = 400 ] && grep -q 'link-prediction checkpoint' "$TMP/body" ||
  fail "pairs asked of a node checkpoint: $(cat "$TMP/body")"
stop_server
cli_finish
