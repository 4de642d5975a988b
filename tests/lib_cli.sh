# shellcheck shell=bash
# Shared by the tests of the `neargnn` command (tests/cli_*.sh), which `source` it with the
# neargnn binary as their $1. Not a test itself: CMake registers only tests/cli_*.sh.
# Sets BIN (the binary) and TMP (a fresh folder removed on exit) and defines the checks below;
# a script ends with `cli_finish`.
set -u
CLI_NAME=$(basename "$0" .sh)
BIN=${1:?usage: $CLI_NAME.sh PATH_TO_NEARGNN}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ngcli-XXXXXX")
trap 'rm -rf "$TMP"' EXIT
FAILS=0
fail() {
  echo "FAIL: $*" >&2
  FAILS=$((FAILS + 1))
}
# run RC ARGS...: runs neargnn ARGS, expects exit status RC; stdout in $TMP/out, stderr in $TMP/err.
run() {
  local want=$1
  shift
  LAST="neargnn $*"
  "$BIN" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "$LAST: exit $rc, expected $want; stderr: $(cat "$TMP/err")"
}
# has out|err TEXT: the last command's stdout/stderr contains TEXT.
has() {
  grep -qF -- "$2" "$TMP/$1" || fail "$LAST: $1 lacks '$2'; it was: $(cat "$TMP/$1")"
}
# field KEY: the value after KEY on the line of stdout that starts with it ("nodes   2000").
field() { sed -n "s/^$1  *//p" "$TMP/out" | head -n 1; }
# cli_finish: exits 1 when a check failed, else reports success.
cli_finish() {
  if [ "$FAILS" -ne 0 ]; then
    echo "$FAILS check(s) failed" >&2
    exit 1
  fi
  echo "$CLI_NAME: all checks passed"
}
