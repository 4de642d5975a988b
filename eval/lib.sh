# Shared by the eval/ scripts (sourced, not run).

# find_neargnn NAME [STATUS]: sets BIN to $NEARGNN, else build/default/neargnn, else the first
# build/*/neargnn; when none is executable, says so as NAME and exits with STATUS (default 2).
find_neargnn() {
  local root b
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  BIN=${NEARGNN:-}
  if [ -z "$BIN" ]; then
    for b in "$root/build/default/neargnn" "$root"/build/*/neargnn; do
      if [ -x "$b" ]; then
        BIN=$b
        break
      fi
    done
  fi
  if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
    echo "$1: no neargnn binary; build it (cmake --preset default && ninja -C build/default)" \
      "or set NEARGNN=/path/to/neargnn" >&2
    exit "${2:-2}"
  fi
}
