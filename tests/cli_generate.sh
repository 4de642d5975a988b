#!/usr/bin/env bash
# `neargnn generate` and `neargnn info` round trip on a small graph: the printed counts agree
# with each other and with the options, --seed reaches the generator, an existing output folder
# is refused, a missing dataset folder is a runtime error naming it. $1: the neargnn binary.
# shellcheck source=SCRIPTDIR/lib_cli.sh
source "$(dirname "$0")/lib_cli.sh"

G="$TMP/g"
# The temporary folder of a generate killed with SIGKILL (its pid dead) is removed by the next
# one to the same folder; a live process's stays (issue 26: both stayed).
sh -c 'exit 0' &
dead=$!
wait "$dead"
mkdir -p "$G.tmp-$dead-abcdef" "$G.tmp-$$-abcdef"
echo junk >"$G.tmp-$dead-abcdef/features.npy"
# NG_PROGRESS_DELAY holds back progress for longer than any run (by default operations under a
# second show none, and a loaded machine may take longer): stderr must stay empty.
NG_PROGRESS_DELAY=1e6 run 0 generate --out "$G" --nodes 2000 --avg-degree 6 --dim 16 \
  --classes 5 --seed 3 --name tiny
[ "$(field generated)" = "$G" ] || fail "summary does not name the folder: $(cat "$TMP/out")"
[ "$(field nodes)" = 2000 ] || fail "summary: nodes '$(field nodes)', expected 2000"
[ "$(field features)" = 16 ] || fail "summary: features '$(field features)', expected 16"
[ "$(field classes)" = 5 ] || fail "summary: classes '$(field classes)', expected 5"
[ "$(field name)" = tiny ] || fail "summary: name '$(field name)', expected tiny"
[ ! -e "$G.tmp-$dead-abcdef" ] || fail "the dead writer's temporary folder was not removed"
[ -d "$G.tmp-$$-abcdef" ] || fail "a live process's temporary folder was removed"
rm -rf "$G.tmp-$$-abcdef"
EDGES=$(field edges)
SPLITS=$(field splits)
BYTES=$(field bytes | cut -d' ' -f1)
# The generator's mean degree is 6: the edge count is near 12000, never 0.
[ "${EDGES:-0}" -gt 6000 ] && [ "${EDGES:-0}" -lt 24000 ] || fail "summary: edges '$EDGES'"
ONDISK=$(find "$G" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
[ "$BYTES" = "$ONDISK" ] || fail "summary: bytes '$BYTES', the folder holds $ONDISK"
grep -qE '^edges/s +[0-9]+$' "$TMP/out" || fail "summary lacks edges/s: $(cat "$TMP/out")"
grep -qE '^seconds +[0-9]+\.[0-9]{3}$' "$TMP/out" || fail "summary lacks seconds"
# Progress held back: nothing on stderr.
[ ! -s "$TMP/err" ] || fail "a generate with progress held back wrote to stderr: $(cat "$TMP/err")"

run 0 info "$G"
[ "$(field dataset)" = tiny ] || fail "info: dataset '$(field dataset)'"
[ "$(field nodes)" = 2000 ] || fail "info: nodes '$(field nodes)'"
[ "$(field edges | cut -d' ' -f1)" = "$EDGES" ] || fail "info: edges differ from generate's $EDGES"
[ "$(field classes)" = 5 ] || fail "info: classes '$(field classes)'"
has out "features   16 float32 columns"
[ "$(field splits | sed 's/ ([^)]*)//g')" = "$SPLITS" ] || fail "info: splits differ from '$SPLITS'"
has out "power-law fit: exponent"
grep -qE '^  total +[0-9]+' "$TMP/out" || fail "info: no memory total"
grep -qE '^  25% +32000 ' "$TMP/out" || fail "info: GPU cache of 25% is not 500 rows x 16 x 4 bytes"

run 0 info "$G" --json --check-features
python3 - "$TMP/out" "$EDGES" "$SPLITS" <<'EOF' || fail "info --json disagrees with generate"
import json, re, sys
d = json.load(open(sys.argv[1]))
edges = int(sys.argv[2])
train, val, test = map(int, re.findall(r"\d+", sys.argv[3]))
assert d["name"] == "tiny" and d["nodes"] == 2000 and d["edges"] == edges, d
assert d["feature_dim"] == 16 and d["classes"] == 5 and d["features_checked"] is True, d
assert d["splits"] == {"train": train, "val": val, "test": test}, d["splits"]
g = d["degree"]
assert g["min"] <= g["p50"] <= g["p90"] <= g["p99"] <= g["max"], g
assert abs(g["mean"] - edges / 2000) < 1e-9, g
assert g["powerlaw_exponent"] > 1 and g["in_max"] >= 1, g
m = d["memory"]
assert m["indptr"] == 2001 * 8 and m["indices"] == edges * d["index_bytes"], m
assert m["features"] == 2000 * 16 * 4 and m["labels"] == 2000 * 4, m
assert m["splits"] == (train + val + test) * 8, m
assert m["total"] == m["graph"] + m["features"] + m["labels"] + m["splits"], m
assert [c["rows"] for c in m["gpu_cache"]] == [100, 200, 500], m["gpu_cache"]
assert [c["bytes"] for c in m["gpu_cache"]] == [6400, 12800, 32000], m["gpu_cache"]
EOF

# --seed reaches the generator: the same seed gives the same graph, another seed another one.
run 0 generate --out "$TMP/same" --nodes 2000 --avg-degree 6 --dim 16 --classes 5 --seed 3 \
  --threads 1
cmp -s "$G/indices.npy" "$TMP/same/indices.npy" || fail "the same seed gave another graph"
# With no delay (NG_PROGRESS_DELAY=0) the first report prints, however fast the run: plain lines
# on stderr, the last saying how long it took, and stdout only the summary.
NG_PROGRESS_DELAY=0 run 0 generate --out "$TMP/other" --nodes 2000 --avg-degree 6 --dim 16 \
  --classes 5 --seed 4 --progress plain
cmp -s "$G/indices.npy" "$TMP/other/indices.npy" && fail "--seed 4 gave the graph of --seed 3"
grep -qE '^neargnn generate: [a-z]+ ' "$TMP/err" || fail "no progress line: $(cat "$TMP/err")"
grep -qE '^neargnn generate: done in [0-9]' "$TMP/err" ||
  fail "no final progress line: $(cat "$TMP/err")"
grep -q 'neargnn generate' "$TMP/out" && fail "progress reached stdout: $(cat "$TMP/out")"

# An existing output folder is refused and left as it was.
before=$(ls -l --time-style=+%s.%N "$G" | md5sum)
run 1 generate --out "$G" --nodes 100
has err "neargnn: error: destination already exists: "
has err "$G"
[ "$(ls -l --time-style=+%s.%N "$G" | md5sum)" = "$before" ] || fail "the existing folder changed"
[ ! -s "$TMP/out" ] || fail "a failed generate printed a summary"

# A missing dataset folder: exit 1, the message names it.
run 1 info "$TMP/nope"
has err "neargnn: error: "
has err "$TMP/nope"
[ ! -s "$TMP/out" ] || fail "a failed info wrote to stdout"

# Output that cannot be written is an error, not a silent success.
if [ -w /dev/full ]; then
  "$BIN" info "$G" >/dev/full 2>"$TMP/err"
  rc=$?
  [ "$rc" -eq 1 ] || fail "info >/dev/full: exit $rc, expected 1"
  grep -qF "writing the output failed" "$TMP/err" || fail "info >/dev/full: $(cat "$TMP/err")"
fi

cli_finish
