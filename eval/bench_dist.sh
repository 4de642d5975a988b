#!/usr/bin/env bash
# Data-parallel scaling on the GPUs of one host (docs/distributed.md): W1 and W4 in hybrid mode
# on 1 and 2 GPUs at the same per-GPU batch (the global batch is GPUs x the workload's), through
# the harness (eval/harness/run.py --ranks N, the built-in launcher: no MPI needed). Prints and
# writes to OUT/summary.md, per workload and GPU count: iterations/s, targets/s (iterations/s x
# the global batch), the speedup over one GPU in targets/s, and the gradient all-reduce's time
# per iteration (NCCL, device time). Before that, two checks on a small generated graph:
#   - the same seed and GPU count give the same bits (two 2-GPU runs' checkpoints are equal);
#   - 2 GPUs against 1 at the same global batch: the same parameters within 1e-4 relative
#     (fp32 rounding: cuBLAS sums a split batch in another order; plain SGD, no dropout);
#   - the partitioned cache (2 GPUs x 5% of the rows, striped) gives the bits of a replicated
#     cache of the same 10% on each GPU;
# and bench_floor's H2D and peer (device 0 -> 1) copy rates, the inputs of the feature cache's
# choice between replicated and partitioned (docs/distributed.md). Runs of 2 GPUs or more go
# once per cache placement (PLACEMENTS): each GPU holds the workload's hot tier H, replicated
# (every GPU rows [0, H)) or partitioned (the GPUs rows [0, GPUs x H) between them).
#
# Usage: eval/bench_dist.sh [OUT]   (default eval/results/dist-<date>-<time>)
# Environment: NEARGNN (default build/default/neargnn), GPUS (default "1 2"), WORKLOADS
#   (default "W1 W4"), EPOCHS (default 3; the harness reports the last half), SCALE (default 1:
#   the workloads' full size; 0.25 for a quick run), WORKERS (workers per rank, default 0: the
#   rank's cores but one), DATA (the harness's dataset folder, kept between runs; default
#   $TMPDIR/neargnn-eval-data), NG_NCCL_LIBRARY (libnccl.so.2; default: found in PyTorch's
#   environment, /opt/torch/.venv or the python3 on PATH), DEVICE (default cuda; cpu: a smoke
#   test of the script where there is no GPU), PLACEMENTS (default "replicated partitioned";
#   add auto to see the rule's choice).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${NEARGNN:-$here/build/default/neargnn}
[ -x "$BIN" ] || { echo "bench_dist: no neargnn at $BIN (build it or set NEARGNN)" >&2; exit 1; }
GPUS=${GPUS:-1 2}
WORKLOADS=${WORKLOADS:-W1 W4}
EPOCHS=${EPOCHS:-3}
SCALE=${SCALE:-1}
WORKERS=${WORKERS:-0}
DEVICE=${DEVICE:-cuda} # cpu: a smoke test of this script on a machine without GPUs
PLACEMENTS=${PLACEMENTS:-replicated partitioned}
OUT=${1:-$here/eval/results/dist-$(date +%Y-%m-%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# NCCL: PyTorch's wheel ships it as nvidia/nccl/lib/libnccl.so.2 in site-packages.
if [ -z "${NG_NCCL_LIBRARY:-}" ]; then
  for py in /opt/torch/.venv/bin/python3 python3; do
    d=$("$py" -c 'import nvidia.nccl as n, os; print(list(n.__path__)[0])' 2>/dev/null) || continue
    if [ -e "$d/lib/libnccl.so.2" ]; then
      NG_NCCL_LIBRARY=$d/lib/libnccl.so.2
      break
    fi
  done
fi
if [ -z "${NG_NCCL_LIBRARY:-}" ]; then
  for f in /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2; do
    [ -e "$f" ] && NG_NCCL_LIBRARY=$f
  done
fi
if [ -n "${NG_NCCL_LIBRARY:-}" ]; then
  export NG_NCCL_LIBRARY
  echo "# NCCL: $NG_NCCL_LIBRARY"
else
  echo "# NCCL: not found in PyTorch's environment; relying on the loader (libnccl.so.2)"
fi
"$BIN" version | sed 's/^/# /'
nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader 2>/dev/null | sed 's/^/# GPU /' || true

# bench_floor's H2D and peer rates (a short run: the CPU figures are not needed here).
floor=$(dirname "$BIN")/bench_floor
if [ -x "$floor" ]; then
  "$floor" --seconds 0.2 --table-gib 0.25 --threads 1 --json "$OUT/floor.json" >"$OUT/floor.txt" 2>&1 ||
    echo "# bench_floor failed: $(tail -1 "$OUT/floor.txt")"
  grep -E '^# (H2D|peer)' "$OUT/floor.txt" || true
fi

# ---- the checks, on a small graph ----
small=$OUT/small
if [ ! -d "$small" ]; then
  "$BIN" generate --out "$small" --nodes 200000 --avg-degree 15 --dim 128 --classes 16 \
    --train 0.05 --val 0 --test 0 --seed 3 --progress none >/dev/null
fi
chk=(train --dataset "$small" --device "$DEVICE" --mode hybrid --cache-ratio 0.1 --fanouts "10,5"
  --hidden 64 --dropout 0 --optimizer sgd --momentum 0.9 --lr 0.1 --epochs 2 --eval-every 0
  --progress none)
maxg=1
for g in $GPUS; do [ "$g" -gt "$maxg" ] && maxg=$g; done
status=0
if [ "$maxg" -ge 2 ]; then
  if ! { "$BIN" "${chk[@]}" --batch 2048 --checkpoint "$OUT/check-1gpu.st" \
    >"$OUT/check-1gpu.out" 2>&1 &&
    "$BIN" "${chk[@]}" --batch 2048 --ranks 2 --checkpoint "$OUT/check-2gpu-a.st" \
      --json "$OUT/check-2gpu.json" >"$OUT/check-2gpu-a.out" 2>&1 &&
    "$BIN" "${chk[@]}" --batch 2048 --ranks 2 --checkpoint "$OUT/check-2gpu-b.st" \
      >"$OUT/check-2gpu-b.out" 2>&1; }; then
    echo "bench_dist: a check run failed:" >&2
    tail -3 "$OUT"/check-*.out >&2
    exit 1
  fi
  if cmp -s "$OUT/check-2gpu-a.st" "$OUT/check-2gpu-b.st"; then
    echo "check: two 2-GPU runs, same seed: identical parameters (bit for bit): PASS"
  else
    echo "check: two 2-GPU runs, same seed: parameters differ: FAIL"
    status=1
  fi
  if python3 "$here/tests/dist_compare.py" "$OUT/check-1gpu.st" "$OUT/check-2gpu-a.st" \
    --rel 1e-4 >"$OUT/check-compare.txt" 2>&1; then
    echo "check: 2 GPUs vs 1 at global batch 2048: $(cat "$OUT/check-compare.txt"): PASS"
  else
    echo "check: 2 GPUs vs 1 at global batch 2048: $(cat "$OUT/check-compare.txt"): FAIL"
    status=1
  fi
  # Partitioned: 2 x 5% striped = replicated 10% (check-2gpu-a), bit for bit.
  pchk=() prev=
  for x in "${chk[@]}"; do
    if [ "$prev" = --cache-ratio ]; then pchk+=(0.05); else pchk+=("$x"); fi
    prev=$x
  done
  if "$BIN" "${pchk[@]}" --batch 2048 --ranks 2 --cache-placement partitioned \
    --checkpoint "$OUT/check-2gpu-part.st" >"$OUT/check-2gpu-part.out" 2>&1; then
    grep -h "cache " "$OUT/check-2gpu-part.out" | head -1 | sed 's/^/  /'
    if grep -q "cache partitioned" "$OUT/check-2gpu-part.out" &&
      cmp -s "$OUT/check-2gpu-a.st" "$OUT/check-2gpu-part.st"; then
      echo "check: partitioned 2 x 5% vs replicated 10%: identical parameters: PASS"
    else
      echo "check: partitioned 2 x 5% vs replicated 10%: not partitioned or parameters differ: FAIL"
      status=1
    fi
  else
    echo "check: the partitioned run failed: $(tail -1 "$OUT/check-2gpu-part.out"): FAIL"
    status=1
  fi
  grep -h "^epoch" "$OUT/check-1gpu.out" | sed 's/^/  1 GPU:  /'
  grep -h "^epoch" "$OUT/check-2gpu-a.out" | sed 's/^/  2 GPUs: /'
fi

# ---- the scaling runs ----
wl=$(echo "$WORKLOADS" | tr ' ' ',')
for g in $GPUS; do
  places=replicated
  [ "$g" -gt 1 ] && places=$PLACEMENTS
  for p in $places; do
    dir=$OUT/gpus-$g
    [ "$g" -gt 1 ] && [ "$p" != replicated ] && dir=$OUT/gpus-$g-$p
    echo "# $g GPU(s), cache $p: $wl, hybrid, $WORKERS workers per rank, $EPOCHS epochs"
    python3 "$here/eval/harness/run.py" --bin "$BIN" --workload "$wl" --modes hybrid \
      --workers "$WORKERS" --epochs "$EPOCHS" --scale "$SCALE" --ranks "$g" --device "$DEVICE" \
      --no-floor-probe --no-gpu-probe --no-plots --out "$dir" ${DATA:+--data "$DATA"} \
      --extra="--cache-placement $p" 2>&1 |
      grep -E '\] |failed|error' || true
  done
done

# shellcheck disable=SC2086 # one argument per GPU count
python3 - "$OUT" "$PLACEMENTS" $GPUS <<'PY'
import csv, glob, json, os, sys
out, places, gpus = sys.argv[1], sys.argv[2].split(), [int(g) for g in sys.argv[3:]]
rows = {}
for g in gpus:
    for p in (places if g > 1 else ["replicated"]):
        d = os.path.join(out, f"gpus-{g}" if g == 1 or p == "replicated" else f"gpus-{g}-{p}")
        path = os.path.join(d, "results.csv")
        if not os.path.exists(path):
            continue
        meta = json.load(open(os.path.join(d, "meta.json")))
        for r in csv.DictReader(open(path)):
            if r["status"] != "ok":
                print(f"{r['workload']} {g} GPU(s) {p}: {r['status']}: {r['error']}")
                continue
            batch = meta["workloads"][r["workload"]]["batch"] * g
            ips = float(r["it_per_s"])
            # The placement the run took (auto's choice), from a --json of the workload's run.
            took = p
            for js in sorted(glob.glob(os.path.join(d, "runs", r["workload"], "hybrid*.json"))):
                try:
                    took = json.load(open(js)).get("cache", {}).get("placement", took)
                    break
                except (ValueError, OSError, AttributeError):
                    pass
            hit = float(r["hit_rate"]) if r.get("hit_rate") else float("nan")
            rows[(r["workload"], g, p)] = (ips, batch, ips * batch,
                                           float(r["allreduce_ms"] or 0), took, hit)
lines = ["| workload | GPUs | cache | global batch | it/s | targets/s | speedup | hit rate | "
         "all-reduce ms/it |", "|---|---|---|---|---|---|---|---|---|"]
for (w, g, p), (ips, batch, tps, ar, took, hit) in sorted(rows.items()):
    base = rows.get((w, 1, "replicated"))
    speed = f"{tps / base[2]:.2f}x" if base else "-"
    cache = p if took == p else f"{p} ({took})"
    lines.append(f"| {w} | {g} | {cache} | {batch} | {ips:.1f} | {tps:,.0f} | {speed} | "
                 f"{hit:.1%} | " + (f"{ar:.3f} |" if g > 1 else "- |"))
text = "\n".join(lines)
print(text)
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("# Data-parallel scaling (eval/bench_dist.sh)\n\n" + text + "\n")
PY
echo "# results in $OUT (summary.md; the harness's results.csv under gpus-N/)"
exit $status
