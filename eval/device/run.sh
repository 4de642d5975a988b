#!/usr/bin/env bash
# One call on the GPU machine: build (preset default, CUDA on), run every test, then the
# benchmarks, leaving logs under $OUT. Prepare here first:
#   bash ../shared/device/prepare.sh zlib1g-dev      # our Debian libraries -> .deps/
#   rm -rf .ngdata && cp -r ../shared/data .ngdata   # the real datasets the tests read
# and run with carry [".deps", ".ngdata"]:
#   bash eval/device/run.sh [all|build|test|bench]
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
OUT=${OUT:-out}
mkdir -p "$OUT"
# shellcheck disable=SC1091
source .deps/env.sh
export PATH=/opt/torch/.venv/bin:$PATH
export NG_DATA_DIR=$PWD/.ngdata
jobs=$(nproc)
{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|NUMA node\(s\))'
  free -g | head -2
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
} >"$OUT/machine.txt" 2>&1

if [ "$what" = all ] || [ "$what" = build ] || [ "$what" = test ]; then
  # Explicit flags rather than the preset: the machine's cmake may predate preset version 6.
  { cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON \
      -DNG_TEST_DATA_DIR="$NG_DATA_DIR" && cmake --build build/default -j "$jobs"; } \
    >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
  build/default/neargnn version | tee -a "$OUT/machine.txt"
fi
if [ "$what" = all ] || [ "$what" = test ]; then
  ctest --test-dir build/default -j 8 --output-on-failure >"$OUT/ctest.log" 2>&1
  tail -15 "$OUT/ctest.log"
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
  B=build/default
  data=/tmp/ng-bench-pl10m
  rm -rf "$data"
  {
    echo "== generator: 10M nodes, avg degree 20, 128-d, $jobs threads"
    NEARGNN=$B/neargnn bash eval/bench_generate.sh 10000000 20 128 "$jobs" "$data"
    echo "== sampler: fanouts 25,10, batch 1024, on the generated graph"
    for t in 1 "$jobs"; do $B/bench_sample --threads "$t" --iters 2000 "$data"; done
    echo "== CPU ops (gather, aggregation), 4 GiB table, $jobs threads"
    OMP_NUM_THREADS=$jobs $B/bench_ops 4096 3
    echo "== demo ($jobs threads)"
    /usr/bin/time -f 'demo wall %e s, peak %M KiB' $B/neargnn demo --progress none
    echo "== demo (2 threads)"
    /usr/bin/time -f 'demo wall %e s, peak %M KiB' $B/neargnn demo --progress none --threads 2
  } >"$OUT/bench.log" 2>&1
  tail -60 "$OUT/bench.log"
  rm -rf "$data"
fi
