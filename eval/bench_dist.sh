#!/usr/bin/env bash
# Data-parallel scaling on the GPUs of one host (docs/distributed.md): W1 and W4 in hybrid mode
# on 1, 2, 4 and 8 GPUs (those of GPUS that the host has) at the same per-GPU batch (the global
# batch is GPUs x the workload's), through the harness (eval/harness/run.py --ranks N, the
# built-in launcher: no MPI needed), once per precision (PRECISIONS) and, from 2 GPUs on, once
# per variant (VARIANTS):
#   - replicated: every GPU caches rows [0, H), every rank reads its own cold rows;
#   - partitioned: the GPUs cache rows [0, GPUs x H) between them (--cache-placement);
#   - cooperative: replicated, the cold rows read once for the host by their owner rank and sent
#     to the ranks that need them (--cold-fetch cooperative; fp32 or bf16 rows as the table
#     holds them). So far the exchange runs the host work inline, so this variant runs in mode
#     partial with --workers -1 (the others refuse it): compare it with replicated in that light.
# Prints and writes to OUT/summary.md, per workload, precision, GPU count and variant:
# iterations/s, targets/s (iterations/s x the global batch), the speedup over one GPU in
# targets/s, the hit rate, the gradient all-reduce's time per iteration, the host DRAM bytes per
# target the ranks read (cold_fetch in --json) and the scaling floor they set with the host's
# DRAM rate (bench_floor's cpu_alone_gbs, passed as --cache-bench), and the share of the floor
# reached. OUT/plot-<workload>-<precision>.dat holds the plot's data: per GPU count, targets/s of
# each variant, one GPU x GPUs, and the floor of each variant (gnuplot: `plot for [i=2:*] f u
# 1:i w lp t columnhead`).
# Before that, checks on a small generated graph (2 GPUs or more):
#   - the same seed and GPU count give the same bits (two 2-GPU runs' checkpoints are equal);
#   - 2 GPUs against 1 at the same global batch: the same parameters within 1e-4 relative
#     (fp32 rounding: cuBLAS sums a split batch in another order; plain SGD, no dropout);
#   - the partitioned cache (2 GPUs x 5% of the rows, striped) gives the bits of a replicated
#     cache of the same 10% on each GPU;
# and bench_floor's H2D, peer (device 0 -> 1) and host DRAM rates.
#
# Usage: eval/bench_dist.sh [OUT]   (default eval/results/dist-<date>-<time>)
# Environment: NEARGNN (default build/default/neargnn), GPUS (default "1 2 4 8": the counts
#   above the host's GPUs are left out), WORKLOADS (default "W1 W4"), PRECISIONS (default
#   "fp32 bf16"), VARIANTS (default "replicated partitioned cooperative"; add auto to see the
#   placement rule's choice), EPOCHS (default 3; the harness reports the last half), SCALE
#   (default 1: the workloads' full size; 0.25 for a quick run), WORKERS (workers per rank,
#   default 0: the rank's cores but one), DATA (the harness's dataset folder, kept between runs;
#   default $TMPDIR/neargnn-eval-data), NG_NCCL_LIBRARY (libnccl.so.2; default: found in
#   PyTorch's environment, /opt/torch/.venv or the python3 on PATH), DEVICE (default cuda; cpu: a
#   smoke test of the script where there is no GPU, the "GPUs" being CPU ranks), DRAM_GBS (the
#   host's DRAM read rate for the floor instead of bench_floor's).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${NEARGNN:-$here/build/default/neargnn}
[ -x "$BIN" ] || { echo "bench_dist: no neargnn at $BIN (build it or set NEARGNN)" >&2; exit 1; }
GPUS=${GPUS:-1 2 4 8}
WORKLOADS=${WORKLOADS:-W1 W4}
PRECISIONS=${PRECISIONS:-fp32 bf16}
EPOCHS=${EPOCHS:-3}
SCALE=${SCALE:-1}
WORKERS=${WORKERS:-0}
DEVICE=${DEVICE:-cuda} # cpu: a smoke test of this script on a machine without GPUs
VARIANTS=${VARIANTS:-${PLACEMENTS:-replicated partitioned cooperative}}
OUT=${1:-$here/eval/results/dist-$(date +%Y-%m-%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

# The GPU counts this host can run: as many GPUs as it has (on cpu, as many cores: every rank
# needs one).
if [ "$DEVICE" = cuda ]; then
  have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
else
  have=$(nproc)
fi
lent=
for g in $GPUS; do
  if [ "$g" -le "${have:-1}" ]; then lent="$lent $g"; else echo "# $g GPUs: this host has $have, left out"; fi
done
GPUS=${lent# }
[ -n "$GPUS" ] || { echo "bench_dist: none of the GPU counts fits this host" >&2; exit 1; }

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

# bench_floor's H2D and peer rates, and the host's DRAM rate (its CPU threads reading rows),
# which the runs' scaling floor divides by their cold bytes per target (--cache-bench).
floor=$(dirname "$BIN")/bench_floor
bench=()
if [ -x "$floor" ]; then
  if "$floor" --seconds 0.2 --table-gib 1 --json "$OUT/floor.json" >"$OUT/floor.txt" 2>&1; then
    bench=(--cache-bench "$OUT/floor.json")
  else
    echo "# bench_floor failed: $(tail -1 "$OUT/floor.txt")"
  fi
  grep -E '^# (H2D|peer)' "$OUT/floor.txt" || true
fi
[ -n "${DRAM_GBS:-}" ] && bench+=(--dram-gbs "$DRAM_GBS")

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
for prec in $PRECISIONS; do
  for g in $GPUS; do
    vars=replicated
    [ "$g" -gt 1 ] && vars=$VARIANTS
    for v in $vars; do
      mode=hybrid workers=$WORKERS
      case $v in
      cooperative)
        extra="--cache-placement replicated --cold-fetch cooperative" mode=partial workers=-1
        ;;
      *) extra="--cache-placement $v" ;;
      esac
      dir=$OUT/$prec/gpus-$g-$v
      echo "# $g GPU(s), $v, $prec: $wl, $mode, $workers workers per rank, $EPOCHS epochs"
      python3 "$here/eval/harness/run.py" --bin "$BIN" --workload "$wl" --modes "$mode" \
        --workers "$workers" --epochs "$EPOCHS" --scale "$SCALE" --ranks "$g" --device "$DEVICE" \
        --precision "$prec" --no-floor-probe --no-gpu-probe --no-plots --out "$dir" \
        ${DATA:+--data "$DATA"} --extra="$extra ${bench[*]}" 2>&1 |
        grep -E '\] |failed|error' || true
    done
  done
done

# shellcheck disable=SC2086 # one argument per GPU count
python3 - "$OUT" "$VARIANTS" "$PRECISIONS" $GPUS <<'PY'
import csv, glob, json, os, sys
out, variants, precs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
gpus = [int(g) for g in sys.argv[4:]]
rows, notes = {}, []
for prec in precs:
    for g in gpus:
        for v in (variants if g > 1 else ["replicated"]):
            d = os.path.join(out, prec, f"gpus-{g}-{v}")
            path = os.path.join(d, "results.csv")
            if not os.path.exists(path):
                continue
            meta = json.load(open(os.path.join(d, "meta.json")))
            for r in csv.DictReader(open(path)):
                if r["status"] != "ok":
                    # The failing rank's own message says why (the launcher's says which).
                    why = r["error"]
                    for err in sorted(glob.glob(os.path.join(d, "runs", r["workload"], "*.err"))):
                        said = [l.strip() for l in open(err, errors="replace")
                                if "neargnn: error:" in l]
                        if said:
                            why = said[0]
                            break
                    notes.append(f"{r['workload']} {prec} {g} GPU(s) {v}: {r['status']}: {why}")
                    continue
                batch = meta["workloads"][r["workload"]]["batch"] * g
                ips = float(r["it_per_s"])
                # The placement the run took (auto's choice) and its cold rows, from the
                # workload's --json.
                took, cold = v, {}
                for js in sorted(glob.glob(os.path.join(d, "runs", r["workload"], "*.json"))):
                    try:
                        j = json.load(open(js))
                        took = j.get("cache", {}).get("placement", took)
                        cold = j.get("cold_fetch", {})
                        break
                    except (ValueError, OSError, AttributeError):
                        pass
                if v == "cooperative":
                    took = cold.get("mode", took)
                hit = float(r["hit_rate"]) if r.get("hit_rate") else float("nan")
                rows[(r["workload"], prec, g, v)] = dict(
                    ips=ips, batch=batch, tps=ips * batch, ar=float(r["allreduce_ms"] or 0),
                    took=took, hit=hit, bpt=cold.get("bytes_per_target", float("nan")),
                    floor=cold.get("floor_targets_per_s", 0.0))
lines = ["| workload | precision | GPUs | variant | global batch | it/s | targets/s | speedup | "
         "GPUs x one | hit rate | all-reduce ms/it | DRAM B/target | floor targets/s | "
         "of floor |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for (w, prec, g, v), x in sorted(rows.items()):
    one = rows.get((w, prec, 1, "replicated"))
    speed = f"{x['tps'] / one['tps']:.2f}x" if one else "-"
    ideal = f"{g * one['tps']:,.0f}" if one else "-"
    name = v if x["took"] == v else f"{v} ({x['took']})"
    fl = f"{x['floor']:,.0f}" if x["floor"] > 0 else "-"
    reach = f"{x['tps'] / x['floor']:.0%}" if x["floor"] > 0 else "-"
    lines.append(f"| {w} | {prec} | {g} | {name} | {x['batch']} | {x['ips']:.1f} | "
                 f"{x['tps']:,.0f} | {speed} | {ideal} | {x['hit']:.1%} | "
                 + (f"{x['ar']:.3f}" if g > 1 else "-")
                 + f" | {x['bpt']:,.0f} | {fl} | {reach} |")
# The plot's data: per workload and precision, targets/s against GPUs for each variant, one GPU
# times GPUs, and each variant's floor.
for w in sorted({k[0] for k in rows}):
    for prec in precs:
        one = rows.get((w, prec, 1, "replicated"))
        if not one:
            continue
        cols = ["gpus"] + [f"{v}" for v in variants] + ["ideal"] + [f"floor_{v}" for v in variants]
        with open(os.path.join(out, f"plot-{w}-{prec}.dat"), "w") as f:
            f.write("# " + " ".join(cols) + "\n" + " ".join(cols) + "\n")
            for g in gpus:
                def get(v, key):
                    x = rows.get((w, prec, g, "replicated" if g == 1 else v))
                    return f"{x[key]:.6g}" if x and x[key] == x[key] and x[key] > 0 else "NaN"
                vals = [str(g)] + [get(v, "tps") for v in variants] + [f"{g * one['tps']:.6g}"]
                vals += [get(v, "floor") for v in variants]
                f.write(" ".join(vals) + "\n")
text = "\n".join(lines + ([""] + notes if notes else []))
print(text)
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("# Data-parallel scaling (eval/bench_dist.sh)\n\n" + text + "\n")
PY
echo "# results in $OUT (summary.md, plot-*.dat; the harness's results.csv under PRECISION/gpus-N-VARIANT/)"
exit $status
