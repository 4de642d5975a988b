#!/usr/bin/env bash
# The `neargnn` command line: usage errors exit 2 with a message naming the problem and a hint,
# --help works for every command, typed values (suffixes, ranges) are parsed strictly.
# $1: the neargnn binary.
# shellcheck source=SCRIPTDIR/lib_cli.sh
source "$(dirname "$0")/lib_cli.sh"
# usage_error TEXT ARGS...: exit 2, TEXT and the hint on stderr, nothing on stdout.
usage_error() {
  local text=$1
  shift
  run 2 "$@"
  has err "$text"
  grep -qE "^see 'neargnn( [a-z]+)? --help'$" "$TMP/err" || fail "$LAST: no help hint on stderr"
  [ ! -s "$TMP/out" ] || fail "$LAST: a usage error wrote to stdout: $(cat "$TMP/out")"
}

OUT="$TMP/never"

# ---- commands ----
run 2
has err "usage: neargnn COMMAND"
usage_error "unknown command 'frobnicate'" frobnicate
usage_error "did you mean 'generate'?" genrate --out "$OUT"
usage_error "unknown option '--verbose'" --verbose
usage_error "unknown command 'nosuch'" help nosuch

# ---- options ----
usage_error "unknown option '--bogus'" generate --out "$OUT" --bogus 3
has err "see 'neargnn generate --help'"
usage_error "unknown option '--node'; did you mean '--nodes'?" generate --out "$OUT" --node 5
usage_error "unknown option '-n'" generate --out "$OUT" -n 5
usage_error "missing required option --out DIR" generate --nodes 100
usage_error "option --out needs a value (DIR)" generate --out
usage_error "option --nodes needs a value (N)" generate --out "$OUT" --nodes
usage_error "option --nodes needs a value (N)" generate --nodes --out "$OUT"
usage_error "option --out needs a non-empty DIR" generate --out=
usage_error "option --nodes given more than once" generate --out "$OUT" --nodes 5 --nodes 6
usage_error "unexpected argument 'extra'" generate --out "$OUT" extra

# ---- typed values ----
usage_error "option --nodes: 'abc' is not valid (expected a whole number" generate --out "$OUT" --nodes abc
usage_error "option --nodes: '1.5' is not valid" generate --out "$OUT" --nodes 1.5
usage_error "option --nodes: '10X' is not valid" generate --out "$OUT" --nodes 10X
usage_error "fits in 64 bits" generate --out "$OUT" --nodes 99999999999999999999
usage_error "fits in 64 bits" generate --out "$OUT" --nodes 20000000T
usage_error "option --nodes: 1 is out of range (expected a whole number >= 2)" \
  generate --out "$OUT" --nodes 1
usage_error "option --classes: 0 is out of range" generate --out "$OUT" --classes 0
usage_error "option --classes: 3G is out of range" generate --out "$OUT" --classes 3G
usage_error "option --homophily: 1.5 is out of range (expected a number in [0, 1])" \
  generate --out "$OUT" --homophily 1.5
usage_error "option --exponent: 2 is out of range (expected a number > 2)" \
  generate --out "$OUT" --exponent 2
usage_error "option --avg-degree: 'nan' is not valid" generate --out "$OUT" --avg-degree nan
usage_error "option --avg-degree: 'inf' is not valid" generate --out "$OUT" --avg-degree inf
usage_error "option --avg-degree: '0x10' is not valid" generate --out "$OUT" --avg-degree 0x10
usage_error "option --noise: '1e999' is not valid (expected a finite number)" \
  generate --out "$OUT" --noise 1e999
usage_error "option --seed: '-1' is not valid" generate --out "$OUT" --seed -1
usage_error "the shares must add up to at most 1" generate --out "$OUT" --train 0.5 --val 0.4
usage_error "option --progress: unknown value 'sometimes' (expected one of: auto, plain, none)" \
  generate --out "$OUT" --progress sometimes
[ ! -e "$OUT" ] || fail "a usage error created $OUT"

# Values that parse: suffixes with fractions, --name=value, 64-bit seeds. The run is tiny.
run 0 generate --out="$TMP/k" --nodes=1.5k --avg-degree 4 --dim=0 --classes 3 \
  --seed 18446744073709551615 --progress none
grep -qE '^nodes +1500$' "$TMP/out" || fail "--nodes=1.5k did not give 1500 nodes: $(cat "$TMP/out")"
run 0 info "$TMP/k" --json --gpu-memory 1K
python3 - "$TMP/out" <<'EOF' || fail "info --gpu-memory 1K: wrong JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["memory"]["gpu_memory"] == {"bytes": 1024, "rows": 1500}, d["memory"]
EOF

# ---- info and convert ----
usage_error "missing argument DIR" info
usage_error "unexpected argument 'b'" info a b
usage_error "option --json takes no value" info "$TMP/k" --json=yes
usage_error "option --gpu-memory: '2X' is not valid (expected a size in bytes" \
  info "$TMP/k" --gpu-memory 2X
usage_error "option --gpu-memory: 0 is out of range" info "$TMP/k" --gpu-memory 0
usage_error "option --format: unknown value 'csv' (expected one of: planetoid, snap, ogb)" \
  convert --format csv --in x --out "$OUT"
usage_error "missing required option --format" convert --in x --out "$OUT"
usage_error "--split applies to --format ogb only, not planetoid" \
  convert --format planetoid --in x --out "$OUT" --split time
usage_error "--dim applies to --format snap only, not ogb" \
  convert --format ogb --in x --out "$OUT" --dim 3
usage_error "planetoid data is always undirected" \
  convert --format planetoid --in x --out "$OUT" --undirected
usage_error "--features random needs --dim D" \
  convert --format snap --in x --out "$OUT" --features random
usage_error "--dim applies only with --features random" \
  convert --format snap --in x --out "$OUT" --dim 4
usage_error "--train/--val/--test need --classes C" \
  convert --format snap --in x --out "$OUT" --train 0.5
[ ! -e "$OUT" ] || fail "a usage error created $OUT"

# ---- help: exit 0, usage on stdout, every option with its default, an example ----
for cmd in generate convert info version help; do
  run 0 "$cmd" --help
  has out "usage: neargnn $cmd"
  [ "$cmd" = help ] || has out "example"
  [ ! -s "$TMP/err" ] || fail "neargnn $cmd --help wrote to stderr"
  cp "$TMP/out" "$TMP/help1"
  run 0 help "$cmd"
  cmp -s "$TMP/out" "$TMP/help1" || fail "'neargnn help $cmd' differs from 'neargnn $cmd --help'"
  run 0 "$cmd" -h
  cmp -s "$TMP/out" "$TMP/help1" || fail "'neargnn $cmd -h' differs from 'neargnn $cmd --help'"
done
run 0 generate --help
has out "--nodes N"
has out "(default: 100000)"
has out "--out DIR"
has out "(required)"
run 0 info --help
has out "--check-features"
for top in --help -h help; do
  run 0 $top
  for cmd in generate convert info version help; do
    grep -qE "^  $cmd +[a-z]" "$TMP/out" || fail "neargnn $top does not list $cmd"
  done
done
# --help wins over errors that come after it, and after `--` it is an argument.
run 0 generate --help --bogus
usage_error "missing argument DIR" info -- 

# ---- version ----
for v in version --version; do
  run 0 $v
  grep -qE '^neargnn [0-9]+\.[0-9]+\.[0-9]+$' "$TMP/out" || fail "neargnn $v: no version line"
  grep -qE '^cuda: (on|off)' "$TMP/out" || fail "neargnn $v: no cuda line"
  grep -qE '^mpi: (on|off)' "$TMP/out" || fail "neargnn $v: no mpi line"
done
usage_error "unexpected argument 'x'" version x

cli_finish
