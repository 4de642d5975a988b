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

# A NaN in a row that open's sample skips (row 1 of 10000): --check-features full finds it, and
# inference whose output is NaN fails naming the node instead of printing class 0 or a NaN loss.
run 0 generate --out "$TMP/g" --nodes 10000 --avg-degree 4 --dim 8 --classes 3 --seed 5 --progress none
cp -r "$TMP/g" "$TMP/gnan"
python3 - "$TMP/gnan/features.npy" <<'PY' || fail "cannot plant a NaN"
import struct, sys
with open(sys.argv[1], "r+b") as f:
    head = f.read(10)
    off = 10 + struct.unpack("<H", head[8:10])[0]
    f.seek(off + (1 * 8 + 3) * 4)
    f.write(struct.pack("<f", float("nan")))
PY
gc=(--model sage --fanouts 5,5 --hidden 8 --batch 0 --seed 3 --progress none --eval-every 0 --epochs 1)
run 1 train --dataset "$TMP/gnan" "${gc[@]}" --check-features full
has err "features[1, 3] is NaN"
run 0 train --dataset "$TMP/g" "${gc[@]}" --checkpoint "$TMP/g.ck"
run 1 predict --checkpoint "$TMP/g.ck" --dataset "$TMP/gnan" --nodes 0,1 --progress none
has err "NaN or infinite for node(s) 1"
run 1 predict --checkpoint "$TMP/g.ck" --dataset "$TMP/gnan" --split all --progress none
has err "non-finite result"
run 1 evaluate --checkpoint "$TMP/g.ck" --dataset "$TMP/gnan" --progress none
has err "NaN or infinite for node(s)"
run 1 evaluate --checkpoint "$TMP/g.ck" --dataset "$TMP/gnan" --progress none --check-features full
has err "features[1, 3] is NaN"
run 0 evaluate --checkpoint "$TMP/g.ck" --dataset "$TMP/g" --progress none --check-features full

# --ranks: every rank needs a core, and the ranks' memory estimate must fit the limit.
cores=$(nproc)
run 2 train "${common[@]}" --ranks $((cores + 1))
has err "every rank needs a core of its own, and this process may use $cores; use --ranks $cores or fewer"
if [ "$cores" -ge 2 ]; then
  run 0 train "${common[@]}" --max-host-memory 3G
  run 1 train "${common[@]}" --ranks 2 --max-host-memory 3G
  has err "--ranks 2: the ranks' memory estimate is"
  has err "above --max-host-memory 3.00 GiB; use --ranks 1 or fewer"
fi

# Parse errors name the file, line and column, never the text (a link to a secret leaks nothing).
printf 'SECRET-LINE root:x:0:0\n' >"$TMP/secret"
ln -s "$TMP/secret" "$TMP/edges.txt"
run 1 convert --format snap --in "$TMP/edges.txt" --out "$TMP/leak" --progress none
has err "edges.txt:1: expected two node ids"
grep -q SECRET "$TMP/err" && fail "convert echoed the file's text: $(cat "$TMP/err")"
run 1 embed --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" --hidden 8 --fanouts 5,5 \
  --seed 3 --nodes "$TMP/edges.txt" --out "$TMP/emb.npy" --progress none
has err "edges.txt:1: not a node id"
grep -q SECRET "$TMP/err" && fail "embed --nodes echoed the file's text: $(cat "$TMP/err")"
run 2 predict --checkpoint "$TMP/ck.safetensors" --dataset "$TMP/cora" --nodes "@$TMP/edges.txt"
has err "line 1: not a node id"
grep -q SECRET "$TMP/err" && fail "predict --nodes @FILE echoed the file's text: $(cat "$TMP/err")"

cli_finish
