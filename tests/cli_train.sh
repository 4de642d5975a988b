#!/usr/bin/env bash
# `neargnn train` and `neargnn demo`: a run on Cora with a JSON summary, checkpoint + resume
# giving the uninterrupted run's losses bit for bit, usage and runtime errors, and a small demo.
# $1: the neargnn binary; NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}

"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
common=(--dataset "$TMP/cora" --model sage --fanouts 10,5 --hidden 16 --batch 64 --dropout 0.5
  --normalize-features row --weight-decay 5e-4,0 --lr 0.05 --seed 3 --progress none --eval-every 0)

# A plain run with a JSON summary.
run 0 train "${common[@]}" --epochs 3 --json "$TMP/full.json"
has out test-acc
[ "$(grep -c '^epoch' "$TMP/out")" = 3 ] || fail "train printed $(grep -c '^epoch' "$TMP/out") epoch lines, not 3"
python3 - "$TMP/full.json" <<'PY' || fail "JSON summary malformed"
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["epochs"]) == 3, j["epochs"]
assert [e["epoch"] for e in j["epochs"]] == [0, 1, 2]
assert 0.3 < j["test_acc"] <= 1.0 and 0.0 <= j["val_acc"] <= 1.0, j
assert all(e["loss"] > 0 and e["iterations"] == 3 for e in j["epochs"]), j["epochs"]
PY

# A timeline of the runtime's threads, summed up by eval/harness/trace_summary.py; a trace that
# cannot be written is a runtime error.
tr=(--mode hybrid --workers 2 --cache-ratio 0.3 --epochs 3)
run 0 train "${common[@]}" "${tr[@]}" --trace "$TMP/trace.json"
has err "spans written to $TMP/trace.json"
python3 "$(dirname "$0")/../eval/harness/trace_summary.py" "$TMP/trace.json" --skip-epochs 1 \
  >"$TMP/trace.txt" || fail "trace_summary failed on the trace"
grep -q "^device thread" "$TMP/trace.txt" && grep -q "^workers: 2 thread" "$TMP/trace.txt" ||
  fail "trace summary lacks the device thread or the workers: $(cat "$TMP/trace.txt")"
[ "$(grep -cE '^ +[12] +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9.]+|-)$' "$TMP/trace.txt")" = 2 ] ||
  fail "trace summary does not list epochs 1 and 2: $(cat "$TMP/trace.txt")"
run 1 train "${common[@]}" "${tr[@]}" --trace "$TMP/no/such/dir/trace.json"
has err "trace"

# The ready window: 4 x workers by default, else --ready-window N (the controller logs the ring's
# capacity every period); it changes when packages wait, never the bits.
win=(--period-ms 0.01)
run 0 train "${common[@]}" "${tr[@]}" "${win[@]}" --json "$TMP/window-default.json" \
  --telemetry "$TMP/window-default.csv"
run 0 train "${common[@]}" "${tr[@]}" "${win[@]}" --ready-window 3 --json "$TMP/window-3.json" \
  --telemetry "$TMP/window-3.csv"
python3 - "$TMP/window-default" "$TMP/window-3" <<'PY' || fail "--ready-window: wrong capacity or other losses"
import csv, json, sys
caps = [{r["ring_capacity"] for r in csv.DictReader(open(p + ".csv.decisions.csv"))} for p in sys.argv[1:3]]
assert caps == [{"8"}, {"3"}], caps
a, b = (json.load(open(p + ".json")) for p in sys.argv[1:3])
assert [e["loss"] for e in a["epochs"]] == [e["loss"] for e in b["epochs"]], (a["epochs"], b["epochs"])
PY
run 2 train "${common[@]}" "${tr[@]}" --ready-window 1025
has err ready-window

# Interrupted after 2 epochs, resumed to 3: the last epoch's loss is the uninterrupted one's.
run 0 train "${common[@]}" --epochs 2 --checkpoint "$TMP/ck.safetensors"
[ -s "$TMP/ck.safetensors" ] || fail "no checkpoint written"
run 0 train "${common[@]}" --epochs 3 --resume "$TMP/ck.safetensors" --json "$TMP/resumed.json"
python3 - "$TMP/full.json" "$TMP/resumed.json" <<'PY' || fail "resumed run differs from the uninterrupted one"
import json, sys
full, resumed = (json.load(open(p)) for p in sys.argv[1:3])
assert [e["epoch"] for e in resumed["epochs"]] == [2], resumed["epochs"]
assert resumed["epochs"][0]["loss"] == full["epochs"][2]["loss"], (resumed, full)
assert resumed["test_acc"] == full["test_acc"], (resumed["test_acc"], full["test_acc"])
PY

# A checkpoint trained with another seed is refused, naming both seeds (issue 26; it loaded).
seed4=("${common[@]}")
for i in "${!seed4[@]}"; do [ "${seed4[i]}" = --seed ] && seed4[i + 1]=4; done
run 1 train "${seed4[@]}" --epochs 3 --resume "$TMP/ck.safetensors"
has err "seed 3 but this trainer has seed 4"

# --checkpoint-every (issue 26; the option did not exist): periodic checkpoints, mid-epoch ones
# included (3 iterations an epoch), change no bit of the run's final checkpoint; a run killed
# with SIGKILL once one exists resumes from it to the uninterrupted run's bytes.
run 0 train "${common[@]}" --epochs 3 --checkpoint "$TMP/ref.st"
run 0 train "${common[@]}" --epochs 3 --checkpoint "$TMP/every.st" --checkpoint-every 1
cmp -s "$TMP/ref.st" "$TMP/every.st" || fail "--checkpoint-every 1 changed the final checkpoint"
"$BIN" train "${common[@]}" --epochs 3 --checkpoint "$TMP/killed.st" --checkpoint-every 1 \
  >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  [ -e "$TMP/killed.st" ] && break
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ -s "$TMP/killed.st" ] || fail "no periodic checkpoint before the kill"
run 0 train "${common[@]}" --epochs 3 --checkpoint "$TMP/killed.st" --resume "$TMP/killed.st"
cmp -s "$TMP/ref.st" "$TMP/killed.st" || fail "resuming the killed run did not give the same bytes"
run 0 train "${common[@]}" --epochs 1 --checkpoint "$TMP/m.st" --checkpoint-every 0.001m
[ -s "$TMP/m.st" ] || fail "--checkpoint-every 0.001m wrote no checkpoint"
run 2 train "${common[@]}" --epochs 1 --checkpoint-every 5
has err "needs --checkpoint"
run 2 train "${common[@]}" --epochs 1 --checkpoint "$TMP/x.st" --checkpoint-every 0
has err "checkpoint-every"

# Usage errors (exit 2) and runtime errors (exit 1).
run 2 train --dataset "$TMP/cora" --fanouts 10,x
has err fanouts
run 2 train --dataset "$TMP/cora" --fanouts 10,0
run 2 train --dataset "$TMP/cora" --fanouts 10,5 --weight-decay 1,2,3
run 2 train --epochs 1
run 1 train --dataset "$TMP/nope" --epochs 1
has err "$TMP/nope"
run 1 train "${common[@]}" --epochs 1 --device tpu
has err tpu
run 1 train "${common[@]}" --epochs 1 --resume "$TMP/none.st"

# A dataset without a validation split trains, reports n/a, and still writes its checkpoint.
"$BIN" generate --out "$TMP/noval" --nodes 3000 --dim 16 --classes 4 --val 0 --progress none \
  >/dev/null || fail "cannot generate a dataset without a validation split"
run 0 train --dataset "$TMP/noval" --fanouts 5 --hidden 8 --epochs 2 --progress none \
  --checkpoint "$TMP/noval.st" --json "$TMP/noval.json"
has out "val-acc    n/a"
has out test-acc
[ -s "$TMP/noval.st" ] || fail "no checkpoint for the dataset without a validation split"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["val_acc"] is None and j["test_acc"] > 0 and j["seed"] == 1, j' \
  "$TMP/noval.json" || fail "JSON of the run without a validation split"

# A small demo: generates, trains, evaluates, cleans up after itself.
# GAT: trains and checkpoints (heads recorded: another --heads is refused by name); mode
# partial is refused with the reason; hybrid runs raw-row workers and says so.
gat=(--dataset "$TMP/cora" --model gat --hidden 4 --fanouts 10,5 --batch 64 --dropout 0.5
  --attn-dropout 0.5 --lr 0.01 --seed 3 --progress none --eval-every 0)
run 0 train "${gat[@]}" --heads 4 --epochs 2 --checkpoint "$TMP/gat.safetensors"
has out test-acc
run 0 evaluate --dataset "$TMP/cora" --checkpoint "$TMP/gat.safetensors" --progress none
has out test
run 1 train "${gat[@]}" --heads 2 --epochs 3 --resume "$TMP/gat.safetensors"
has err "trained with --heads x --hidden 4 x 4 (layer 0), this run uses 2 x 4"
run 1 train "${gat[@]}" --heads 4 --epochs 1 --mode partial --cache-ratio 0.3
has err "cannot be partially aggregated"
run 0 train "${gat[@]}" --heads 4 --epochs 1 --mode hybrid --workers 2 --cache-ratio 0.3
has err "every worker transfers raw rows"

# --precision bf16: features.bf16.npy is written beside the dataset on the first run (raw Cora
# features are 0 and 1, exact in bf16: the same losses as fp32), mapped by the next, and every
# mode gives the same bits; row-normalised features round, so their losses differ from fp32's.
raw=(--dataset "$TMP/cora" --model sage --fanouts 10,5 --hidden 16 --batch 64 --dropout 0.5
  --lr 0.05 --seed 3 --progress none --eval-every 0 --epochs 2 --cache-ratio 0.3)
rm -f "$TMP/cora/features.bf16.npy"
run 0 train "${raw[@]}" --mode partial --workers 2 --json "$TMP/raw32.json"
run 0 train "${raw[@]}" --mode partial --workers 2 --precision bf16 --json "$TMP/raw16.json"
[ -f "$TMP/cora/features.bf16.npy" ] || fail "the first bf16 run wrote no features.bf16.npy"
has err "the bf16 table"
run 0 train "${raw[@]}" --mode zerocopy --workers 1 --precision bf16 --json "$TMP/raw16z.json"
run 0 train "${common[@]}" --epochs 2 --precision bf16 --json "$TMP/norm16.json"
python3 - "$TMP" <<'PY' || fail "bf16 runs disagree"
import json, sys
t = sys.argv[1]
load = lambda n: json.load(open(f"{t}/{n}.json"))
loss = lambda j: [e["loss"] for e in j["epochs"]]
r32, r16, r16z = load("raw32"), load("raw16"), load("raw16z")
assert loss(r32) == loss(r16) == loss(r16z), (loss(r32), loss(r16), loss(r16z))
assert r16["epochs"][-1]["cpu_cold_bytes"] * 2 == r32["epochs"][-1]["cpu_cold_bytes"]
assert loss(load("norm16")) != loss(load("full"))[:2]
PY

TMPDIR="$TMP" run 0 demo --nodes 5000 --epochs 1 --progress none
has out test-acc
[ -z "$(ls "$TMP" | grep neargnn-demo)" ] || fail "demo left its temporary dataset behind"

cli_finish
