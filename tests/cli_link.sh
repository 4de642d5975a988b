#!/usr/bin/env bash
# `neargnn split-edges` and `neargnn train --task link` on Cora: the split's files and counts,
# a short link training whose loss bits agree across modes, the test metrics and the JSON
# summary; usage and runtime errors. $1: the neargnn binary; NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}

run 0 convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none
run 1 train --dataset "$TMP/cora" --task link --epochs 1 --progress none
has err "split-edges"
run 0 split-edges --dataset "$TMP/cora" --val 0.05 --test 0.1 --seed 2 --neg-per-pos 10 \
  --undirected
has out "4488 train, 263 val, 527 test edges (undirected), 10 source negatives"
for f in links.json indptr.npy indices.npy train_pos.npy val_pos.npy val_neg.npy test_pos.npy \
  test_neg.npy; do
  [ -s "$TMP/cora/links/$f" ] || fail "split-edges wrote no links/$f"
done
# Two epochs of sampled mini-batches in two modes with most rows cold: the same loss bits.
for mode in baseline hybrid; do
  run 0 train --dataset "$TMP/cora" --task link --model sage --fanouts 5,5 --hidden 32 \
    --embed-dim 16 --batch 1024 --epochs 2 --eval-every 1 --mode "$mode" --cache-ratio 0.2 \
    --decoder dot --neg uniform --neg-per-pos 1 --seed 4 --json "$TMP/$mode.json" --progress none
  grep '^epoch 2:' "$TMP/out" | sed 's/ *[0-9.]* it\/s.*//' >"$TMP/$mode.loss"
  has out "test: auc"
done
cmp -s "$TMP/baseline.loss" "$TMP/hybrid.loss" ||
  fail "link loss differs between modes: $(cat "$TMP/baseline.loss") vs $(cat "$TMP/hybrid.loss")"
# Three workers split by the controller, three packages ahead of the device: the same bits, and
# the split in the JSON summary.
run 0 train --dataset "$TMP/cora" --task link --model sage --fanouts 5,5 --hidden 32 \
  --embed-dim 16 --batch 1024 --epochs 2 --eval-every 1 --mode hybrid --cache-ratio 0.2 \
  --decoder dot --neg uniform --neg-per-pos 1 --seed 4 --workers 3 --lookahead 3 \
  --json "$TMP/deep.json" --progress none
grep '^epoch 2:' "$TMP/out" | sed 's/ *[0-9.]* it\/s.*//' >"$TMP/deep.loss"
cmp -s "$TMP/baseline.loss" "$TMP/deep.loss" ||
  fail "link loss differs with 3 workers: $(cat "$TMP/baseline.loss") vs $(cat "$TMP/deep.loss")"
has out "split "
python3 -c '
import json, sys
for e in json.load(open(sys.argv[1]))["epochs"]:
    assert e["partial_workers"] + e["transfer_workers"] == 3, e
    assert e["iter_ms_median"] > 0 and e["iter_ms_p99"] >= e["iter_ms_median"], e
' "$TMP/deep.json" || fail "train --task link --workers 3: bad split in the JSON summary"
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["task"] == "link" and len(j["epochs"]) == 2, j
t = j["test"]
assert 0.5 < t["auc"] <= 1 and 0 < t["ap"] <= 1 and 0 < t["mrr"] <= 1, t
assert t["hits10"] <= t["hits50"] <= t["hits100"] == 1.0, t
assert t["seconds"] >= 0, t
for e in j["epochs"]:
    # cJSON writes 15 digits when they read back within an ulp or so: loss_hex holds the bits.
    assert abs(float.fromhex(e["loss_hex"]) - e["loss"]) <= 4e-16 * abs(e["loss"]), e
    assert e["iterations"] > 0 and e["edges_per_s"] > 0 and e["it_per_s"] > 0, e
assert j["train_edges"] == 4488, j
' "$TMP/hybrid.json" || fail "train --task link: bad JSON summary"
# The MLP decoder with degree negatives trains too.
run 0 train --dataset "$TMP/cora" --task link --fanouts 5,5 --hidden 16 --batch 2048 --epochs 1 \
  --eval-every 0 --decoder mlp --neg degree --neg-per-pos 2 --self-pairs --progress none
has out "test: auc"
# generate --links: the same seed writes the same files; a split of it trains.
for d in g1 g2; do
  run 0 generate --links --out "$TMP/$d" --nodes 3000 --avg-degree 8 --dim 16 --communities 20 \
    --seed 5 --progress none
done
for f in indptr.npy indices.npy labels.npy features.npy; do
  cmp -s "$TMP/g1/$f" "$TMP/g2/$f" || fail "generate --links: $f differs for one seed"
done
grep -q 'links communities=20' "$TMP/g1/dataset.json" || fail "dataset.json lacks the communities"
run 0 split-edges --dataset "$TMP/g1" --val 0 --test 0.05 --neg-per-pos 20 --seed 1
run 0 train --dataset "$TMP/g1" --task link --fanouts 5,5 --hidden 16 --batch 512 --epochs 1 \
  --eval-every 0 --progress none
has out "test: auc"
# Usage and runtime errors.
run 2 generate --out "$TMP/g3" --communities 5
has err "--communities applies with --links only"
run 2 generate --links --hetero mag --out "$TMP/g3"
run 2 split-edges --dataset "$TMP/cora" --val 1.5
run 2 split-edges --dataset "$TMP/cora" --neg-source random
run 2 split-edges --dataset "$TMP/cora" --undirected --directed
run 1 split-edges --dataset "$TMP/cora" --val 0.6 --test 0.5
has err "sum below 1"
run 1 split-edges --dataset "$TMP/none"
run 2 train --dataset "$TMP/cora" --task edge
cli_finish
