#!/usr/bin/env bash
# The shell examples of README.md and docs/*.md marked as runnable on Cora run as written.
# Marker: a fenced block whose info string is `sh cora`:
#
#     ```sh cora
#     mkdir -p data && neargnn convert --format planetoid --in ../shared/data/cora --out data/cora
#     ```
#
# Such a block must work verbatim from the root of a fresh clone (with the Cora files in
# ../shared/data/cora beside it), either as `build/default/neargnn` or as `neargnn` on PATH,
# after the blocks above it in the same file. For each file, its marked blocks run in order as
# one bash script (set -e: the first failing line fails the file) in a fresh folder laid out
# like a clone: build/default/neargnn is this binary, ../shared/data the real datasets. The only
# change made to the text: the port 8000 becomes a free one, so that parallel tests do not
# collide; a server started with `&` is stopped when the script ends.
# $1: the neargnn binary; NG_DATA_DIR: the real datasets (default ../shared/data).
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DATA=${NG_DATA_DIR:-../shared/data}
[ -f "$DATA/cora/edges.txt" ] || { echo "FAIL: no Cora files in $DATA/cora" >&2; exit 1; }
DATA=$(cd "$DATA" && pwd)
BIN_ABS=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
mkdir -p "$TMP/path"
ln -s "$BIN_ABS" "$TMP/path/neargnn"
# A free port (the kernel's pick of an ephemeral one, released at once).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 18431)

total=0
for doc in "$ROOT/README.md" "$ROOT"/docs/*.md; do
  name=$(basename "$doc" .md)
  [ "$doc" = "$ROOT/README.md" ] && name=top-README
  script=$TMP/$name.sh
  awk '/^```sh cora[ \t]*$/ { on = 1; next } /^```/ { on = 0 } on' "$doc" >"$TMP/$name.blocks"
  [ -s "$TMP/$name.blocks" ] || continue
  blocks=$(grep -c '^```sh cora' "$doc")
  total=$((total + blocks))
  {
    cat <<'SH'
set -eo pipefail
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
SH
    sed -E "s/\\b8000\\b/$port/g" "$TMP/$name.blocks"
  } >"$script"
  clone=$TMP/$name/clone
  mkdir -p "$clone/build/default" "$TMP/$name/shared"
  ln -s "$BIN_ABS" "$clone/build/default/neargnn"
  ln -s "$DATA" "$TMP/$name/shared/data"
  start=$SECONDS
  if (cd "$clone" && PATH="$TMP/path:$PATH" timeout 300 bash "$script") >"$TMP/$name.log" 2>&1; then
    echo "$name: $blocks block(s) ran, $((SECONDS - start)) s"
  else
    fail "the marked examples of ${doc#"$ROOT"/} failed; the script was:
$(cat "$script")
its output ends:
$(tail -n 25 "$TMP/$name.log")"
  fi
done
# README's Cora path is marked, so the test can never pass by finding nothing.
grep -q '^```sh cora' "$ROOT/README.md" || fail "README.md has no \`\`\`sh cora block"
[ "$total" -ge 5 ] || fail "only $total marked blocks found"
cli_finish
