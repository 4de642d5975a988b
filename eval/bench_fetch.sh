#!/usr/bin/env bash
# Fetch-strategy benchmark of the synchronous (inline, --workers -1) trainer: generates a
# power-law dataset, renumbers it so that the highest in-degree nodes are the hot tier, then
# trains one epoch with each way cold rows reach the device (batch = mode baseline, zcopy = mode
# zerocopy, partial = mode partial), on each device, and prints one line per run:
#
#   bench_fetch device=D fetch=F it_per_s=X hit_rate=H h2d_MB_per_it=B final_loss=L
#
# Every run uses the same seed, so the three cuda runs print the same final loss (their weights
# are bit-identical); only the time differs.
#
# Usage: eval/bench_fetch.sh [nodes [dim [cache_ratio [fanouts [batch [out_dir]]]]]]
#   defaults: 2000000 256 0.1 10 1000, and a temporary folder that is removed afterwards.
# The binary: $NEARGNN, else build/default/neargnn, else the first build/*/neargnn. $DEVICES
# (default "cuda cpu") lists the devices to run on; on cpu the cache ratio only simulates a tier.
set -euo pipefail

NODES=${1:-2000000}
DIM=${2:-256}
RATIO=${3:-0.1}
FANOUTS=${4:-10}
BATCH=${5:-1000}
KEEP=${6:-}

here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/eval/lib.sh"
find_neargnn bench_fetch 1

work=${KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/ng-bench-fetch.XXXXXX")}
[ -n "$KEEP" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
if [ ! -d "$work/hot" ]; then
  "$BIN" generate --out "$work/raw" --nodes "$NODES" --avg-degree 16 --dim "$DIM" --train 0.05 \
    --val 0 --test 0 --seed 3 --progress none >/dev/null
  "$BIN" reorder --dataset "$work/raw" --out "$work/hot" --progress none >/dev/null
  rm -rf "$work/raw"
fi

run() { # device fetch
  local json=$work/$1-$2.json
  local mode
  case $2 in batch) mode=baseline ;; zcopy) mode=zerocopy ;; *) mode=partial ;; esac
  "$BIN" train --dataset "$work/hot" --device "$1" --mode "$mode" --workers -1 --cache-ratio "$RATIO" \
    --fanouts "$FANOUTS" --batch "$BATCH" --hidden 256 --epochs 1 --eval-every 0 --dropout 0 \
    --progress none --json "$json" >/dev/null
  python3 - "$json" "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
e = r["epochs"][-1]
rows = e["hot_rows"] + e["cold_rows"]
print(f"bench_fetch device={sys.argv[2]} fetch={sys.argv[3]} it_per_s={e['it_per_s']:.1f} "
      f"hit_rate={e['hot_rows'] / rows:.4f} h2d_MB_per_it={e['h2d_bytes'] / e['iterations'] / 1e6:.2f} "
      f"final_loss={r['final_loss']:.9f}")
PY
}

echo "# bench_fetch nodes=$NODES dim=$DIM cache_ratio=$RATIO fanouts=$FANOUTS batch=$BATCH"
for d in ${DEVICES:-cuda cpu}; do
  for f in batch zcopy partial; do run "$d" "$f"; done
done
