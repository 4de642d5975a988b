#!/usr/bin/env bash
# Generator benchmark: runs `neargnn generate` once under /usr/bin/time -v and prints one line
#
#   bench_generate nodes=N avg_degree=F dim=D threads=T wall_s=S gen_s=S edges=E edges_per_s=R
#                  output_bytes=B peak_rss_bytes=B rss_ratio=X
#
# wall_s is the whole process (start, generation, the command's read-back check of the new
# dataset); gen_s is the generation alone, as the command reports it. rss_ratio is the peak
# resident set (which counts the output's mapped pages) over the bytes written: the generator
# keeps only O(nodes) memory besides its output. The target (docs/generate.md): 10 M nodes,
# 200 M edges, 128-d features in under 60 s on 16 cores with rss_ratio under 1.3.
#
# Usage: eval/bench_generate.sh [nodes [avg_degree [dim [threads [out_dir]]]]]
#   defaults: 10000000 20 128 $(nproc), and a temporary folder under ${TMPDIR:-/tmp} that is
#   removed afterwards (an out_dir you name must not exist, and is kept).
# The binary: $NEARGNN, else build/default/neargnn, else the first build/*/neargnn.
# Fixed model options: --exponent 2.5 --classes 16 --homophily 0.8 --noise 1 --seed 1.
set -euo pipefail

NODES=${1:-10000000}
AVG=${2:-20}
DIM=${3:-128}
THREADS=${4:-$(nproc)}
OUT=${5:-}

here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/eval/lib.sh"
find_neargnn bench_generate
if [ ! -x /usr/bin/time ]; then
  echo "bench_generate: /usr/bin/time is missing; install it (apt-get install -y time)" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-generate-XXXXXX")
KEEP_OUT=1
if [ -z "$OUT" ]; then
  OUT="$WORK/dataset"
  KEEP_OUT=0
fi
cleanup() {
  if [ "$KEEP_OUT" = 0 ]; then rm -rf "$OUT"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

if ! /usr/bin/time -v -o "$WORK/time" "$BIN" generate --out "$OUT" --nodes "$NODES" \
  --avg-degree "$AVG" --exponent 2.5 --classes 16 --homophily 0.8 --dim "$DIM" --noise 1 \
  --seed 1 --threads "$THREADS" --progress none >"$WORK/stdout" 2>"$WORK/stderr"; then
  echo "bench_generate: neargnn generate failed:" >&2
  cat "$WORK/stderr" >&2
  exit 1
fi

# "Elapsed (wall clock) time (h:mm:ss or m:ss): 1:02.35" -> seconds.
WALL=$(sed -n 's/.*Elapsed (wall clock) time.*: //p' "$WORK/time" |
  awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.2f", s }')
RSS_KB=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$WORK/time")
EDGES=$(sed -n 's/^edges  *//p' "$WORK/stdout" | head -n 1)
GEN_S=$(sed -n 's/^seconds  *//p' "$WORK/stdout" | head -n 1)
BYTES=$(find "$OUT" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s }')
if [ -z "$WALL" ] || [ -z "$RSS_KB" ] || [ -z "$EDGES" ] || [ -z "$GEN_S" ] || [ "$BYTES" = 0 ]; then
  echo "bench_generate: could not read the results; neargnn printed:" >&2
  cat "$WORK/stdout" "$WORK/time" >&2
  exit 1
fi

awk -v n="$NODES" -v a="$AVG" -v d="$DIM" -v t="$THREADS" -v w="$WALL" -v g="$GEN_S" \
  -v e="$EDGES" -v b="$BYTES" -v r="$RSS_KB" 'BEGIN {
    printf "bench_generate nodes=%s avg_degree=%s dim=%s threads=%s wall_s=%s gen_s=%s edges=%s", \
      n, a, d, t, w, g, e
    printf " edges_per_s=%.0f output_bytes=%s peak_rss_bytes=%.0f rss_ratio=%.3f\n", \
      e / (g > 0 ? g : 1), b, r * 1024, r * 1024 / b
  }'
