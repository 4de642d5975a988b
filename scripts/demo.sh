#!/usr/bin/env bash
# The quick tour: installs what is missing, builds neargnn, then generates a power-law graph
# and trains a GraphSAGE model on it (`neargnn demo`), printing throughput and accuracy.
# Extra arguments go to `neargnn demo` (see `neargnn demo --help`). The set-up and the build
# print one line each; their full output goes to log files, shown only if they fail.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
log=${TMPDIR:-/tmp}/neargnn-demo-build.log
echo "build: cmake --preset default && cmake --build --preset default (output: $log)"
if ! { cmake --preset default && cmake --build --preset default -j "$(nproc)" --target neargnn; } \
    >"$log" 2>&1; then
  echo "build failed; the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
exec build/default/neargnn demo "$@"
