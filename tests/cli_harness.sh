#!/usr/bin/env bash
# The evaluation harness (eval/harness/run.py) end to end on the cpu device, so that it never
# rots: the tiny workload, every mode at 1 and 2 workers, the probes (bench_floor beside the
# binary, when built) and the report. Checks results.csv's columns and rows, the floors, and that
# every run of one hot tier ends on the same final loss (the runtime's bit-identity guarantee).
# $1: the neargnn binary. Under a minute on two idle cores.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
HARNESS=$(cd "$(dirname "$0")/../eval/harness" && pwd)
OUT=$TMP/out

python3 "$HARNESS/run.py" --workload tiny --device cpu --workers 1,2 --out "$OUT" \
  --data "$TMP/data" --bin "$BIN" --probe-seconds 0.1 --check-loss >"$TMP/h.out" 2>"$TMP/h.err"
rc=$?
[ "$rc" -eq 0 ] || fail "run.py: exit $rc; stderr: $(tail -20 "$TMP/h.err")"
grep -q 'tiny on cpu (tiered): all 10 runs end on final_loss' "$TMP/h.err" ||
  fail "run.py did not report one final loss for the 10 tiered runs: $(tail -5 "$TMP/h.err")"

# results.csv: the columns, one row per mode x worker count, and what each row must hold.
floor_bin=$(dirname "$BIN")/bench_floor
python3 - "$OUT" "$floor_bin" 2>"$TMP/py.err" <<'PY' || fail "results.csv: $(cat "$TMP/py.err")"
import csv, math, os, sys
out, floor_bin = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(os.path.join(out, "results.csv"))))
need = ["workload", "device", "mode", "workers", "status", "iterations", "it_per_s",
        "iter_ms_mean", "iter_ms_median", "iter_ms_p99", "hit_rate", "pcie_bytes_per_iter",
        "cpu_cold_bytes_per_iter", "cold_bytes_per_iter", "cold_edges_per_dst", "gpu_busy",
        "partial_workers", "transfer_workers", "final_loss", "floor_pcie_ms", "floor_host_ms",
        "floor_gpu_ms", "floor_ms", "binding", "floor_fraction", "floor_read_host_ms",
        "read_floor_ms", "read_floor_fraction", "precision", "device_step_ms",
        "first_iteration_s", "wall_to_last_step_s", "epoch0_ratio", "floor_sampler_ms",
        "cpu_sum_ms"]
missing = [c for c in need if c not in rows[0]] if rows else need
assert not missing, f"columns missing: {missing}"
# bench_sample's time per mini-batch (probes.json's "sample"), when built: the sampler term.
import json
sample_bin = os.path.join(os.path.dirname(floor_bin), "bench_sample")
sampled = os.access(floor_bin, os.X_OK) and os.access(sample_bin, os.X_OK)
sample_ms = None
if sampled:
    sp = json.load(open(os.path.join(out, "probes.json")))["sample"]
    assert list(sp) == ["tiny"] and sp["tiny"]["ms_per_batch"] > 0, f"sample probes: {sp}"
    sample_ms = sp["tiny"]["ms_per_batch"]
modes = ["cpu", "baseline", "zerocopy", "partial", "hybrid-static", "hybrid"]
got = sorted((r["mode"], int(r["workers"])) for r in rows)
assert got == sorted((m, w) for m in modes for w in (1, 2)), f"rows: {got}"
for r in rows:
    name = f"{r['mode']}-w{r['workers']}"
    assert (r["workload"], r["device"]) == ("tiny", "cpu"), f"{name}: {r['device']}"
    assert r["status"] == "ok", f"{name}: {r['status']} {r['error']}"
    assert float(r["it_per_s"]) > 0, f"{name}: it_per_s {r['it_per_s']}"
    assert abs(float(r["iter_ms_mean"]) * float(r["it_per_s"]) - 1000) < 1e-6, name
    assert float(r["iter_ms_p99"]) >= float(r["iter_ms_median"]) > 0, f"{name}: iteration times"
    p, t = int(r["partial_workers"]), int(r["transfer_workers"])
    assert p + t == int(r["workers"]), f"{name}: split {p}/{t}"
    # The whole run: the first iteration comes before the last, both within the run (at most
    # run.py's --run-timeout, 1200 s, however loaded the machine); epoch 0 against the steady
    # epochs; the op profile's device step.
    first, last = float(r["first_iteration_s"]), float(r["wall_to_last_step_s"])
    assert 0 < first <= last < 1200, f"{name}: first {first}, last {last}"
    assert float(r["epoch0_ratio"]) > 0 and float(r["device_step_ms"]) > 0, name
    assert r["precision"] == "fp32", f"{name}: precision {r['precision']}"
    # The sampler term: bench_sample's ms per mini-batch over the run's workers, in every mode.
    if sample_ms is not None:
        assert math.isclose(float(r["floor_sampler_ms"]), sample_ms / int(r["workers"])), name
    if r["mode"] == "cpu":
        assert float(r["hit_rate"]) == 1.0 and float(r["cold_bytes_per_iter"]) == 0, name
        assert r["floor_ms"] == "" and r["binding"] == "", f"{name}: cpu mode has no floor"
        assert r["cpu_sum_ms"] == r["floor_sampler_ms"], f"{name}: cpu_sum_ms {r['cpu_sum_ms']}"
        continue
    # The 10% hot tier: some rows hot, most cold; the cold rows' bytes reach the device or the
    # CPU's partial aggregation by the mode's way.
    assert 0 < float(r["hit_rate"]) < 1, f"{name}: hit rate {r['hit_rate']}"
    assert float(r["cold_bytes_per_iter"]) > 0, name
    if r["mode"] == "partial":
        assert p == int(r["workers"]) and float(r["cpu_cold_bytes_per_iter"]) > 0, name
    if r["mode"] in ("baseline", "zerocopy"):
        assert t == int(r["workers"]), f"{name}: split {p}/{t}"
    if r["mode"] == "zerocopy":
        assert float(r["pcie_bytes_per_iter"]) > 0, name
        assert float(r["cpu_cold_bytes_per_iter"]) == 0, name
    # The GPU probe always runs; bench_floor's host-read term when it is built.
    assert float(r["floor_gpu_ms"]) > 0 and float(r["floor_ms"]) >= float(r["floor_gpu_ms"]), name
    if os.access(floor_bin, os.X_OK):
        assert r["floor_host_ms"] != "", f"{name}: no host-read term (bench_floor failed? " \
            "its stderr is probes/floor-tiny.txt.err)"
        assert float(r["floor_host_ms"]) > 0, f"{name}: host-read term {r['floor_host_ms']}"
    assert r["binding"] in ("host", "gpu", "sampler"), f"{name}: binding {r['binding']}"
    if sample_ms is not None:
        assert float(r["floor_ms"]) >= float(r["floor_sampler_ms"]), name
        assert math.isclose(float(r["cpu_sum_ms"]),
                            float(r["floor_sampler_ms"]) + float(r["floor_host_ms"])), name
    frac = float(r["floor_fraction"])
    assert math.isclose(frac, float(r["floor_ms"]) / float(r["iter_ms_mean"])), name
    # The report fills the read-only columns too; on the cpu device (no states to deliver, no
    # zero-copy) they equal the floor's.
    assert r["read_floor_ms"] == r["floor_ms"], f"{name}: read-only floor {r['read_floor_ms']}"
    assert r["read_floor_fraction"] == r["floor_fraction"], name
iters = {r["iterations"] for r in rows}
assert len(iters) == 1, f"iterations differ: {iters}"
# The cold rows per state: the same samples and hot tier in every tiered run, so one figure;
# bench_floor's CPU threads sum bench_sample's count of it over other mini-batches (within 2%).
per = {r["cold_edges_per_dst"] for r in rows if r["mode"] != "cpu"}
assert len(per) == 1 and 0 < float(next(iter(per))) < 5, f"cold edges per destination: {per}"
if sampled:
    fp = json.load(open(os.path.join(out, "probes.json")))["floor"]
    assert list(fp) == ["tiny"], f"floor probes: {list(fp)}"
    want = float(next(iter(per)))
    assert math.isclose(fp["tiny"]["fanout"], want, rel_tol=0.02), (fp["tiny"]["fanout"], want)
# device_ops.csv: every run's ops, and the GPU probe's.
ops = list(csv.DictReader(open(os.path.join(out, "device_ops.csv"))))
runs = {o["run"] for o in ops}
assert runs == {f"{r['mode']}-w{r['workers']}" for r in rows} | {"gpu-probe"}, f"op runs: {runs}"
assert all(float(o["ms_per_iter"]) >= 0 and o["op"] for o in ops), "device_ops.csv"
assert any(o["op"].startswith("gemm") for o in ops), "no gemm op in device_ops.csv"
tiered = {r["final_loss"] for r in rows if r["mode"] != "cpu"}
hot = {r["final_loss"] for r in rows if r["mode"] == "cpu"}
assert len(tiered) == 1 and len(hot) == 1, f"final losses differ: {tiered} {hot}"
assert math.isfinite(float(tiered.pop())), "final loss"
PY

[ -s "$OUT/report.md" ] || fail "no report.md"
grep -q '^## tiny: ' "$OUT/report.md" || fail "report.md lacks the workload's section"
grep -q 'all 10 runs end on final_loss' "$OUT/report.md" || fail "report.md lacks the loss check"
grep -q 'DIFFER' "$OUT/report.md" && fail "report.md reports differing losses"
grep -q 'GPU compute time of tiny' "$OUT/report.md" || fail "report.md lacks the GPU probe"
grep -q '| of read-only floor | sampler ms | CPU sum ms |$' "$OUT/report.md" ||
  fail "report.md lacks the sampler and CPU sum columns"
if [ -x "$(dirname "$BIN")/bench_sample" ] && [ -x "$(dirname "$BIN")/bench_floor" ]; then
  grep -q '^- Sampling of tiny (bench_sample, 1 thread' "$OUT/report.md" ||
    fail "report.md lacks bench_sample's time per mini-batch"
fi
# The whole-run columns and the per-op table (from the GPU probe; no roofline on the cpu device).
grep -q '| first it s | to last step s | epoch 0 / steady |' "$OUT/report.md" ||
  fail "report.md lacks the whole-run columns"
grep -q '^### tiny: device step by op' "$OUT/report.md" || fail "report.md lacks the per-op table"
grep -q '| op | layer | ms/iter | share | GFLOP/s | GB/s | roofline ms | roof bound | of roofline |' \
  "$OUT/report.md" || fail "report.md's per-op table lacks its columns"
grep -q '^| gemm fwd | 0 |' "$OUT/report.md" || fail "report.md's per-op table lacks gemm fwd"
grep -q 'From the all-hot GPU probe' "$OUT/report.md" || fail "the per-op table's run is not named"
grep -q 'No roofline fraction: the run was on the cpu device' "$OUT/report.md" ||
  fail "report.md does not say why the cpu device has no roofline"
grep -q 'precision fp32' "$OUT/report.md" || fail "report.md's header lacks the precision"
grep -q -- '--op-profile 25' "$OUT/runs/tiny/hybrid-w2.cmd" || fail "runs lack --op-profile 25"
grep -q '"precision": "fp32"' "$OUT/meta.json" || fail "meta.json lacks the precision"
for f in meta.json probes.json device_ops.csv runs/tiny/hybrid-w2.json runs/tiny/hybrid-w2.cmd; do
  [ -s "$OUT/$f" ] || fail "no $f in the output folder"
done
if [ -x "$(dirname "$BIN")/bench_floor" ]; then
  grep -q '"cpu_alone_gbs"' "$OUT/probes.json" || fail "probes.json lacks bench_floor's figures"
fi
if command -v gnuplot >/dev/null; then
  [ -s "$OUT/plots/tiny-throughput.png" ] || fail "gnuplot is on PATH but no throughput plot"
fi

# report.py alone rebuilds the report from the folder.
rm -f "$OUT/report.md"
python3 "$HARNESS/report.py" "$OUT" --no-plots 2>"$TMP/r.err" ||
  fail "report.py: $(cat "$TMP/r.err")"
grep -q 'all 10 runs end on final_loss' "$OUT/report.md" 2>/dev/null ||
  fail "report.py did not rebuild report.md"

# A run's figures are the totals of its last half of epochs (the larger half of an odd count):
# five epochs of 100 iterations each report epochs 2-4, 300 iterations in their 1.5 s.
python3 - "$HARNESS" "$TMP" 2>"$TMP/w.err" <<'PY' || fail "the reported epochs: $(cat "$TMP/w.err")"
import json, math, os, sys
sys.path.insert(0, sys.argv[1])
import report
ep = [{"epoch": i, "iterations": 100, "seconds": [9.0, 9.0, 0.25, 0.5, 0.75][i],
       "h2d_bytes": 1000 * (i + 1), "iter_ms_median": float(i + 1), "iter_ms_p99": 10.0 - i,
       "partial_workers": i, "transfer_workers": 5 - i} for i in range(5)]
path = os.path.join(sys.argv[2], "five.json")
json.dump({"epochs": ep, "final_loss": 1.5}, open(path, "w"))
r = report.row_from_json("w", "cuda", "hybrid", 5, path, "/nonexistent.csv", 4)
assert (r["epochs"], r["iterations"], r["seconds"]) == (5, 300, 1.5), r
assert r["it_per_s"] == 200.0 and r["iter_ms_mean"] == 5.0, r
assert r["h2d_bytes_per_iter"] == 40.0, r          # (3000 + 4000 + 5000) / 300
assert (r["iter_ms_median"], r["iter_ms_p99"]) == (4.0, 8.0), r
assert (r["partial_workers"], r["transfer_workers"]) == (4, 1), r  # the split at the end
# epoch0_ratio: epoch 0 against the median of the later epochs (0.625 of 9, 0.25, 0.5, 0.75).
assert r["epoch0_ratio"] == 9.0 / 0.625, r
assert r["first_iteration_s"] is None and r["device_step_ms"] is None, r
json.dump({"epochs": ep[:1]}, open(path, "w"))
assert report.row_from_json("w", "cuda", "hybrid", 5, path, "", 4)["iterations"] == 100
json.dump({"epochs": ep[:2], "first_iteration_s": 2.5, "wall_to_last_step_s": 20.0},
          open(path, "w"))
r = report.row_from_json("w", "cuda", "hybrid", 5, path, "", 4)
assert (r["first_iteration_s"], r["wall_to_last_step_s"], r["epoch0_ratio"]) == (2.5, 20.0, 1.0)

# The roofline: max(flops / GEMM peak, bytes / HBM), the peak of the run's precision; an op
# below half of it is flagged. 50 TFLOP/s fp32, 400 tf32, 2000 GB/s.
peaks = {"floor": {"w": {"hbm_gbs": 2000.0, "gemm_fp32_tflops": 50.0,
                         "gemm_tf32_tflops": 400.0}}}
assert report.roofline_peaks(peaks, "w", "cuda", "fp32")[:2] == (50.0, 2000.0)
assert report.roofline_peaks(peaks, "w", "cuda", "tf32")[:2] == (400.0, 2000.0)
assert report.roofline_peaks(peaks, "w", "cpu", "fp32")[0] is None
assert report.roofline_peaks({"floor": {"w": {"hbm_gbs": -1, "gemm_fp32_tflops": -1}}},
                             "w", "cuda", "fp32")[0] is None
gemm = {"op": "gemm fwd", "layer": 0, "ms_per_iter": 0.1, "flops_per_iter": 2e9,
        "bytes_per_iter": 4e7}                       # 0.04 ms of flops, 0.02 of bytes
roof, frac, bound = report.roofline(gemm, 50.0, 2000.0)
assert math.isclose(roof, 0.04) and math.isclose(frac, 0.4) and bound == "flops", roof
aggr = {"op": "aggr fwd", "layer": 1, "ms_per_iter": 0.05, "flops_per_iter": 1e6,
        "bytes_per_iter": 8e7}                       # 0.04 ms of bytes
roof, frac, bound = report.roofline(aggr, 50.0, 2000.0)
assert math.isclose(frac, 0.8) and bound == "bytes", frac
# The report's per-op table: the GPU probe's ops when it has them, else the first run's.
out = os.path.join(sys.argv[2], "ops")
os.makedirs(os.path.join(out, "runs", "w"), exist_ok=True)
json.dump({"device_ops": [aggr], "device_step_ms": 0.05, "op_profile_iterations": 4},
          open(os.path.join(out, "runs", "w", "partial-w4.json"), "w"))
rows = [{"workload": "w", "mode": "partial", "workers": "4", "status": "ok", "device": "cuda",
         "precision": "fp32", "iter_ms_mean": "0.2"}]
meta = {"op_profile": 25, "precision": "fp32"}
text = "\n".join(report.op_section(out, "w", rows, peaks, meta))
assert "the workload's first run, partial-w4" in text and "| aggr fwd | 1 |" in text, text
assert "| 80% |" in text and "<50%" not in text and "No op runs below half" in text, text
probes = dict(peaks, gpu={"w": {"device": "cuda", "precision": "fp32", "workers": 4,
                                "iter_ms": 0.2}})
json.dump({"device_ops": [aggr, gemm], "device_step_ms": 0.15, "op_profile_iterations": 4},
          open(os.path.join(out, "runs", "w", "gpu-probe.json"), "w"))
text = "\n".join(report.op_section(out, "w", rows, probes, meta))
assert "From the all-hot GPU probe" in text, text
assert "| gemm fwd | 0 | 0.1000 | 66.7% | 20000.0 | 400.0 | 0.0400 | flops | 40% <50% |" in text, text
assert "1 of 2 ops, each below half its roofline (marked <50%): gemm fwd (layer 0)" in text, text

# The cuda floor's host term takes bench_floor's delivered rate (reads with the states staged
# and copied); the read-only floor its combined rate; a probe without delivered figures (an
# older bench_floor) falls back to combined for both. 4 workers: the 4-thread entry.
fp = {"h2d_gbs": 50.0, "threads": [
    {"threads": 1, "cpu_alone_gbs": 5.0, "combined_gbs": 60.0, "delivered_gbs": 55.0},
    {"threads": 4, "cpu_alone_gbs": 20.0, "combined_gbs": 100.0, "delivered_gbs": 80.0}]}
probes = {"floor": {"8": fp}, "gpu": {"w": {"device": "cuda", "iter_ms": 0.1}}}
row = {"workload": "w", "device": "cuda", "mode": "hybrid", "status": "ok", "workers": "4",
       "partial_workers": "3", "transfer_workers": "1", "pcie_bytes_per_iter": "5e6",
       "cold_bytes_per_iter": "2e7", "iter_ms_mean": "0.5"}
f = report.floor_of(row, probes, {"w": 8})
assert math.isclose(f["floor_pcie_ms"], 0.1) and math.isclose(f["floor_host_ms"], 0.25), f
# A workload's own probe (keyed by its name) comes before its row width's (older folders).
own = {"h2d_gbs": 50.0, "threads": [{"threads": 4, "combined_gbs": 100.0, "delivered_gbs": 40.0}]}
g = report.floor_of(row, {"floor": {"8": fp, "w": own}, "gpu": probes["gpu"]}, {"w": 8})
assert math.isclose(g["floor_host_ms"], 0.5), g
assert f["binding"] == "host" and math.isclose(f["floor_fraction"], 0.5), f
assert math.isclose(f["floor_read_host_ms"], 0.2) and math.isclose(f["read_floor_ms"], 0.2), f
assert math.isclose(f["read_floor_fraction"], 0.4), f
# The workload floor of either kind: the least PCIe time, the largest host time, the GPU time.
other = dict(row, mode="zerocopy", pcie_bytes_per_iter="2e7")
rows = [dict(row, **f), dict(other, **report.floor_of(other, probes, {"w": 8}))]
assert report.workload_floor(rows, "w", 4) == ("host", f["floor_host_ms"]), rows
b, ms = report.workload_floor(rows, "w", 4, "floor_read_host_ms")
assert b == "host" and math.isclose(ms, 0.2), (b, ms)
# The read-only floor's host term may bind less than another term: it is the floor's max.
cold = dict(row, cold_bytes_per_iter="5e6", pcie_bytes_per_iter="1e6")
f = report.floor_of(cold, probes, {"w": 8})
assert f["binding"] == "gpu" and math.isclose(f["floor_host_ms"], 0.0625), f
assert math.isclose(f["read_floor_ms"], 0.1) and math.isclose(f["floor_ms"], 0.1), f
# A delivered rate above the combined one (noise) never makes the floor the lower of the two.
fp["threads"][1]["delivered_gbs"] = 110.0
f = report.floor_of(row, probes, {"w": 8})
assert math.isclose(f["floor_host_ms"], 0.2) and f["read_floor_ms"] == f["floor_ms"], f
del fp["threads"][1]["delivered_gbs"]
f = report.floor_of(row, probes, {"w": 8})
assert math.isclose(f["floor_host_ms"], 0.2) and f["read_floor_ms"] == f["floor_ms"], f
# Without bench_sample's figure (older folders) there is no sampler term and no CPU sum.
assert f["floor_sampler_ms"] is None and f["cpu_sum_ms"] is None, f
# The sampler term: bench_sample's ms per mini-batch / the run's workers (the final split's sum,
# else --workers; inline, -1, is 1). 4 ms over 4 workers = 1 ms binds against host 0.2 and
# gpu 0.1; the CPU sum adds the host term, never part of the floor.
probes["sample"] = {"w": {"ms_per_batch": 4.0}}
f = report.floor_of(row, probes, {"w": 8})
assert f["binding"] == "sampler" and math.isclose(f["floor_ms"], 1.0), f
assert math.isclose(f["floor_sampler_ms"], 1.0) and math.isclose(f["cpu_sum_ms"], 1.2), f
assert math.isclose(f["floor_fraction"], 2.0) and math.isclose(f["read_floor_ms"], 1.0), f
inline = dict(row, workers="-1", partial_workers="0", transfer_workers="0")
assert math.isclose(report.floor_of(inline, probes, {"w": 8})["floor_sampler_ms"], 4.0)
cpu = dict(row, mode="cpu", device="cpu", workers="2", partial_workers="", transfer_workers="")
f = report.floor_of(cpu, probes, {"w": 8})
assert f["floor_ms"] is None and f["binding"] is None, f          # cpu mode: still no floor
assert math.isclose(f["floor_sampler_ms"], 2.0) and math.isclose(f["cpu_sum_ms"], 2.0), f
rows = [dict({c: "" for c in report.RAW_COLUMNS}, **r, **report.floor_of(r, probes, {"w": 8}))
        for r in (row, other)]
assert report.workload_floor(rows, "w", 4) == ("sampler", 1.0), rows
text = "\n".join(report.workload_section(sys.argv[2], "w", rows, probes, {}, {}))
assert "bound by the CPU sampler" in text, text
assert "| 1.000 | sampler | 200% |" in text and "| 1.000 | 1.200 |" in text, text
# bench_sample's output (probes/sample-NAME.txt): its `per batch:` line; none when it failed.
sdir = os.path.join(sys.argv[2], "samp")
os.makedirs(os.path.join(sdir, "probes"), exist_ok=True)
with open(os.path.join(sdir, "probes", "sample-w.txt"), "w") as fh:
    fh.write("fanout 15,10,5 (targets outwards), batch 1024, gcn off, transpose off, 1 thread, "
             "200 batches\nper batch: 547305 sampled edges, 459453 nodes, 18.28 ms per batch "
             "per thread\ncold_edges_per_dst 3.12399 (input layer, hot tier 0.05 of the nodes)\n")
open(os.path.join(sdir, "probes", "sample-bad.txt"), "w").close()
got = report.add_sample_probes(sdir, {})["sample"]
assert list(got) == ["w"], got
assert got["w"] == {"ms_per_batch": 18.28, "sampled_edges": 547305, "nodes": 459453,
                    "threads": 1, "batches": 200, "cold_edges_per_dst": 3.12399}, got
# probes.json's own figure comes first.
kept = report.add_sample_probes(sdir, {"sample": {"w": {"ms_per_batch": 1.0}}})
assert kept["sample"]["w"] == {"ms_per_batch": 1.0}, kept
PY

# The rows per state without a working bench_sample: the input layer's fanout (10 for -1, every
# neighbour); with one, its count, raised to 1 when below.
python3 - "$HARNESS" "$TMP" 2>"$TMP/rps.err" <<'PY' || fail "rows per state: $(cat "$TMP/rps.err")"
import os, sys, types
sys.path.insert(0, sys.argv[1])
import run, workloads
tmp = os.path.join(sys.argv[2], "rps")
os.makedirs(os.path.join(tmp, "probes"), exist_ok=True)
run.log = lambda msg: None
a = types.SimpleNamespace(floor_bin=os.path.join(tmp, "bench_floor"), seed=1, run_timeout=30)
w = workloads.PRESETS["tiny"]
assert run.rows_per_state(a, w, "/nonexistent", tmp) == (5.0, "the input layer's fanout (no bench_sample)")
fake = os.path.join(tmp, "bench_sample")
def script(body):
    with open(fake, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(fake, 0o755)
script("exit 3")
got = run.rows_per_state(a, w, "/nonexistent", tmp)
assert got == (5.0, "the input layer's fanout (bench_sample failed)"), got
script("echo cold_edges_per_dst 0.25")
got = run.rows_per_state(a, w, "/nonexistent", tmp)
assert got[0] == 1.0 and "raised to 1" in got[1], got
script("echo cold_edges_per_dst 3.5")
assert run.rows_per_state(a, w, "/nonexistent", tmp) == (3.5, "bench_sample's count")
script("exit 3")
got = run.rows_per_state(a, workloads.replace(w, fanouts="10,-1"), "/nonexistent", tmp)
assert got[0] == 10.0, got
PY

# Usage errors exit 2 and name the problem.
usage_error() {
  local want=$1
  shift
  python3 "$HARNESS/run.py" --bin "$BIN" --out "$TMP/x" "$@" >/dev/null 2>"$TMP/e.err"
  local rc=$?
  [ "$rc" -eq 2 ] || fail "run.py $*: exit $rc, expected 2"
  grep -qF -- "$want" "$TMP/e.err" || fail "run.py $*: stderr lacks '$want': $(cat "$TMP/e.err")"
}
usage_error "unknown workload 'W9'" --workload W9
usage_error "epochs must be >= 2" --workload tiny --epochs 1
usage_error "unknown mode(s) turbo" --workload tiny --modes cpu,turbo
usage_error "--workers" --workload tiny --workers 1,x
usage_error "--precision tf32 needs --device cuda" --workload tiny --device cpu --precision tf32
cli_finish
