#!/usr/bin/env bash
# `neargnn convert`: Cora (planetoid) converted and checked with `info --json` against the
# counts of $NG_DATA_DIR/cora/README.md; a small SNAP edge list with made-up features, labels
# and splits; an existing output folder and a missing input are refused. $1: the neargnn binary.
# shellcheck source=SCRIPTDIR/lib_cli.sh
source "$(dirname "$0")/lib_cli.sh"
CORA="${NG_DATA_DIR:?NG_DATA_DIR must name the shared data folder}/cora"

# ---- Cora: 2708 nodes, 5278 undirected edges = 10556 entries, 1433 features, 7 classes,
# ---- splits 140 / 500 / 1000, no isolated nodes, no self loops (README.md) ----
[ -f "$CORA/edges.txt" ] || fail "no Cora at $CORA"
run 0 convert --format planetoid --in "$CORA" --out "$TMP/cora"
[ "$(field converted)" = "$TMP/cora" ] || fail "summary does not name the folder: $(cat "$TMP/out")"
[ "$(field nodes)" = 2708 ] || fail "summary: nodes '$(field nodes)', expected 2708"
[ "$(field edges)" = 10556 ] || fail "summary: edges '$(field edges)', expected 10556"
[ "$(field features)" = 1433 ] || fail "summary: features '$(field features)', expected 1433"
[ "$(field classes)" = 7 ] || fail "summary: classes '$(field classes)', expected 7"
[ "$(field splits)" = "train 140, val 500, test 1000" ] || fail "summary: splits '$(field splits)'"

run 0 info "$TMP/cora" --json --check-features
python3 - "$TMP/out" "$TMP/cora" <<'EOF' || fail "info --json of Cora disagrees with README.md"
import json, sys
d = json.load(open(sys.argv[1]))
want = {"name": "cora", "folder": sys.argv[2], "nodes": 2708, "edges": 10556,
        "feature_dim": 1433, "classes": 7, "undirected": True, "features_checked": True,
        "splits": {"train": 140, "val": 500, "test": 1000}}
for k, v in want.items():
    assert d[k] == v, f"{k}: {d[k]!r}, expected {v!r}"
g = d["degree"]
assert g["isolated"] == 0 and g["self_loops"] == 0 and g["min"] >= 1, g
assert abs(g["mean"] - 10556 / 2708) < 1e-9, g
m = d["memory"]
assert m["features"] == 2708 * 1433 * 4 and m["indptr"] == 2709 * 8, m
EOF
run 0 info "$TMP/cora"
has out "edges      10556 (5278 undirected edges)"

# ---- a SNAP edge list: a comment, a self loop and a duplicate are dropped ----
printf '# a comment\n0 1\n1 2\n2 0\n2 2\n0 1\n3 4\n' >"$TMP/tiny.txt"
run 0 convert --format snap --in "$TMP/tiny.txt" --out "$TMP/tiny" --undirected \
  --features random --dim 4 --classes 3 --train 0.4 --val 0.2 --test 0.2 --seed 5 --name tiny
run 0 info "$TMP/tiny" --json
python3 - "$TMP/out" <<'EOF' || fail "info --json of the SNAP conversion is wrong"
import json, sys
d = json.load(open(sys.argv[1]))
# 4 undirected edges {0-1, 1-2, 0-2, 3-4} stored both ways; 2 + 1 + 1 of 5 nodes in the splits.
want = {"name": "tiny", "nodes": 5, "edges": 8, "undirected": True, "feature_dim": 4,
        "classes": 3, "splits": {"train": 2, "val": 1, "test": 1}}
for k, v in want.items():
    assert d[k] == v, f"{k}: {d[k]!r}, expected {v!r}"
assert d["degree"]["self_loops"] == 0 and d["degree"]["max"] == 2, d["degree"]
EOF

# ---- refusals: existing output (left untouched), missing input (nothing created) ----
before=$(ls -l --time-style=+%s.%N "$TMP/cora" | md5sum)
run 1 convert --format planetoid --in "$CORA" --out "$TMP/cora"
has err "neargnn: error: destination already exists: "
has err "$TMP/cora"
[ "$(ls -l --time-style=+%s.%N "$TMP/cora" | md5sum)" = "$before" ] || fail "existing folder changed"
run 1 convert --format planetoid --in "$TMP/nope" --out "$TMP/x"
has err "neargnn: error: "
has err "$TMP/nope"
left=$(find "$TMP" -maxdepth 1 -name 'x*')
[ -z "$left" ] || fail "a failed convert left $left behind"

cli_finish
