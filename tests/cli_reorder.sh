#!/usr/bin/env bash
# `neargnn reorder`: Cora renumbered by each score opens and keeps its counts; usage and runtime
# errors. $1: the neargnn binary; NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}

run 0 convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none
for score in degree rpr wrpr; do
  run 0 reorder --dataset "$TMP/cora" --out "$TMP/cora-$score" --score "$score" --progress none
  run 0 info "$TMP/cora-$score" --json
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
text = json.dumps(j)
assert "2708" in text and "10556" in text, text[:300]
' "$TMP/out" || fail "reorder --score $score: info lacks Cora's counts"
  [ -s "$TMP/cora-$score/orig_id.npy" ] || fail "reorder --score $score wrote no orig_id.npy"
done
run 1 reorder --dataset "$TMP/cora" --out "$TMP/cora-degree" --progress none
has err "$TMP/cora-degree"
run 2 reorder --dataset "$TMP/cora" --out "$TMP/x" --score hottest
run 1 reorder --dataset "$TMP/none" --out "$TMP/y"
has err "$TMP/none"
cli_finish
