#!/usr/bin/env bash
# `neargnn serve` end to end (issue 21): a tiny model trained on Cora, served on 127.0.0.1 on a
# free port and driven with curl: health, metadata, infer (classes equal to `train
# --predictions`, same bits for the same request), 400/404/405/413/503, a graph update read back
# at once and again after kill -9 and a restart on the same --log, concurrent updates (group
# commit) killed mid-stream with none acknowledged lost, the load generator for a few
# seconds, and SIGTERM draining to exit 0. Usage errors too.
# $1: the neargnn binary; NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}
# NG_SERVE_DEVICE=cuda runs the server on the GPU (the GPU machine's check; CI uses the CPU).
ROOT=$(cd "$(dirname "$0")/.." && pwd)
command -v curl >/dev/null || { echo "FAIL: curl is not installed (scripts/setup.sh)" >&2; exit 1; }

"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
# shellcheck disable=SC2054 # "10,5" is one value
model=(--model sage --fanouts 10,5 --hidden 16 --normalize-features row)
run 0 train --dataset "$TMP/cora" "${model[@]}" --batch 64 --dropout 0.5 --weight-decay 5e-4,0 \
  --lr 0.05 --seed 3 --epochs 3 --eval-every 0 --progress none --checkpoint "$TMP/ck.st" \
  --predictions "$TMP/pred.npy"
[ -s "$TMP/ck.st" ] && [ -s "$TMP/pred.npy" ] || { echo "FAIL: no checkpoint or predictions" >&2; exit 1; }

PID=
URL=
BASE=
# start_server ARGS...: starts serve in the background on a free port; sets PID, URL, BASE.
start_server() {
  "$BIN" serve --dataset "$TMP/cora" --checkpoint "$TMP/ck.st" "${model[@]}" --host 127.0.0.1 \
    --port 0 --threads 2 --workers 1 --device "${NG_SERVE_DEVICE:-cpu}" "$@" >"$TMP/serve.out" \
    2>"$TMP/serve.err" &
  PID=$!
  URL=
  for _ in $(seq 1 1200); do
    URL=$(sed -n 's/^listening on //p' "$TMP/serve.out" | head -n 1)
    [ -n "$URL" ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
  BASE=${URL%/v2/models/*}
  [ -n "$URL" ] || fail "serve did not start: $(cat "$TMP/serve.err")"
}
# stop_server SIGNAL: signals the server, waits, sets STOP_RC.
stop_server() {
  STOP_RC=
  [ -n "$PID" ] || return 0
  kill -"$1" "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null
  STOP_RC=$?
  PID=
}
trap 'stop_server KILL; rm -rf "$TMP"' EXIT
# code ARGS...: curl's status code; the body goes to $TMP/body, the headers to $TMP/headers.
code() { curl -s -o "$TMP/body" -D "$TMP/headers" -w '%{http_code}' "$@"; }
# infer JSON_IDS [EXTRA]: POSTs an infer request for the ids with every output; status code.
infer() {
  code -X POST "$URL/infer" -H 'Content-Type: application/json' --data-binary \
    "{\"id\":\"t\",\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[$(
      python3 -c "import sys,json; print(len(json.loads(sys.argv[1])))" "$1")],\"data\":$1}]${2:-}}"
}

start_server --log "$TMP/updates.log" --max-body 1M
[ -n "$URL" ] || { cli_finish; exit 1; }
case $URL in http://127.0.0.1:[0-9]*/v2/models/*) ;; *) fail "serve printed '$URL', not a URL" ;; esac

# Health and metadata.
[ "$(code "$BASE/v2/health/live")" = 200 ] || fail "health/live: $(cat "$TMP/body")"
[ "$(code "$BASE/v2/health/ready")" = 200 ] || fail "health/ready: $(cat "$TMP/body")"
[ "$(code "$URL/ready")" = 200 ] || fail "model ready: $(cat "$TMP/body")"
[ "$(code "$BASE/v2")" = 200 ] && grep -q '"neargnn"' "$TMP/body" || fail "server metadata: $(cat "$TMP/body")"
[ "$(code "$URL")" = 200 ] || fail "model metadata: $(cat "$TMP/body")"
python3 - "$TMP/body" <<'PY' || fail "model metadata malformed: $(cat "$TMP/body")"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["inputs"] == [{"name": "node_ids", "datatype": "INT64", "shape": [-1]}], m["inputs"]
outs = {o["name"]: o for o in m["outputs"]}
assert outs["logits"]["datatype"] == "FP32" and outs["logits"]["shape"] == [-1, 7], outs
assert outs["embedding"]["datatype"] == "FP32" and outs["embedding"]["shape"] == [-1, 16], outs
assert outs["class"]["datatype"] == "INT64" and outs["class"]["shape"] == [-1], outs
assert m["parameters"]["nodes"] == 2708, m
PY

# Inference: shapes, class = argmax(logits) = the trainer's prediction, same request same bits.
ids=$(python3 -c "import json; print(json.dumps(list(range(0, 2708, 13)) + [2707]))")
[ "$(infer "$ids")" = 200 ] || fail "infer: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/infer1.json"
[ "$(infer "$ids")" = 200 ] || fail "infer again: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/infer2.json"
python3 - "$TMP/infer1.json" "$TMP/infer2.json" "$TMP/pred.npy" "$ids" <<'PY' || fail "infer answers wrong"
import ast, json, struct, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ids = json.loads(sys.argv[4])
raw = open(sys.argv[3], "rb").read()
hlen = struct.unpack("<H", raw[8:10])[0]
head = ast.literal_eval(raw[10:10 + hlen].decode("latin1"))
assert head["descr"] == "<i4", head
pred = struct.unpack_from("<%di" % head["shape"][0], raw, 10 + hlen)
assert a["model_name"] and a["id"] == "t", a.get("id")
outs = {o["name"]: o for o in a["outputs"]}
n = len(ids)
assert outs["logits"]["shape"] == [n, 7] and len(outs["logits"]["data"]) == 7 * n, outs["logits"]["shape"]
assert outs["embedding"]["shape"] == [n, 16] and len(outs["embedding"]["data"]) == 16 * n
assert outs["class"]["datatype"] == "INT64" and outs["class"]["shape"] == [n]
cls, lg = outs["class"]["data"], outs["logits"]["data"]
for i, v in enumerate(ids):
    row = lg[7 * i:7 * i + 7]
    assert cls[i] == row.index(max(row)), (v, cls[i], row)
    assert cls[i] == pred[v], "node %d: serve says class %d, train --predictions %d" % (v, cls[i], pred[v])
assert a["outputs"] == b["outputs"], "the same request gave other bits"
PY
# Sampled: the same fanouts and seed give the same bits.
samp=',"parameters":{"fanouts":[5,3],"seed":7},"outputs":[{"name":"logits"}]'
[ "$(infer "[1,2,3]" "$samp")" = 200 ] || fail "sampled infer: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/s1.json"
[ "$(infer "[1,2,3]" "$samp")" = 200 ] || fail "sampled infer again: $(cat "$TMP/body")"
python3 - "$TMP/s1.json" "$TMP/body" <<'PY' || fail "sampled requests differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert [o["name"] for o in a["outputs"]] == ["logits"], a["outputs"]
assert a["outputs"] == b["outputs"]
PY

# Bad input: 400 with a KServe error body; unknown paths 404; wrong method 405; the server goes on.
bad() { # WANT DESCRIPTION CURL_ARGS...
  local want=$1 what=$2
  shift 2
  local got
  got=$(code "$@")
  [ "$got" = "$want" ] || fail "$what: status $got, expected $want: $(cat "$TMP/body")"
  if [ "$want" != 405 ]; then
    python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['error']" "$TMP/body" 2>/dev/null ||
      fail "$what: no KServe error body: $(cat "$TMP/body")"
  fi
}
bad 400 "malformed JSON" -X POST "$URL/infer" --data-binary '{"inputs": ['
bad 400 "FP32 ids" -X POST "$URL/infer" --data-binary \
  '{"inputs":[{"name":"node_ids","datatype":"FP32","shape":[1],"data":[1]}]}'
bad 400 "shape mismatch" -X POST "$URL/infer" --data-binary \
  '{"inputs":[{"name":"node_ids","datatype":"INT64","shape":[3],"data":[1]}]}'
bad 400 "unknown node id" -X POST "$URL/infer" --data-binary \
  '{"inputs":[{"name":"node_ids","datatype":"INT64","shape":[1],"data":[2708]}]}'
bad 400 "bad fanouts" -X POST "$URL/infer" --data-binary \
  '{"inputs":[{"name":"node_ids","datatype":"INT64","shape":[1],"data":[1]}],"parameters":{"fanouts":[5]}}'
bad 400 "id written 1.0" -X POST "$URL/infer" --data-binary \
  '{"inputs":[{"name":"node_ids","datatype":"INT64","shape":[1],"data":[1.0]}]}'
grep -q 'data\[0\]' "$TMP/body" || fail "id 1.0: the error does not name the entry: $(cat "$TMP/body")"
bad 400 "conflicting Content-Length" -X POST "$URL/infer" -H 'Content-Length: 74' \
  -H 'Content-Length: 79' --data-binary \
  '{"inputs":[{"name":"node_ids","datatype":"INT64","shape":[1],"data":[1]}]}'
bad 404 "unknown model" "$BASE/v2/models/nope"
bad 404 "unknown model infer" -X POST "$BASE/v2/models/nope/infer" --data-binary '{}'
bad 404 "unknown path" "$BASE/v3/whatever"
bad 405 "GET infer" "$URL/infer"
python3 -c "print('{\"inputs\":[' + ' ' * (2 << 20) + ']}')" >"$TMP/big.json"
bad 413 "2 MiB body with --max-body 1M" -X POST "$URL/infer" --data-binary "@$TMP/big.json"
[ "$(code "$BASE/v2/health/live")" = 200 ] || fail "the server stopped answering after bad input"

# A graph update: a new node (node 100's features, an edge to and from node 5), and node 5's
# features replaced by node 200's. Read at once, then after kill -9 and a restart on the log.
[ "$(infer "[5]" ',"outputs":[{"name":"logits"}]')" = 200 ] || fail "infer 5: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/before5.json"
python3 - "$TMP/cora/features.npy" "$TMP/update.json" <<'PY' || fail "cannot write the update"
import ast, json, struct, sys
raw = open(sys.argv[1], "rb").read()
major = raw[6]
hlen = struct.unpack("<H", raw[8:10])[0] if major == 1 else struct.unpack("<I", raw[8:12])[0]
start = 10 if major == 1 else 12
head = ast.literal_eval(raw[start:start + hlen].decode("latin1"))
assert head["descr"] == "<f4", head
dim = head["shape"][1]
row = lambda v: list(struct.unpack_from("<%df" % dim, raw, start + hlen + 4 * dim * v))
json.dump({"id": "u1", "add_nodes": {"count": 1, "features": [row(100)]},
           "add_edges": [[2708, 5], [5, 2708]],
           "update_features": {"ids": [5], "values": [row(200)]}}, open(sys.argv[2], "w"))
PY
[ "$(code -X POST "$URL/graph" --data-binary "@$TMP/update.json")" = 200 ] ||
  fail "graph update: $(cat "$TMP/body")"
python3 - "$TMP/body" <<'PY' || fail "update answer wrong: $(cat "$TMP/body")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["first_new_id"] == 2708 and r["nodes"] == 2709 and r["id"] == "u1", r
assert r["added_nodes"] == 1 and r["added_edges"] == 2 and r["updated_features"] == 1, r
PY
[ "$(infer "[5,2708]" ',"outputs":[{"name":"logits"}]')" = 200 ] ||
  fail "read-your-writes: infer of the new node: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/after.json"
python3 - "$TMP/before5.json" "$TMP/after.json" <<'PY' || fail "the update did not change node 5's answer"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["outputs"][0]["shape"] == [2, 7], b["outputs"][0]["shape"]
assert a["outputs"][0]["data"] != b["outputs"][0]["data"][:7]
PY
[ "$(code "$URL")" = 200 ] && grep -q '"nodes":2709' "$TMP/body" || fail "metadata after the update: $(cat "$TMP/body")"
[ "$(code "$BASE/metrics")" = 200 ] || fail "/metrics: $(cat "$TMP/body")"
for m in 'neargnn_http_requests_total{endpoint="infer",code="200"}' \
  'neargnn_http_requests_total{endpoint="infer",code="400"} 7' \
  'neargnn_http_requests_total{endpoint="infer",code="413"} 1' \
  'neargnn_http_request_duration_seconds_bucket{endpoint="infer",le="0.01"}' \
  'neargnn_infer_batch_nodes_count' 'neargnn_engine_hot_rows_total' \
  'neargnn_engine_queue_depth' 'neargnn_engine_updates_applied_total 1' 'neargnn_graph_nodes 2709'; do
  grep -qF "$m" "$TMP/body" || fail "/metrics lacks $m"
done

stop_server KILL
start_server --log "$TMP/updates.log" --max-body 1M
[ "$(infer "[5,2708]" ',"outputs":[{"name":"logits"}]')" = 200 ] ||
  fail "after kill -9 and a restart, the new node is gone: $(cat "$TMP/body")"
python3 - "$TMP/after.json" "$TMP/body" <<'PY' || fail "after kill -9 and a restart, other answers"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["outputs"] == b["outputs"], "replayed graph answers differently"
PY

# Group commit under kill -9: four clients post updates at once (each adds a distinct new edge
# s -> 2708), and the server is killed while they run. After a restart on the log, every update
# that was answered 200 is there: one update removing all of their edges is taken (removing an
# edge the graph lacks is a 400), and the log replayed at least that many records.
[ "$(code "$BASE/metrics")" = 200 ] && grep -q '^neargnn_engine_update_syncs_total 0$' "$TMP/body" ||
  fail "/metrics lacks neargnn_engine_update_syncs_total 0 after a restart: $(grep update_syncs "$TMP/body")"
rm -f "$TMP"/acked.*
clients=()
for c in 1 2 3 4; do
  (for i in $(seq 1 50); do
    s=$((c * 100 + i))
    r=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 -X POST "$URL/graph" \
      --data-binary "{\"add_edges\":[[$s,2708]]}")
    [ "$r" = 200 ] || break
    echo "$s" >>"$TMP/acked.$c"
  done) &
  clients+=($!)
done
acked() { cat "$TMP"/acked.* 2>/dev/null | wc -l; }
# Kill once some are acknowledged (bounded: a loaded machine may be slow to start the clients).
for _ in $(seq 1 600); do
  [ "$(acked)" -ge 20 ] && break
  sleep 0.05
done
stop_server KILL
wait "${clients[@]}" 2>/dev/null
n_acked=$(acked)
[ "$n_acked" -ge 1 ] || fail "group commit: no update was acknowledged before kill -9"
start_server --log "$TMP/updates.log" --max-body 1M
replayed=$(sed -n 's/.* \([0-9][0-9]*\) update(s) replayed$/\1/p' "$TMP/serve.err")
[ -n "$replayed" ] && [ "$replayed" -ge $((n_acked + 1)) ] ||
  fail "group commit: $n_acked updates acknowledged (+1 before), '$replayed' replayed after kill -9"
python3 - "$TMP/remove.json" "$TMP"/acked.* <<'PY' || fail "cannot write the removal"
import json, sys
src = [int(l) for p in sys.argv[2:] for l in open(p)]
assert len(src) == len(set(src)), "an edge was acknowledged twice"
json.dump({"remove_edges": [[s, 2708] for s in src]}, open(sys.argv[1], "w"))
PY
[ "$(code -X POST "$URL/graph" --data-binary "@$TMP/remove.json")" = 200 ] ||
  fail "group commit: an acknowledged update is gone after kill -9: $(cat "$TMP/body")"
grep -q "\"removed_edges\":${n_acked}[,}]" "$TMP/body" ||
  fail "group commit: removed other than the $n_acked acknowledged edges: $(cat "$TMP/body")"

# The load generator, a few seconds against this server.
python3 "$ROOT/eval/loadgen.py" --url "$URL" --rate 100 --duration 3 --connections 4 \
  --dataset "$TMP/cora" --hub-share 0.2 --json >"$TMP/load.json" 2>"$TMP/load.err" ||
  fail "loadgen failed: $(cat "$TMP/load.err")"
python3 - "$TMP/load.json" <<'PY' || fail "loadgen report: $(cat "$TMP/load.json")"
import json, sys
r = json.load(open(sys.argv[1]))
# A loaded machine (CI under a sanitizer) may make admission refuse some requests with 503: that
# is the server's answer to overload, not a failure; any other error is.
assert set(r["errors"]) <= {"503"}, r["errors"]
assert r["ok"] > 100 and r["achieved_rate"] > 30, r
lat = r["latency_ms"]
assert lat["hub"]["count"] > 0 and lat["ordinary"]["count"] > 0, lat
assert 0 < lat["all"]["p50"] <= lat["all"]["p99"] <= lat["all"]["max"], lat
PY

# SIGTERM while requests are in flight: they are answered, then exit 0.
python3 "$ROOT/eval/loadgen.py" --url "$URL" --rate 200 --duration 2 --connections 4 \
  --max-node 2708 --json >"$TMP/drain.json" 2>/dev/null &
lg=$!
# Stop once the generator's requests are being answered (a loaded CI machine may take a while to
# start it): at least 20 more infer answers than before it started.
answered() {
  curl -s "$BASE/metrics" | awk '/^neargnn_http_requests_total\{endpoint="infer",code="200"\}/ {n += $2}
    END {print n + 0}'
}
before=$(answered)
for _ in $(seq 1 200); do
  [ "$(answered)" -ge $((before + 20)) ] && break
  sleep 0.05
done
stop_server TERM
[ "$STOP_RC" = 0 ] || fail "SIGTERM: serve exited $STOP_RC, not 0: $(cat "$TMP/serve.err")"
grep -q "draining" "$TMP/serve.err" || fail "SIGTERM: no drain message: $(cat "$TMP/serve.err")"
wait "$lg"
python3 - "$TMP/drain.json" <<'PY' || fail "requests failed while draining: $(cat "$TMP/drain.json")"
import json, sys
r = json.load(open(sys.argv[1]))
# Requests sent after the stop find no server (connection errors) or a closing one (503);
# none gets a wrong answer, and those before it were answered.
assert set(r["errors"]) <= {"connection", "503"}, r["errors"]
assert r["ok"] >= 20, r
PY

# A full admission queue: 503 with Retry-After (one request admitted, held 300 ms for a batch).
start_server --queue 1 --max-batch 64 --max-delay-us 300000
for i in 1 2 3 4 5 6; do
  curl -s -o /dev/null -D "$TMP/h$i" -w '%{http_code}\n' -X POST "$URL/infer" --data-binary \
    '{"inputs":[{"name":"node_ids","datatype":"INT64","shape":[1],"data":[1]}]}' >"$TMP/c$i" &
done
wait_curls=$(jobs -p | grep -v "^$PID\$" || true)
# shellcheck disable=SC2086
[ -z "$wait_curls" ] || wait $wait_curls 2>/dev/null
cat "$TMP"/c[1-6] >"$TMP/codes"
grep -q '^200$' "$TMP/codes" || fail "--queue 1: no request answered: $(tr '\n' ' ' <"$TMP/codes")"
grep -q '^503$' "$TMP/codes" || fail "--queue 1: six at once, none refused: $(tr '\n' ' ' <"$TMP/codes")"
grep -qi '^Retry-After:' "$TMP"/h[1-6] || fail "503 without Retry-After"
[ "$(code "$BASE/v2/health/live")" = 200 ] || fail "the server stopped answering after 503s"
stop_server INT
[ "$STOP_RC" = 0 ] || fail "SIGINT: serve exited $STOP_RC, not 0"

# Usage and runtime errors. A serve that starts by mistake would never exit: each gets 60 s.
serve_err() { # WANT ARGS...: like run, with a time limit (exit 124 when it ran on)
  local want=$1
  shift
  LAST="neargnn serve $*"
  timeout 60 "$BIN" serve "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "$LAST: exit $rc, expected $want; stderr: $(cat "$TMP/err")"
}
serve_err 2 --dataset "$TMP/cora"
has err checkpoint
serve_err 2 --dataset "$TMP/cora" --checkpoint "$TMP/ck.st" "${model[@]}" --mode warp
has err "--mode"
serve_err 2 --dataset "$TMP/cora" --checkpoint "$TMP/ck.st" "${model[@]}" --port 70000
serve_err 2 --dataset "$TMP/cora" --checkpoint "$TMP/ck.st" "${model[@]}" --header-timeout-s 0
has err "--header-timeout-s"
serve_err 1 --dataset "$TMP/cora" --checkpoint "$TMP/none.st" "${model[@]}" --port 0
serve_err 1 --dataset "$TMP/cora" --checkpoint "$TMP/ck.st" "${model[@]}" --host localhost --port 0
has err "numeric"
# A model shape other than the checkpoint's (hidden 32, trained with 16).
serve_err 1 --dataset "$TMP/cora" --checkpoint "$TMP/ck.st" --model sage --fanouts 10,5 \
  --hidden 32 --port 0
start_server
port=${BASE##*:}
serve_err 1 --dataset "$TMP/cora" --checkpoint "$TMP/ck.st" "${model[@]}" --port "$port"
has err "cannot listen"
# Without --log the server takes no update (and starts no updater thread): 501, saying why.
[ "$(code -X POST "$URL/graph" --data-binary "@$TMP/update.json")" = 501 ] ||
  fail "graph update without a log: $(cat "$TMP/body")"
grep -q "need a log" "$TMP/body" || fail "graph update without a log: $(cat "$TMP/body")"
stop_server TERM
[ "$STOP_RC" = 0 ] || fail "SIGTERM on an idle server: exit $STOP_RC"
# GAT (docs/serving.md): with --mode partial the input layer's cold neighbours are projected and
# reduced into online-softmax states by the CPU workers; the classes are the trainer's wherever
# its top two logits are apart by more than the split's rounding, and the same request gives the
# same bits.
# shellcheck disable=SC2054 # "10,5" is one value
model=(--model gat --fanouts 10,5 --hidden 8 --heads 4 --output-heads 2 --normalize-features row)
run 0 train --dataset "$TMP/cora" "${model[@]}" --batch 64 --dropout 0.5 --lr 0.01 --seed 3 \
  --epochs 2 --eval-every 0 --progress none --checkpoint "$TMP/ck.st" --predictions "$TMP/pred.npy"
start_server --mode partial --cache-ratio 0.5
ids=$(python3 -c "import json; print(json.dumps(list(range(0, 2708, 7))))")
[ "$(infer "$ids")" = 200 ] || fail "GAT infer: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/infer1.json"
[ "$(infer "$ids")" = 200 ] || fail "GAT infer again: $(cat "$TMP/body")"
cp "$TMP/body" "$TMP/infer2.json"
python3 - "$TMP/infer1.json" "$TMP/infer2.json" "$TMP/pred.npy" "$ids" <<'PY' || fail "GAT answers wrong"
import ast, json, struct, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ids = json.loads(sys.argv[4])
raw = open(sys.argv[3], "rb").read()
hlen = struct.unpack("<H", raw[8:10])[0]
head = ast.literal_eval(raw[10:10 + hlen].decode("latin1"))
pred = struct.unpack_from("<%di" % head["shape"][0], raw, 10 + hlen)
outs = {o["name"]: o for o in a["outputs"]}
cls, lg = outs["class"]["data"], outs["logits"]["data"]
checked = 0
for i, v in enumerate(ids):
    row = sorted(lg[7 * i:7 * i + 7])
    if row[-1] - row[-2] > 1e-5:
        checked += 1
        assert cls[i] == pred[v], "node %d: serve says class %d, train --predictions %d" % (v, cls[i], pred[v])
assert checked > 0.9 * len(ids), checked
assert a["outputs"] == b["outputs"], "the same request gave other bits"
PY
stop_server TERM
[ "$STOP_RC" = 0 ] || fail "GAT server: SIGTERM: exit $STOP_RC"
cli_finish
