#!/usr/bin/env bash
# The link-prediction harness (eval/harness/run_link.py) end to end on the cpu device, so that
# it never rots: the tiny link workload (generate --links, reorder, split-edges), three modes at
# 1 and 2 threads with the MRR evaluation, results.csv's columns and rows, and one loss per hot
# tier (--check-loss: the runtime's bit-identity guarantee). $1: the neargnn binary.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
HARNESS=$(cd "$(dirname "$0")/../eval/harness" && pwd)
OUT=$TMP/out

python3 "$HARNESS/run_link.py" --workload ltiny --device cpu --modes cpu,baseline,partial,hybrid \
  --threads 1,2 --out "$OUT" --data "$TMP/data" --bin "$BIN" --check-loss >"$TMP/h.out" \
  2>"$TMP/h.err"
rc=$?
[ "$rc" -eq 0 ] || fail "run_link.py: exit $rc; stderr: $(tail -20 "$TMP/h.err")"
grep -q 'ltiny on cpu (hot tier 0.1): all 6 runs end on loss' "$TMP/h.err" ||
  fail "run_link.py did not report one loss for the 6 tiered runs: $(tail -5 "$TMP/h.err")"
python3 - "$OUT" 2>"$TMP/py.err" <<'PY' || fail "results: $(cat "$TMP/py.err")"
import csv, json, os, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "results.csv"))))
assert len(rows) == 8, len(rows)
for r in rows:
    assert r["status"] == "ok", r
    assert int(r["iterations"]) == 8, r  # ltiny's --epoch-iters
    assert float(r["edges_per_s"]) > 0 and float(r["pairs_per_s"]) == 2 * float(r["edges_per_s"]), r
    assert float.fromhex(r["loss_hex"]) == float(r["final_loss"]), r
    assert float(r["eval_seconds"]) >= 0 and 0 < float(r["mrr"]) <= 1, r
    assert float(r["peak_rss_mib"]) > 1, r
meta = json.load(open(os.path.join(out, "results.json")))["meta"]
w = meta["workloads"]["ltiny"]
# 1% of the generated graph's edges held out, 20 negatives each.
assert w["test_edges"] > 0 and abs(w["test_edges"] / (w["train_edges"] + w["test_edges"]) - 0.01) < 0.001, w
assert int(rows[0]["test_edges"]) == w["test_edges"], rows[0]
report = open(os.path.join(out, "report.md")).read()
assert "| hybrid | 2 | ok |" in report and "## Loss bits" in report, report
PY
# A second run reuses the dataset; with --eval-modes only hybrid evaluates, and partial, which
# trains on the train-only view, ends on the same loss bits (--check-loss).
python3 "$HARNESS/run_link.py" --workload ltiny --device cpu --modes partial,hybrid \
  --eval-modes hybrid --threads 1 --out "$TMP/out2" --data "$TMP/data" --bin "$BIN" \
  --check-loss >/dev/null 2>"$TMP/h2.err" || fail "second run: $(tail -5 "$TMP/h2.err")"
grep -q 'reused' "$TMP/out2/results.json" || fail "the second run did not reuse the dataset"
python3 - "$TMP/out2" 2>"$TMP/py2.err" <<'PY' || fail "eval-modes: $(cat "$TMP/py2.err")"
import csv, os, sys
rows = {r["mode"]: r for r in csv.DictReader(open(os.path.join(sys.argv[1], "results.csv")))}
assert rows["partial"]["evaluated"] == "False" and rows["partial"]["mrr"] == "", rows["partial"]
assert rows["hybrid"]["evaluated"] == "True" and float(rows["hybrid"]["mrr"]) > 0, rows["hybrid"]
assert rows["partial"]["loss_hex"] == rows["hybrid"]["loss_hex"], rows
for r in rows.values():
    assert float(r["peak_rss_mib"]) <= float(r["rss_bound_mib"]), r
    assert r["rss_within_bound"] == "True", r
PY
cli_finish
