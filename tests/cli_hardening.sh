#!/usr/bin/env bash
# Hostile inputs to the `neargnn` command (issue 37): outputs that are not regular files and
# folders that do not exist, SNAP ids at the edge of int64, non-finite features, files that shrink
# under a run, caps on --ranks, and the messages of malformed inputs.
# $1: the neargnn binary; NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}

"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
common=(--dataset "$TMP/cora" --model sage --fanouts 5,5 --hidden 8 --batch 0 --seed 3
  --progress none --eval-every 0 --epochs 1)

# Outputs: a FIFO or a symbolic link at the destination is refused and left as it was; a missing
# folder is named.
mkfifo "$TMP/fifo"
run 1 train "${common[@]}" --json "$TMP/fifo"
has err "$TMP/fifo: is a FIFO"
[ -p "$TMP/fifo" ] || fail "train --json replaced the FIFO"
echo keep >"$TMP/target"
ln -s "$TMP/target" "$TMP/link"
run 1 train "${common[@]}" --checkpoint "$TMP/link"
has err "is a symbolic link"
[ -L "$TMP/link" ] && [ "$(cat "$TMP/target")" = keep ] || fail "train --checkpoint wrote through the link"
run 0 train "${common[@]}" --checkpoint "$TMP/ck.safetensors"
run 1 predict --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" --nodes 0,1 --out "$TMP/link"
has err "is a symbolic link"
[ -L "$TMP/link" ] && [ "$(cat "$TMP/target")" = keep ] || fail "predict --out wrote through the link"
run 1 evaluate --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" --progress none --json "$TMP/fifo"
has err "is a FIFO"
run 1 convert --format planetoid --in "$DATA/cora" --out "$TMP/data/cora" --progress none
has err "the folder $TMP/data does not exist; create it first (mkdir -p $TMP/data)"
[ -e "$TMP/data" ] && fail "convert created $TMP/data"
ls "$TMP" | grep -q '\.tmp-' && fail "a temporary was left behind: $(ls "$TMP")"

cli_finish
