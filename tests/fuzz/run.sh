#!/usr/bin/env bash
# Runs every fuzz target of a build for a while on a copy of its seed corpus; builds nothing.
#   bash tests/fuzz/run.sh BUILD_DIR [SECONDS]     (SECONDS per target, default 30)
#   NG_FUZZ_JOBS=N: N targets at a time (default 1; each target is one process of one thread)
# BUILD_DIR is a folder configured with -DNG_FUZZ=ON and built (e.g. build/fuzz from the `fuzz`
# preset). Exits non-zero when a target crashes, leaks, times out or is missing; the input that
# did it is kept in a folder the output names.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: bash tests/fuzz/run.sh BUILD_DIR [SECONDS]" >&2
  exit 2
fi
build=$1
seconds=${2:-30}
here=$(cd "$(dirname "$0")" && pwd)
# Single-threaded scans keep each input fast; the parallel paths are covered by the test suites.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# Undefined behaviour must stop the run like a crash, not just print a line.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

work=$(mktemp -d "${TMPDIR:-/tmp}/ngfuzz-run-XXXXXX")
failed=0
# One target: its summary or, on a crash, its log's end; a failure leaves $work/NAME/failed.
fuzz_one() {
  local name=$1 bin=$2
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$work/$name/artifacts/" "$work/$name/corpus" \
      >"$work/$name/log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^Done' "$work/$name/log" | sed "s/^/fuzz_$name: /" || true
  else
    touch "$work/$name/failed"
    tail -n 60 "$work/$name/log"
    echo "fuzz_$name FAILED; the input that did it is in $work/$name/artifacts/:" >&2
    ls -l "$work/$name/artifacts/" >&2
  fi
}
for corpus in "$here"/corpus/*/; do
  name=$(basename "$corpus")
  bin=$(find "$build" -type f -name "fuzz_$name" -perm -u+x | head -n 1)
  if [ -z "$bin" ]; then
    echo "fuzz_$name: not found under $build; configure it with -DNG_FUZZ=ON and build" >&2
    failed=1
    continue
  fi
  mkdir -p "$work/$name/corpus" "$work/$name/artifacts"
  cp -R "$corpus". "$work/$name/corpus/"
  while [ "$(jobs -rp | wc -l)" -ge "${NG_FUZZ_JOBS:-1}" ]; do
    wait -n || true
  done
  echo "==> fuzz_$name for ${seconds}s"
  fuzz_one "$name" "$bin" &
done
wait
if compgen -G "$work/*/failed" >/dev/null; then
  failed=1
fi
if [ "$failed" = 0 ]; then
  rm -rf "$work"
  echo "fuzzing: no crash"
fi
exit "$failed"
