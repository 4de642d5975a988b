#!/usr/bin/env bash
# Installs a built tree into a temporary prefix and uses it as a user would: builds examples/
# with pkg-config (shared library) and with CMake's find_package (shared and static), runs the
# example on Cora, and imports the installed Python package. CI runs it after the release tests.
#   bash scripts/check_install.sh [BUILD_DIR]      (default build/default)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
data=${NG_DATA_DIR:-../shared/data}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
test -x "$prefix/bin/neargnn"
test -f "$prefix/include/neargnn.h"
test -f "$prefix/include/neargnn_serve.h"
# Only the public API is exported, under a SONAME that carries the ABI version.
soname=$(readelf -d "$prefix/lib/libneargnn.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libneargnn.so.0.1" ] || { echo "unexpected SONAME '$soname'"; exit 1; }
if nm -D --defined-only "$prefix/lib/libneargnn.so" | awk '{print $3}' | grep -v '^ng_[a-z]' \
    | grep -v '^NEARGNN_' | grep -q .; then
  echo "libneargnn.so exports more than the public ng_* API:"
  nm -D --defined-only "$prefix/lib/libneargnn.so" | awk '{print $3}' | grep -v '^ng_[a-z]' | head
  exit 1
fi

# pkg-config, shared library.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc -std=c11 -Wall -Werror examples/train_cora.c $(pkg-config --cflags --libs neargnn) \
  -Wl,-rpath,"$prefix/lib" -o "$tmp/train_cora_pc"
cc -std=c11 -Wall -Werror examples/train_powmean.c $(pkg-config --cflags --libs neargnn) -lm \
  -Wl,-rpath,"$prefix/lib" -o "$tmp/train_powmean_pc"
pkg-config --static --libs neargnn >/dev/null

# CMake package: the shared library (default) and the static one with its dependencies.
cmake -S examples -B "$tmp/ex-shared" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_RPATH="$prefix/lib" >/dev/null
cmake --build "$tmp/ex-shared" >/dev/null
cmake -S examples -B "$tmp/ex-static" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -Dneargnn_STATIC=ON >/dev/null
cmake --build "$tmp/ex-static" >/dev/null
if readelf -d "$tmp/ex-static/train_cora" | grep -q 'libneargnn'; then
  echo "the static example links libneargnn.so"; exit 1
fi

# Runs: the pkg-config build (shared) trains Cora briefly; the static one starts.
out=$("$tmp/train_cora_pc" "$data/cora" 20)
echo "$out" | tail -1
echo "$out" | awk '/test accuracy/ { if ($(NF-3) + 0 < 0.6) { print "accuracy too low"; exit 1 } }'
"$tmp/ex-static/train_cora" "$data/cora" 1 >/dev/null
# A user-defined aggregator (power mean) trains Cora on the CPU through the installed header.
out=$("$tmp/train_powmean_pc" "$data/cora" 20)
echo "$out" | tail -1
echo "$out" | awk '/test accuracy/ { if ($(NF-3) + 0 < 0.6) { print "accuracy too low"; exit 1 } }'
"$tmp/ex-static/train_powmean" "$data/cora" 1 >/dev/null

# The serving API from the installed headers: a checkpoint trained by the installed command,
# served by the example (engine + HTTP server) with both links.
"$prefix/bin/neargnn" convert --format planetoid --in "$data/cora" --out "$tmp/cora" --progress none \
  >/dev/null
"$prefix/bin/neargnn" train --dataset "$tmp/cora" --epochs 2 --fanouts 5,5 --batch 256 --progress none \
  --checkpoint "$tmp/cora.ck" >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
for ex in ex-shared ex-static; do
  out=$("$tmp/$ex/serve_cora" "$tmp/cora" "$tmp/cora.ck" 0 7)
  echo "$out" | grep -q '^node 7: class' || { echo "serve_cora ($ex) failed: $out"; exit 1; }
done
echo "$out" | head -1

# The installed Python package finds the installed library by itself.
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  pydir=$(find "$prefix" -type d -name neargnn -path '*python3*' | head -1)
  (cd "$tmp" && env -u NEARGNN_LIB PYTHONPATH="$(dirname "$pydir")" /usr/bin/python3 -c \
    'import neargnn; print("python: neargnn", neargnn.version(), "from", neargnn.library_path())')
fi
echo "install check passed"
