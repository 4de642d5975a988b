#!/usr/bin/env bash
# Mode comparison of the hybrid runtime: generates a power-law dataset once, renumbers it so that
# the highest in-degree nodes are the hot tier, then trains `EPOCHS` epochs in each mode and
# worker count and prints one line per run:
#
#   bench_modes mode=M workers=W it_per_s=X hit_rate=H pcie_MB_per_it=P cpu_cold_MB_per_it=C
#               split=P/T final_loss=L
#
# it_per_s is that of the last epoch (the first warms up pinned buffers and page tables). Every
# run uses the same seed, so every line ends with the same final loss: only the time differs.
#
# Usage: eval/bench_modes.sh [nodes [dim [cache_ratio [fanouts [batch [workers...]]]]]]
#   defaults: 4000000 1024 0.04 10 1000 "15 4" (the paper's 1-hop setting, W1).
# Environment: NEARGNN (the binary; default build/default/neargnn or the first build/*/neargnn),
#   MODES (default "baseline zerocopy partial hybrid-static hybrid"), EPOCHS (default 2),
#   DATA (a folder to keep the dataset in; default a temporary one, removed at the end),
#   DEVICE (default cuda), EXTRA (more train options).
set -euo pipefail

NODES=${1:-4000000}
DIM=${2:-1024}
RATIO=${3:-0.04}
FANOUTS=${4:-10}
BATCH=${5:-1000}
shift $(($# < 5 ? $# : 5))
WORKERS=("$@")
[ ${#WORKERS[@]} -gt 0 ] || WORKERS=(15 4)
MODES=${MODES:-baseline zerocopy partial hybrid-static hybrid}
EPOCHS=${EPOCHS:-2}
DEVICE=${DEVICE:-cuda}

here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/eval/lib.sh"
find_neargnn bench_modes 1

work=${DATA:-$(mktemp -d "${TMPDIR:-/tmp}/ng-bench-modes.XXXXXX")}
[ -n "${DATA:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
if [ ! -d "$work/hot" ]; then
  t0=$(date +%s)
  "$BIN" generate --out "$work/raw" --nodes "$NODES" --avg-degree 16 --dim "$DIM" --train 0.05 \
    --val 0 --test 0 --seed 3 --progress none >/dev/null
  "$BIN" reorder --dataset "$work/raw" --out "$work/hot" --progress none >/dev/null
  rm -rf "$work/raw"
  echo "# dataset: $NODES nodes, $DIM-d, generated and reordered in $(($(date +%s) - t0)) s"
fi

echo "# bench_modes nodes=$NODES dim=$DIM cache_ratio=$RATIO fanouts=$FANOUTS batch=$BATCH epochs=$EPOCHS device=$DEVICE"
for w in "${WORKERS[@]}"; do
  for m in $MODES; do
    json=$work/$m-$w.json
    # shellcheck disable=SC2086
    if ! "$BIN" train --dataset "$work/hot" --device "$DEVICE" --mode "$m" --workers "$w" \
      --cache-ratio "$RATIO" --fanouts "$FANOUTS" --batch "$BATCH" --hidden 256 --epochs "$EPOCHS" \
      --eval-every 0 --dropout 0 --lr 0.003 --progress none --json "$json" ${EXTRA:-} \
      >"$work/$m-$w.out" 2>"$work/$m-$w.err"; then
      echo "bench_modes mode=$m workers=$w failed: $(tail -1 "$work/$m-$w.err")"
      continue
    fi
    python3 - "$json" "$m" "$w" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e = r["epochs"][-1]
it = e["iterations"]
rows = e["hot_rows"] + e["cold_rows"]
print(f"bench_modes mode={sys.argv[2]} workers={sys.argv[3]} it_per_s={e['it_per_s']:.1f} "
      f"hit_rate={e['hot_rows'] / rows:.4f} "
      f"pcie_MB_per_it={(e['h2d_bytes'] + e['zcopy_bytes']) / it / 1e6:.2f} "
      f"cpu_cold_MB_per_it={e['cpu_cold_bytes'] / it / 1e6:.2f} "
      f"split={e['partial_workers']}/{e['transfer_workers']} final_loss={r['final_loss']:.9f}")
PY
  done
done
