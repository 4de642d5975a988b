#!/usr/bin/env bash
# Data-parallel training on two GPUs (docs/distributed.md), with the built-in launcher and NCCL:
# two 2-GPU runs give the same bits; 2 GPUs against 1 at the same global batch give the same
# parameters within 1e-4 relative and the same epoch losses within 1e-5 (cuBLAS sums a split
# batch in another order); more ranks than GPUs is refused. In hybrid mode with a hot tier of
# 10%, so that both GPUs' workers fetch cold rows. The partitioned cache: two runs give the same
# bits, and the bits of a replicated run of the same hot set; auto's choice. Skipped (77) with fewer than two GPUs or
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

# The partitioned cache (docs/distributed.md), on the graph renumbered by degree (the rule's
# first condition needs a hot set: 10% of the rows then hold far more than 5% more entries than
# 5%): each GPU holds H = 5% of the rows, the two hold rows [0, 10%) striped (row g on GPU
# g mod 2). Two partitioned runs give the same bits, and the same bits as a replicated run whose
# hot set is the same 10% on each GPU: only where a hot row is read from changes.
"$BIN" reorder --dataset "$TMP/g" --out "$TMP/gr" --progress none >/dev/null ||
  fail "cannot reorder the graph"
rcommon=() pcommon=() prev=
for x in "${common[@]}"; do
  case $prev in
  --dataset) rcommon+=("$TMP/gr") pcommon+=("$TMP/gr") ;;
  --cache-ratio) rcommon+=(0.1) pcommon+=(0.05) ;;
  *) rcommon+=("$x") pcommon+=("$x") ;;
  esac
  prev=$x
done
run 0 train "${rcommon[@]}" --epochs 3 --ranks 2 --checkpoint "$TMP/r10.st" --json "$TMP/r10.json"
run 0 train "${pcommon[@]}" --epochs 3 --ranks 2 --cache-placement partitioned \
  --checkpoint "$TMP/p1.st" --json "$TMP/p1.json"
cp "$TMP/err" "$TMP/p1.err"
if grep -q "cache replicated" "$TMP/p1.err"; then
  # No peer-to-peer access between the two GPUs: the documented fallback, with its note.
  has err "falling back to replicated"
  echo "gpu_dist: partitioned fell back to replicated (no P2P): $(grep -m1 'cache' "$TMP/p1.err")"
else
  has err "cache partitioned: 10000 hot rows over 2 GPUs, 5000 on this one"
  run 0 train "${pcommon[@]}" --epochs 3 --ranks 2 --cache-placement partitioned \
    --checkpoint "$TMP/p2.st"
  cmp -s "$TMP/p1.st" "$TMP/p2.st" || fail "two partitioned 2-GPU runs wrote different bits"
  cmp -s "$TMP/p1.st" "$TMP/r10.st" ||
    fail "partitioned (2 x 5%) and replicated (10%) runs wrote different bits"
  "$PY" - "$TMP/r10.json" "$TMP/p1.json" <<'PY' || fail "partitioned: JSON or hit rate differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
c = b["cache"]
assert c["placement"] == "partitioned" and c["parts"] == 2, c
assert c["hot_rows"] == 10000 and c["gpu_rows"] == 5000, c
assert a["cache"]["placement"] == "replicated", a["cache"]
for x, y in zip(a["epochs"], b["epochs"]):
    assert x["loss"] == y["loss"], (x["loss"], y["loss"])
    assert x["hot_rows"] == y["hot_rows"] and x["cold_rows"] == y["cold_rows"], (x, y)
PY
  # With input dropout: the gather drops a peer's row by its global id as the replicated
  # tier's reads do.
  rdrop=() pdrop=() prev=
  for i in "${!rcommon[@]}"; do
    if [ "$prev" = --dropout ]; then rdrop+=(0.5) pdrop+=(0.5); else rdrop+=("${rcommon[$i]}") pdrop+=("${pcommon[$i]}"); fi
    prev=${rcommon[$i]}
  done
  run 0 train "${rdrop[@]}" --epochs 1 --ranks 2 --checkpoint "$TMP/rd.st"
  run 0 train "${pdrop[@]}" --epochs 1 --ranks 2 --cache-placement partitioned \
    --checkpoint "$TMP/pd.st"
  cmp -s "$TMP/rd.st" "$TMP/pd.st" ||
    fail "with dropout 0.5, partitioned (2 x 5%) and replicated (10%) wrote different bits"
  echo "gpu_dist: partitioned 2 x 5% = replicated 10%, bit for bit (dropout 0 and 0.5)"
  # auto with given rates: peer slower than 2 x H2D keeps replicated; faster partitions.
  printf '{"h2d_gbs": 25.0, "peer_gbs": 40.0, "peer_p2p": true}\n' >"$TMP/slow.json"
  printf '{"h2d_gbs": 25.0, "peer_gbs": 400.0, "peer_p2p": true}\n' >"$TMP/fast.json"
  run 0 train "${pcommon[@]}" --epochs 1 --ranks 2 --cache-placement auto \
    --cache-bench "$TMP/slow.json"
  has err "cache replicated"
  has err "not faster than 2 x host-to-device"
  run 0 train "${pcommon[@]}" --epochs 3 --ranks 2 --cache-placement auto \
    --cache-bench "$TMP/fast.json" --checkpoint "$TMP/auto-fast.st"
  has err "cache partitioned"
  cmp -s "$TMP/p1.st" "$TMP/auto-fast.st" || fail "auto (partitioned) and partitioned differ"
  # auto measuring the rates at start-up: a choice with its reason, made in under a second.
  run 0 train "${pcommon[@]}" --epochs 1 --ranks 2 --cache-placement auto --json "$TMP/auto.json"
  "$PY" - "$TMP/auto.json" <<'PY' || fail "auto: no measured choice"
import json, sys
c = json.load(open(sys.argv[1]))["cache"]
assert c["placement"] in ("replicated", "partitioned") and c["why"], c
assert c["peer_gbs"] > 0 and c["h2d_gbs"] > 0, c
assert c["probe_s"] < 1.0, c
print("gpu_dist: auto chose %s in %.3f s (peer %.1f GB/s, H2D %.1f GB/s): %s"
      % (c["placement"], c["probe_s"], c["peer_gbs"], c["h2d_gbs"], c["why"]))
PY
fi
run 1 train "${common[@]}" --ranks $((gpus + 1)) --epochs 1
has err "GPUs: one rank per GPU"
cli_finish
