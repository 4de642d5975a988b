#!/usr/bin/env bash
# Checkpoints as the commands read them (issue 37): a flipped byte in a metadata key or value
# makes `evaluate`, `predict`, `embed` and `serve` exit 1 naming the damage (they exited 0 with
# other answers); `embed` and `serve` start from --dataset and --checkpoint alone and give the
# trained model's classes; a model option that differs from the checkpoint is refused, naming
# the option and both values.
# $1: the neargnn binary; NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}
PY=/usr/bin/python3
$PY -c 'import numpy' 2>/dev/null || PY=python3
command -v curl >/dev/null || { echo "FAIL: curl is not installed (scripts/setup.sh)" >&2; exit 1; }

"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
CK=$TMP/ck.st
run 0 train --dataset "$TMP/cora" --model sage --fanouts 10,5 --hidden 16 --normalize-features row \
  --batch 64 --epochs 2 --eval-every 0 --lr 0.05 --seed 3 --progress none --checkpoint "$CK" \
  --predictions "$TMP/pred.npy"

# flip FROM TO OUT: OUT is the checkpoint with every FROM replaced by TO (same length); with
# WEIGHT=1 also the first weight of layers.0.w_self blown up to about 1e37.
flip() {
  WEIGHT=${WEIGHT:-0} $PY - "$CK" "$1" "$2" "$3" <<'PY' || fail "cannot flip $1"
import json, os, struct, sys
src, a, b, dst = sys.argv[1:]
buf = bytearray(open(src, "rb").read())
assert len(a) == len(b) and buf.count(a.encode()) > 0
buf = buf.replace(a.encode(), b.encode())
if os.environ["WEIGHT"] == "1":
    n = struct.unpack("<Q", buf[:8])[0]
    begin = json.loads(buf[8:8 + n])["layers.0.w_self"]["data_offsets"][0]
    buf[8 + n + begin + 3] = 0x7E
open(dst, "wb").write(buf)
PY
}

# A renamed "checksums" key with a corrupted weight: evaluate exited 0 with a loss of 1e36.
WEIGHT=1 flip '"checksums"' '"chdcksums"' "$TMP/keyflip.st"
run 1 evaluate --checkpoint "$TMP/keyflip.st" --dataset "$TMP/cora" --progress none
has err "'chdcksums' is unknown"
# Single flips of settings: self_loop, activation; an edit of train.normalize.
flip "self_loop=0" "self_loop=1" "$TMP/loop.st"
flip "activation=relu" "activation=none" "$TMP/act.st"
flip '"train.normalize":"row"' '"train.normalize":"raw"' "$TMP/norm.st"
for f in loop act; do
  run 1 evaluate --checkpoint "$TMP/$f.st" --dataset "$TMP/cora" --progress none
  has err "metadata fails its checksum"
  run 1 predict --checkpoint "$TMP/$f.st" --dataset "$TMP/cora" --progress none
  has err "metadata fails its checksum"
  run 1 embed --checkpoint "$TMP/$f.st" --dataset "$TMP/cora" --out "$TMP/x.npy" --progress none
  has err "metadata fails its checksum"
  run 1 serve --checkpoint "$TMP/$f.st" --dataset "$TMP/cora" --port 0 --workers 1
  has err "metadata fails its checksum"
done
run 1 predict --checkpoint "$TMP/norm.st" --dataset "$TMP/cora" --progress none
has err "metadata fails its checksum"
[ -e "$TMP/x.npy" ] && fail "a refused embed left $TMP/x.npy"

# embed from the checkpoint alone: the trained model's classes.
run 0 embed --checkpoint "$CK" --dataset "$TMP/cora" --out "$TMP/logits.npy" --progress none
has err "2708 nodes x 7 (logits) written"
run 0 embed --checkpoint "$CK" --dataset "$TMP/cora" --layer 0 --hidden 16 --seed 99 \
  --out "$TMP/emb.npy" --progress none
$PY - "$TMP" <<'PY' || fail "embed's logits disagree with train --predictions"
import sys
import numpy as np
d = sys.argv[1]
lg, pred, emb = np.load(d + "/logits.npy"), np.load(d + "/pred.npy"), np.load(d + "/emb.npy")
assert (lg.argmax(axis=1) == pred).all(), int((lg.argmax(axis=1) != pred).sum())
assert emb.shape == (2708, 16), emb.shape
PY
# Options that differ from the checkpoint: refused, naming the option and both values.
run 1 embed --checkpoint "$CK" --dataset "$TMP/cora" --aggregator sum --out "$TMP/x.npy" \
  --progress none
has err "trained with --aggregator mean (layer 0), this run uses sum"
run 1 embed --checkpoint "$CK" --dataset "$TMP/cora" --normalize-features none --out "$TMP/x.npy" \
  --progress none
has err "trained with --normalize-features row, this run uses none"
run 1 embed --checkpoint "$CK" --dataset "$TMP/cora" --hidden 32 --out "$TMP/x.npy" --progress none
has err "trained with --hidden 16 (layer 0), this run uses 32"
run 2 embed --checkpoint "$CK" --dataset "$TMP/cora" --fanouts 10 --out "$TMP/x.npy" --progress none
has err "--fanouts 10 gives 1 layers, but the checkpoint's model has 2"
run 0 embed --help
has out "the checkpoint's"

# serve from the checkpoint alone: the trained model's classes for every node.
"$BIN" serve --dataset "$TMP/cora" --checkpoint "$CK" --host 127.0.0.1 --port 0 --threads 2 \
  --workers 1 >"$TMP/serve.out" 2>"$TMP/serve.err" &
PID=$!
trap 'kill -KILL "$PID" 2>/dev/null; rm -rf "$TMP"' EXIT
URL=
for _ in $(seq 1 1200); do
  URL=$(sed -n 's/^listening on //p' "$TMP/serve.out" | head -n 1)
  [ -n "$URL" ] && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.05
done
if [ -z "$URL" ]; then
  fail "serve did not start from --dataset and --checkpoint: $(cat "$TMP/serve.err")"
else
  ids=$($PY -c 'print(list(range(2708)))')
  curl -s -o "$TMP/body" -X POST "$URL/infer" -H 'Content-Type: application/json' --data-binary \
    "{\"inputs\":[{\"name\":\"node_ids\",\"datatype\":\"INT64\",\"shape\":[2708],\"data\":$ids}]}"
  $PY - "$TMP" <<'PY' || fail "serve's classes disagree with train --predictions"
import json, sys
import numpy as np
d = sys.argv[1]
out = {o["name"]: o for o in json.load(open(d + "/body"))["outputs"]}
cls = np.array(out["class"]["data"])
pred = np.load(d + "/pred.npy")
assert cls.shape == pred.shape and (cls == pred).all(), int((cls != pred).sum())
PY
fi
kill -TERM "$PID" 2>/dev/null
wait "$PID" 2>/dev/null || fail "serve did not exit 0 on SIGTERM: $(cat "$TMP/serve.err")"
run 1 serve --dataset "$TMP/cora" --checkpoint "$CK" --aggregator max --port 0 --workers 1
has err "trained with --aggregator mean (layer 0), this run uses max"
run 1 serve --dataset "$TMP/cora" --checkpoint "$CK" --normalize-features none --port 0 --workers 1
has err "trained with --normalize-features row, this run uses none"
cli_finish
