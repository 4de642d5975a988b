#!/usr/bin/env bash
# Data-parallel training on the CPU backend with the built-in launcher (`neargnn train --ranks N`,
# ranks over loopback TCP; docs/distributed.md): 2 and 3 ranks against one process (the same
# parameters within 1e-6 relative, the same epoch losses within fp32 rounding), the same ranks
# twice (the same bits), the ranks' figures in --json, the cores split between the ranks, and the
# errors (a batch too small for the ranks; a failing rank stops the others).
# $1: the neargnn binary; NG_DATA_DIR: the real datasets.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
CMP="$(dirname "$0")/dist_compare.py"

"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
# No dropout (hidden-layer masks follow a rank's local rows, docs/distributed.md); Cora's 140
# training nodes in batches of 64: iterations of 64, 64 and 12 targets.
base=(--dataset "$TMP/cora" --model sage --fanouts "10,5" --hidden 16 --dropout 0 --optimizer sgd
  --momentum 0.9 --lr 0.2 --seed 5 --progress none --eval-every 0 --workers 1)
common=("${base[@]}" --batch 64 --epochs 4)

run 0 train "${common[@]}" --checkpoint "$TMP/one.st" --json "$TMP/one.json"
run 0 train "${common[@]}" --ranks 2 --checkpoint "$TMP/two.st" --json "$TMP/two.json"
has out "2 ranks, all-reduce"
has err "checkpoint written to $TMP/two.st"
[ "$(grep -c '^epoch' "$TMP/out")" = 4 ] || fail "--ranks 2 printed $(grep -c '^epoch' "$TMP/out") epoch lines, not 4 (rank 0's only)"
"$PY" "$CMP" "$TMP/one.st" "$TMP/two.st" --rel 1e-6 >"$TMP/cmp" 2>&1 ||
  fail "2 ranks vs one process: $(cat "$TMP/cmp")"
"$PY" - "$TMP/one.json" "$TMP/two.json" <<'PY' || fail "--ranks 2: JSON figures wrong"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["ranks"] == 1 and b["ranks"] == 2, (a["ranks"], b["ranks"])
for x, y in zip(a["epochs"], b["epochs"]):
    assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"]), (x["loss"], y["loss"])
    assert abs(x["train_acc"] - y["train_acc"]) <= 1.0 / 140 + 1e-12, (x, y)
    assert x["iterations"] == y["iterations"] == 3, (x, y)
    # A node that two ranks' targets reach is sampled by both (the same neighbours): more edges.
    assert y["sampled_edges"] >= x["sampled_edges"], (x["sampled_edges"], y["sampled_edges"])
    assert y["ranks"] == 2 and y["allreduce_ms"] > 0 and x["allreduce_ms"] == 0, (x, y)
PY
# Rank 1 writes its own summary beside rank 0's: its epochs, the same losses (reduced).
"$PY" - "$TMP/two.json" "$TMP/two.json.rank1" <<'PY' || fail "--ranks 2: rank 1's JSON wrong"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["rank"] == 0 and b["rank"] == 1 and b["ranks"] == 2, (a["rank"], b["rank"])
assert len(a["epochs"]) == len(b["epochs"]) == 4, (len(a["epochs"]), len(b["epochs"]))
for x, y in zip(a["epochs"], b["epochs"]):
    assert x["loss"] == y["loss"] and x["iterations"] == y["iterations"], (x, y)
PY

# The same seed and rank count: the same bits, run after run.
run 0 train "${common[@]}" --ranks 2 --checkpoint "$TMP/two-again.st"
cmp -s "$TMP/two.st" "$TMP/two-again.st" || fail "two runs of --ranks 2 wrote different checkpoints"

# The partitioned cache needs GPUs of one host: on the CPU backend every row is read where it
# lies, so partitioned and auto stay replicated, say why, and give the replicated bits.
run 0 train "${common[@]}" --ranks 2 --cache-placement partitioned --checkpoint "$TMP/two-p.st" \
  --json "$TMP/two-p.json"
has err "cache replicated"
has err "the backend's memory is the host's"
cmp -s "$TMP/two.st" "$TMP/two-p.st" || fail "--cache-placement partitioned on cpu changed the bits"
"$PY" - "$TMP/two-p.json" <<'PY' || fail "--cache-placement: JSON wrong"
import json, sys
c = json.load(open(sys.argv[1]))["cache"]
assert c["placement"] == "replicated" and c["parts"] == 1, c
assert "host" in c["why"], c
PY
run 2 train "${common[@]}" --cache-placement sideways
has err "sideways"

# Three ranks: slices of 21/21/22, 21/21/22 and 4/4/4 targets; gradients scaled by 1/3-ish.
# Every rank needs a core (tests/cli_hardening.sh checks the refusal).
if [ "$(nproc)" -ge 3 ]; then
  run 0 train "${common[@]}" --ranks 3 --checkpoint "$TMP/three.st"
  "$PY" "$CMP" "$TMP/one.st" "$TMP/three.st" --rel 1e-6 >"$TMP/cmp" 2>&1 ||
    fail "3 ranks vs one process: $(cat "$TMP/cmp")"
fi

# The ranks of one host split its cores: two ranks' workers never share a core.
if [ "$(nproc)" -ge 2 ]; then
  run 0 train "${base[@]}" --batch 64 --epochs 1 --ranks 2
  cores=$(sed -n 's/.*1 worker on core \([0-9]*\),.*/\1/p' "$TMP/err" | sort -u | wc -l)
  [ "$cores" = 2 ] || fail "--ranks 2: the ranks' workers share a core: $(grep 'worker' "$TMP/err")"
fi

# A resumed run continues on every rank: 2 + 2 epochs give the 4-epoch run's bits.
run 0 train "${base[@]}" --batch 64 --epochs 2 --ranks 2 --checkpoint "$TMP/half.st"
run 0 train "${common[@]}" --ranks 2 --resume "$TMP/half.st" --checkpoint "$TMP/resumed.st"
cmp -s "$TMP/two.st" "$TMP/resumed.st" || fail "--ranks 2 resumed after 2 epochs differs from 4 epochs"

# Errors: a global batch that leaves a rank without targets; a rank that fails stops the others
# (the dataset vanishes for rank 1 only: NG_RANK is set by the launcher, so a wrapper cannot
# target it; a batch of 1 over 2 ranks fails on every rank instead).
run 1 train "${base[@]}" --epochs 1 --batch 1 --ranks 2
has err "every rank needs at least one target"
has err "rank"
# 140 % 69 = 2 targets in the last iteration: enough for 2 ranks, not for 3 (where 3 cores are);
# 140 % 139 = 1: not enough for 2.
run 0 train "${base[@]}" --batch 69 --ranks 2 --epochs 1
if [ "$(nproc)" -ge 3 ]; then
  run 1 train "${base[@]}" --batch 69 --ranks 3 --epochs 1
  has err "every rank needs at least one target"
fi
run 1 train "${base[@]}" --batch 139 --ranks 2 --epochs 1
has err "every rank needs at least one target"
# A communicator that is not set up right: the environment of a rank without its peers.
NG_RANKS=2 NG_RANK=1 NG_DIST_ADDR=127.0.0.1:1 NG_DIST_TIMEOUT_S=1 run 1 train "${common[@]}"
has err "cannot connect to rank 0"
NG_RANKS=2 NG_RANK=0 NG_DIST_ADDR=127.0.0.1:0 NG_DIST_TIMEOUT_S=1 run 1 train "${common[@]}"
has err "0 of 1 came"
NG_RANKS=2 NG_RANK=0 NG_DIST_ADDR=nonsense run 1 train "${common[@]}"
has err "NG_DIST_ADDR='nonsense'"
cli_finish
