#!/usr/bin/env bash
# The quick tour: installs what is missing, builds neargnn, then generates a power-law graph
# and trains a GraphSAGE model on it (`neargnn demo`), printing throughput and accuracy.
# Extra arguments go to `neargnn demo` (see `neargnn demo --help`). The set-up prints a line per
# package it installs; the build shows its progress (ninja's step count and the seconds so far)
# and its full output goes to a log file, whose end is shown if it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
log=${TMPDIR:-/tmp}/neargnn-demo-build.log
start=$SECONDS
echo "build: cmake --preset default && cmake --build --preset default --target neargnn"
echo "build: the first build takes about 6 min on 2 cores (more with CUDA), a rebuild seconds;" \
  "full output: $log"
failed() {
  printf '\n' >&2
  echo "build failed after $((SECONDS - start)) s; the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
}
# Reads the build's output and shows ninja's "[n/N] ..." steps: one line rewritten in place on
# a terminal, else a line every 10%.
progress() {
  local line n total pct last=-1
  while IFS= read -r line; do
    [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]] || continue
    n=${BASH_REMATCH[1]} total=${BASH_REMATCH[2]}
    [ "$total" -gt 0 ] || continue
    pct=$((100 * n / total))
    if [ -t 1 ]; then
      printf '\rbuild: %3d%% (%d of %d steps), %d s' "$pct" "$n" "$total" $((SECONDS - start))
    elif [ $((pct / 10)) -ne "$last" ]; then
      last=$((pct / 10))
      printf 'build: %3d%% (%d of %d steps), %d s\n' "$pct" "$n" "$total" $((SECONDS - start))
    fi
  done
  if [ -t 1 ]; then printf '\n'; fi
}
cmake --preset default >"$log" 2>&1 || failed
echo "build: configured, $((SECONDS - start)) s"
if ! cmake --build --preset default -j "$(nproc)" --target neargnn 2>&1 | tee -a "$log" | progress; then
  failed
fi
echo "build: done in $((SECONDS - start)) s; the command is build/default/neargnn"
exec build/default/neargnn demo "$@"
