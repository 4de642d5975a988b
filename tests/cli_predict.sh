#!/usr/bin/env bash
# `neargnn evaluate` and `neargnn predict` from a checkpoint (the model comes from the
# checkpoint's description), and `train --resume` refusing a checkpoint whose settings differ
# from the options, naming both values. $1: the neargnn binary; NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}

"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
common=(--dataset "$TMP/cora" --model sage --fanouts 10,5 --hidden 32 --batch 0 --dropout 0.5
  --weight-decay 5e-4,0 --normalize-features row --seed 3 --progress none --eval-every 0)
ck=$TMP/ck.safetensors
run 0 train "${common[@]}" --epochs 20 --checkpoint "$ck" --json "$TMP/train.json"
# No hit rate or worker split on the cpu device (every row is hot there).
grep '^epoch' "$TMP/out" | grep -qE 'hit|split' && fail "the cpu epoch line shows the tier: $(head -1 "$TMP/out")"

# evaluate: a line per split; its test accuracy is train's, to the digit; --json.
run 0 evaluate --checkpoint "$ck" --dataset "$TMP/cora" --progress none --json "$TMP/eval.json"
has out "split"
[ "$(grep -cE '^(train|val|test) ' "$TMP/out")" = 3 ] || fail "evaluate: $(cat "$TMP/out")"
has out "$(python3 -c "import json; print('%.4f' % json.load(open('$TMP/train.json'))['test_acc'])")"
grep -q "it/s" "$TMP/out" && fail "evaluate prints a throughput"
python3 - "$TMP/eval.json" "$TMP/train.json" <<'PY' || fail "evaluate --json disagrees with train"
import json, sys
e, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert e["test"]["accuracy"] == t["test_acc"], (e, t["test_acc"])
assert e["val"]["nodes"] == 500 and e["test"]["loss"] > 0, e
PY
run 0 evaluate --checkpoint "$ck" --dataset "$TMP/cora" --progress none --json -
python3 -c "import json, sys; json.load(open('$TMP/out'))" || fail "evaluate --json - is not JSON"

# predict: CSV of a node list, .npy of a split (classes agree with evaluate's accuracy), logits.
run 0 predict --checkpoint "$ck" --dataset "$TMP/cora" --nodes 0,5,2707 --progress none
[ "$(sed -n 1p "$TMP/out")" = "node,class" ] && [ "$(wc -l <"$TMP/out")" = 4 ] ||
  fail "predict CSV: $(cat "$TMP/out")"
grep -qE '^2707,[0-6]$' "$TMP/out" || fail "predict CSV lacks node 2707: $(cat "$TMP/out")"
run 0 predict --checkpoint "$ck" --dataset "$TMP/cora" --split test --out "$TMP/p.npy" \
  --out-ids "$TMP/ids.npy" --progress none
run 0 predict --checkpoint "$ck" --dataset "$TMP/cora" --split all --logits --out "$TMP/l.npy" \
  --progress none
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 - "$TMP" <<'PY' || fail "predict's arrays disagree with evaluate"
import json, sys
import numpy as np
d = sys.argv[1]
p, ids, l = np.load(d + "/p.npy"), np.load(d + "/ids.npy"), np.load(d + "/l.npy")
labels, test = np.load(d + "/cora/labels.npy"), np.load(d + "/cora/test_idx.npy")
assert p.dtype == np.int32 and ids.dtype == np.int64 and l.shape == (2708, 7), (p.dtype, l.shape)
assert (ids == test).all()
assert (l.argmax(1)[ids] == p).all()
acc = json.load(open(d + "/eval.json"))["test"]["accuracy"]
assert abs((p == labels[ids]).mean() - acc) < 1e-12, ((p == labels[ids]).mean(), acc)
PY
fi
run 2 predict --checkpoint "$ck" --dataset "$TMP/cora" --nodes 1,2 --split val
has err "not both"
run 2 predict --checkpoint "$ck" --dataset "$TMP/cora" --nodes 1,x
has err "--nodes"
run 2 predict --checkpoint "$ck" --dataset "$TMP/cora" --nodes 99999 --progress none
has err "99999"
run 1 evaluate --checkpoint "$TMP/none.safetensors" --dataset "$TMP/cora"
has err "none.safetensors"

# Resuming with other settings than the checkpoint's: refused, naming the setting and both values.
run 1 train "${common[@]}" --epochs 21 --resume "$ck" --aggregator max
has err "trained with --aggregator mean (layer 0), this run uses max"
c2=("${common[@]/row/none}")
run 1 train "${c2[@]}" --epochs 21 --resume "$ck"
has err "--normalize-features row, this run uses none"
c4=("${common[@]/sage/gcn}")
run 1 train "${c4[@]}" --epochs 21 --resume "$ck"
has err "--model sage, this run uses gcn"
c3=("${common[@]/10,5/5,10}")
run 1 train "${c3[@]}" --epochs 21 --resume "$ck"
has err "--fanouts 10,5, this run uses 5,10"
run 0 train "${common[@]}" --epochs 21 --resume "$ck"
has err "resumed from"
# Resuming a finished run evaluates without a throughput of 0.0 it/s.
run 0 train "${common[@]}" --epochs 20 --resume "$ck"
has out "no epoch trained"
grep -q "it/s" "$TMP/out" && fail "a run without epochs prints a throughput: $(cat "$TMP/out")"

cli_finish
