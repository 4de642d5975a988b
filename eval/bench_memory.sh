#!/usr/bin/env bash
# Training's peak RSS on a large generated graph (issue 20, docs/memory.md): a W4-shaped graph
# (average degree 15, 128-d, 32 classes, 1% training nodes; 100 M nodes by default: 51.2 GB of
# features, 7.2 GB of topology), then one epoch of W4's model (3-hop GraphSAGE-mean 15,10,5,
# batch 1024, hidden 256, hybrid, 5% hot) with each worker count given. Prints one line a run:
#
#   bench_memory nodes=N workers=W peak_rss_gb=X peak_rss_gib=Y it_per_s=Z estimate_gib=E
#                features_gb=F topology_gb=T
#
# The target: peak RSS <= 60 GB (decimal) with 100 M nodes on the GPU machine.
#
# Usage: eval/bench_memory.sh [nodes [data_dir [device [workers...]]]]
#   defaults: 100000000, ${TMPDIR:-/tmp}/bench-memory-<nodes> (generated once, kept: about
#   55 GB of disk for 100 M nodes, 38 s on the H100 machine), cuda, workers 15 and 4.
# The binary: $NEARGNN, else build/default/neargnn, else the first build/*/neargnn.
set -euo pipefail

NODES=${1:-100000000}
DATA=${2:-${TMPDIR:-/tmp}/bench-memory-$NODES}
DEVICE=${3:-cuda}
shift $(($# < 3 ? $# : 3))
WORKERS=("$@")
[ ${#WORKERS[@]} -gt 0 ] || WORKERS=(15 4)

here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/eval/lib.sh"
find_neargnn bench_memory

if [ ! -d "$DATA" ]; then
  "$BIN" generate --out "$DATA" --nodes "$NODES" --avg-degree 15 --dim 128 --classes 32 \
    --train 0.01 --val 0 --test 0 --seed 5 --progress none >&2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-memory-run-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
for w in "${WORKERS[@]}"; do
  "$BIN" train --dataset "$DATA" --device "$DEVICE" --mode hybrid --fanouts 15,10,5 --batch 1024 \
    --hidden 256 --cache-ratio 0.05 --epochs 1 --eval-every 0 --progress none --dropout 0 \
    --lr 0.003 --workers "$w" --json "$WORK/t.json" >"$WORK/t.out" 2>"$WORK/t.err" ||
    { cat "$WORK/t.err" >&2; exit 1; }
  grep -E "memory estimate|set up" "$WORK/t.err" >&2 || true
  python3 - "$WORK/t.json" "$NODES" "$w" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
m = j["memory"]
peak = m["peak_rss"]
print(f"bench_memory nodes={sys.argv[2]} workers={sys.argv[3]} peak_rss_gb={peak / 1e9:.2f} "
      f"peak_rss_gib={peak / 2**30:.2f} it_per_s={j.get('it_per_s', 0):.1f} "
      f"estimate_gib={m['host_total'] / 2**30:.2f} features_gb={m['features'] / 1e9:.2f} "
      f"topology_gb={m['topology'] / 1e9:.2f}")
PY
done
