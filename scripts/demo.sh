#!/usr/bin/env bash
# The quick tour: installs what is missing, builds neargnn, then generates a power-law graph
# and trains a GraphSAGE model on it (`neargnn demo`), printing throughput and accuracy.
# Extra arguments go to `neargnn demo` (see `neargnn demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target neargnn
exec build/default/neargnn demo "$@"
