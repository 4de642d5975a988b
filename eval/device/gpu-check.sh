#!/usr/bin/env bash
# One call on the GPU machine for the CUDA backend: build once (CUDA on, Release), run the GPU
# tests, then every test, then bench_gpu, leaving logs under $OUT (build.log, ctest-gpu.log,
# ctest.log, bench_gpu.log, machine.txt). Prepare here first:
#   bash ../shared/device/prepare.sh zlib1g-dev      # our Debian libraries -> .deps/
#   rm -rf .ngdata && cp -r ../shared/data .ngdata   # the real datasets the tests read
# and run with carry [".deps", ".ngdata"]:
#   bash eval/device/gpu-check.sh [BENCH_GPU_ARGS...]     (e.g. --quick for a smoke run)
# A failing step is logged and the next one still runs; the exit status is 1 when any step
# failed. Each step has its own time limit (below), so that a hang in one still leaves time for
# the others and their logs; together they usually take a few minutes.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
B=build/default
jobs=$(nproc)
failed=()

# step NAME LIMIT_S LOG CMD...: runs CMD with its output in $OUT/LOG, recording a failure.
step() {
  local name=$1 limit=$2 log=$OUT/$3
  shift 3
  echo "== $name: $*" >"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 124 ] && echo "== $name: stopped after its limit of $limit s" >>"$log"
    echo "== $name: failed (exit status $rc)" >>"$log"
    failed+=("$name")
  fi
  return "$rc"
}

if [ -f .deps/env.sh ]; then
  # shellcheck disable=SC1091
  source .deps/env.sh
else
  echo "gpu-check: .deps/env.sh is missing: run bash ../shared/device/prepare.sh zlib1g-dev" \
    "here and carry .deps" >&2
  failed+=(deps)
fi
export PATH=/opt/torch/.venv/bin:$PATH
export NG_DATA_DIR=$PWD/.ngdata
[ -d "$NG_DATA_DIR" ] || echo "gpu-check: $NG_DATA_DIR is missing: the tests that read real" \
  "data will fail or skip; copy ../shared/data to .ngdata and carry it" >&2

{
  echo "== machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv,noheader
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|NUMA node\(s\))'
  free -g | head -2
  { nvcc --version || /usr/local/cuda/bin/nvcc --version; } | tail -2
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
} >"$OUT/machine.txt" 2>&1

# Explicit flags rather than the preset: the machine's cmake may predate preset version 6.
# Ninja's -k 0 builds every target it can, so that one broken target leaves the others to run.
# shellcheck disable=SC2016
step build 300 build.log bash -c 'cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DNG_CUDA=ON -DNG_TEST_DATA_DIR="$2" && cmake --build "$1" -j "$3" -- -k 0' _ "$B" \
  "$NG_DATA_DIR" "$jobs"
if [ -x "$B/neargnn" ]; then
  "$B/neargnn" version >>"$OUT/machine.txt" 2>&1
fi
step ctest-gpu 120 ctest-gpu.log ctest --test-dir "$B" -L gpu --output-on-failure
step ctest 240 ctest.log ctest --test-dir "$B" -j 8 --output-on-failure
if [ -x "$B/bench_gpu" ]; then
  step bench_gpu 240 bench_gpu.log "$B/bench_gpu" "$@"
else
  echo "== bench_gpu: not built (see build.log)" >"$OUT/bench_gpu.log"
  failed+=(bench_gpu)
fi

echo "== machine.txt"
cat "$OUT/machine.txt"
echo "== build.log (tail)"
tail -25 "$OUT/build.log"
echo "== ctest-gpu.log (tail)"
tail -15 "$OUT/ctest-gpu.log"
echo "== ctest.log (tail)"
tail -15 "$OUT/ctest.log"
echo "== bench_gpu.log (tail)"
tail -60 "$OUT/bench_gpu.log"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "gpu-check: failed: ${failed[*]}"
  exit 1
fi
echo "gpu-check: every step passed"
