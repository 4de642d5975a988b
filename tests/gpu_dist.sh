#!/usr/bin/env bash
# Data-parallel training on two GPUs (docs/distributed.md), with the built-in launcher and NCCL:
# two 2-GPU runs give the same bits; 2 GPUs against 1 at the same global batch give the same
# parameters within 1e-4 relative and the same epoch losses within 1e-5 (cuBLAS sums a split
# batch in another order); more ranks than GPUs is refused. In hybrid mode with a hot tier of
# 10%, so that both GPUs' workers fetch cold rows. Skipped (77) with fewer than two GPUs or
# without NCCL (NG_NCCL_LIBRARY, PyTorch's environment, or the loader's path).
# $1: the neargnn binary.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
gpus=$("$BIN" version | sed -n 's/^cuda: on, \([0-9]*\) visible.*/\1/p')
if [ -z "$gpus" ] || [ "$gpus" -lt 2 ]; then
  echo "gpu_dist: skipped: needs two visible GPUs (${gpus:-0})"
  exit 77
fi
if [ -z "${NG_NCCL_LIBRARY:-}" ]; then
  for py in /opt/torch/.venv/bin/python3 python3; do
    d=$("$py" -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null) || continue
    [ -e "$d/lib/libnccl.so.2" ] && export NG_NCCL_LIBRARY=$d/lib/libnccl.so.2 && break
  done
fi
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
CMP="$(dirname "$0")/dist_compare.py"

"$BIN" generate --out "$TMP/g" --nodes 100000 --avg-degree 12 --dim 128 --classes 8 \
  --train 0.05 --val 0.01 --test 0.01 --seed 4 --progress none >/dev/null ||
  { echo "FAIL: cannot generate the graph" >&2; exit 1; }
common=(--dataset "$TMP/g" --device cuda --mode hybrid --cache-ratio 0.1 --fanouts "10,5"
  --hidden 64 --dropout 0 --optimizer sgd --momentum 0.9 --lr 0.1 --batch 1024
  --eval-every 0 --progress none --workers 2)

run 0 train "${common[@]}" --epochs 3 --ranks 2 --checkpoint "$TMP/a.st" --json "$TMP/a.json"
if grep -q "NCCL: cannot load" "$TMP/err"; then
  echo "gpu_dist: skipped: no NCCL ($(grep -m1 'NCCL' "$TMP/err"))"
  exit 77
fi
has out "2 ranks, all-reduce"
run 0 train "${common[@]}" --epochs 3 --ranks 2 --checkpoint "$TMP/b.st"
cmp -s "$TMP/a.st" "$TMP/b.st" || fail "two 2-GPU runs with the same seed wrote different bits"
run 0 train "${common[@]}" --epochs 3 --checkpoint "$TMP/one.st" --json "$TMP/one.json"
"$PY" "$CMP" "$TMP/one.st" "$TMP/a.st" --rel 1e-4 >"$TMP/cmp" 2>&1 ||
  fail "2 GPUs vs 1: $(cat "$TMP/cmp")"
echo "gpu_dist: 2 GPUs vs 1: $(cat "$TMP/cmp")"
"$PY" - "$TMP/one.json" "$TMP/a.json" <<'PY' || fail "2 GPUs vs 1: epoch losses or JSON differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["ranks"] == 2
for x, y in zip(a["epochs"], b["epochs"]):
    assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"]), (x["loss"], y["loss"])
    assert y["allreduce_ms"] > 0, y
PY
run 1 train "${common[@]}" --ranks $((gpus + 1)) --epochs 1
has err "GPUs: one rank per GPU"
cli_finish
