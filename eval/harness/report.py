#!/usr/bin/env python3
"""The evaluation harness's results: floors, results.csv, report.md and plots (docs/eval.md).

    python3 eval/harness/report.py OUT [--no-plots]

recomputes the floor columns of OUT/results.csv from OUT/probes.json, rewrites it, and writes
OUT/report.md and (with gnuplot on PATH) the PNG plots under OUT/plots/. eval/harness/run.py calls
the same functions after every run, so a harness stopped half-way still leaves a consistent
folder; running this on a copy of the folder (e.g. fetched from the GPU machine) renders the plots
where gnuplot is installed.

The floor of one run's iteration is the longest of four times (DESIGN.md, section 9):

    pcie  = PCIe bytes per iteration (h2d + zero-copy) / the measured pinned H2D bandwidth
    host  = cold-row bytes per iteration / the measured rate host DRAM yields cold rows at, at the
            run's core count and row size: on the cuda device, CPU aggregation delivering its
            states to the GPU (staged, copied) and GPU zero-copy running together (the sum of
            their read rates, bench_floor's `delivered`); CPU aggregation alone on the cpu device
    gpu   = the device's compute time per iteration (the --gpu-probe run: every row hot)
    sampler = the CPU time one mini-batch's sampling takes (bench_sample, one thread) / the
            run's workers: every iteration is sampled by a worker

A term whose rate was not measured is left out. floor_fraction = floor / the run's mean iteration
time (1 / it_per_s): 1.0 means the run moves its data as fast as the machine can.
cpu_sum_ms = sampler + host: the workers' sampling and the cold rows' reads one after the other,
as if they never overlapped on a core; an estimate shown beside the floor, never part of it (the
floor stays a lower bound). The read-only
floor (read_floor_ms, read_floor_fraction) takes the host term at bench_floor's `combined` rate
instead, CPU aggregation that writes nothing: a bound no run reaches, kept for comparison with
earlier reports (docs/eval.md).

Every run also times the ops of its device step (`neargnn train --op-profile`); device_ops.csv
keeps them all, and the report gives, per workload, one run's ops (the all-hot GPU probe's, else
the workload's first run's) against the roofline of bench_floor's device peaks: an op's roofline
time = max(flops / GEMM peak, bytes / HBM bandwidth), its fraction = roofline time / its time.
"""

import csv
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys

RAW_COLUMNS = [
    "workload", "device", "mode", "workers", "status", "epochs", "iterations", "seconds",
    "it_per_s", "iter_ms_mean", "iter_ms_median", "iter_ms_p99", "hit_rate",
    "pcie_bytes_per_iter", "h2d_bytes_per_iter", "zcopy_bytes_per_iter",
    "cpu_cold_bytes_per_iter", "cold_bytes_per_iter", "cold_edges_per_dst", "gpu_busy",
    "partial_workers", "transfer_workers", "device_share", "precision", "device_step_ms",
    "first_iteration_s", "wall_to_last_step_s", "epoch0_ratio", "final_loss", "ranks",
    "allreduce_ms", "error",
]
FLOOR_COLUMNS = ["floor_pcie_ms", "floor_host_ms", "floor_gpu_ms", "floor_sampler_ms", "floor_ms",
                 "binding", "floor_fraction", "floor_read_host_ms", "read_floor_ms",
                 "read_floor_fraction", "cpu_sum_ms"]
COLUMNS = RAW_COLUMNS + FLOOR_COLUMNS
OP_COLUMNS = ["workload", "run", "device", "precision", "op", "layer", "calls", "ms_per_iter",
              "flops_per_iter", "bytes_per_iter", "op_profile_iterations"]
# An op under this fraction of its roofline time is flagged in the report.
ROOFLINE_FLAG = 0.5

# Modes in the order tables and plots list them.
MODE_ORDER = ["cpu", "baseline", "zerocopy", "partial", "hybrid-static", "hybrid"]
BINDING_WORDS = {
    "pcie": "PCIe (H2D bandwidth)",
    "host": "host DRAM (cold rows read by CPU aggregation, its states delivered, and GPU "
            "zero-copy)",
    "gpu": "GPU compute",
    "sampler": "the CPU sampler (the workers' sampling of every mini-batch, bench_sample's time "
               "per batch over the workers)",
}


def log(msg):
    print(f"[harness] {msg}", file=sys.stderr, flush=True)


def num(v):
    """A CSV cell as a float, or None when empty or not a number."""
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def cell(v):
    """A value as a CSV cell: floats with 17 significant digits (losses compare exactly)."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def mode_key(mode):
    return (MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER), mode)


def run_name(mode, workers):
    return f"{mode}-w{workers}"


# ---- reading one run's outputs ----

def read_telemetry(path):
    """The telemetry CSV of a run as a list of dicts of floats (empty when missing)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [{k: num(v) for k, v in r.items()} for r in csv.DictReader(f)]


def gpu_busy(telemetry, epochs):
    """The device thread's busy share over the epochs in `epochs`, weighted by interval
    length."""
    lines = [t for t in telemetry if t.get("epoch") in epochs and (t.get("seconds") or 0) > 0
             and t.get("device_busy") is not None]
    total = sum(t["seconds"] for t in lines)
    if total <= 0:
        return None
    return sum(t["device_busy"] * t["seconds"] for t in lines) / total


def first_reported(epochs):
    """The index of the first epoch a run's figures are of: they cover the last half (the
    larger half of an odd count), never the first epoch unless it is the only one. The first
    epochs warm up and, in hybrid, walk the controller to its split; one short epoch alone
    varies by 5-10% on the GPU machine."""
    return len(epochs) // 2


def row_from_json(workload, device, mode, workers, train_json, telemetry_csv, row_bytes):
    """results.csv's raw columns for one finished run: the totals of its reported epochs (the
    last half, see first_reported) from its --json file."""
    with open(train_json) as f:
        j = json.load(f)
    epochs = j.get("epochs") or []
    if not epochs:
        raise ValueError(f"{train_json} lists no epoch")
    first = first_reported(epochs)
    window = epochs[first:]
    total = lambda key: sum(e.get(key) or 0 for e in window)  # noqa: E731
    it, secs = total("iterations"), total("seconds")
    if it <= 0 or secs <= 0:
        raise ValueError(f"{train_json}: the reported epochs ran no iteration")
    per = lambda key: total(key) / it  # noqa: E731
    ips = it / secs
    hot, cold = total("hot_rows"), total("cold_rows")
    dst = total("destinations")
    medians = sorted(e["iter_ms_median"] for e in window if e.get("iter_ms_median") is not None)
    p99s = [e["iter_ms_p99"] for e in window if e.get("iter_ms_p99") is not None]
    last = epochs[-1]
    later = sorted(e["seconds"] for e in epochs[1:] if (e.get("seconds") or 0) > 0)
    steady = ((later[(len(later) - 1) // 2] + later[len(later) // 2]) / 2) if later else None
    e0 = epochs[0].get("seconds")
    return {
        "workload": workload, "device": device, "mode": mode, "workers": workers,
        "status": "ok", "epochs": len(epochs), "iterations": it, "seconds": secs,
        "it_per_s": ips, "iter_ms_mean": 1e3 / ips,
        "iter_ms_median": medians[len(medians) // 2] if medians else None,
        "iter_ms_p99": max(p99s) if p99s else None,
        "hit_rate": hot / (hot + cold) if hot + cold > 0 else None,
        "pcie_bytes_per_iter": per("h2d_bytes") + per("zcopy_bytes"),
        "h2d_bytes_per_iter": per("h2d_bytes"), "zcopy_bytes_per_iter": per("zcopy_bytes"),
        "cpu_cold_bytes_per_iter": per("cpu_cold_bytes"),
        "cold_bytes_per_iter": cold * row_bytes / it,
        "cold_edges_per_dst": total("cold_edges") / dst if dst > 0 else None,
        "gpu_busy": gpu_busy(read_telemetry(telemetry_csv),
                             {e.get("epoch", i) for i, e in enumerate(window, first)}),
        "partial_workers": last.get("partial_workers"),
        "transfer_workers": last.get("transfer_workers"),
        "device_share": last.get("device_share") or 0,
        "device_step_ms": j.get("device_step_ms"),
        "first_iteration_s": j.get("first_iteration_s"),
        "wall_to_last_step_s": j.get("wall_to_last_step_s"),
        "epoch0_ratio": e0 / steady if steady and e0 is not None else None,
        "final_loss": j.get("final_loss"),
        # Data-parallel runs (docs/distributed.md): rank 0's figures; it_per_s counts global
        # iterations (every rank trains its slice of each). allreduce_ms: the gradient
        # all-reduce's mean time per iteration on rank 0.
        "ranks": j.get("ranks", 1),
        "allreduce_ms": (sum((e.get("allreduce_ms") or 0) * e["iterations"] for e in window) / it
                         if j.get("ranks", 1) > 1 else 0.0),
        "error": "",
    }


# ---- floors ----

def load_json(path, default):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def host_rate(floor_probe, threads, device, reads_only=False):
    """GB/s at which `threads` workers and (on cuda) the GPU consume cold rows, from bench_floor's
    figures: the entry for that thread count, else the largest measured below it, else the
    smallest measured. On cuda: the delivered rate, or the combined one when that is lower (the
    two differ by noise alone when states cost little) or `delivered` was not measured; with
    `reads_only`, the combined rate."""
    entries = [t for t in (floor_probe or {}).get("threads", []) if t.get("threads")]
    if not entries:
        return None
    entries.sort(key=lambda t: t["threads"])
    below = [t for t in entries if t["threads"] <= threads]
    t = below[-1] if below else entries[0]
    if device == "cpu":
        return t.get("cpu_alone_gbs")
    comb, dlv = t.get("combined_gbs"), t.get("delivered_gbs")
    if reads_only or dlv is None:
        return comb
    return dlv if comb is None else min(dlv, comb)


def floor_probe_of(probes, workload, dims):
    """bench_floor's figures for a workload: its own probe (at its rows per state), else, in
    folders of older harnesses, the probe of its row width."""
    floors = probes.get("floor", {})
    if workload in floors:
        return floors[workload]
    dim = dims.get(workload)
    return floors.get(str(dim)) if dim else None


SAMPLE_LINE = re.compile(r"per batch:\s*(\d+) sampled edges,\s*(\d+) nodes,\s*([0-9.eE+-]+) ms "
                         r"per batch per thread")


def parse_sample_probe(path):
    """bench_sample's figures from its output (probes/sample-NAME.txt): {"ms_per_batch" (CPU ms
    to sample one mini-batch on one thread), "sampled_edges", "nodes", "threads", "batches",
    "cold_edges_per_dst"}, or None when the file is missing or holds no `per batch:` line (the
    probe failed)."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read()
    m = SAMPLE_LINE.search(text)
    if not m:
        return None
    got = {"ms_per_batch": float(m.group(3)), "sampled_edges": int(m.group(1)),
           "nodes": int(m.group(2))}
    t = re.search(r"(\d+) threads?, (\d+) batches", text)
    if t:
        got["threads"], got["batches"] = int(t.group(1)), int(t.group(2))
    c = re.search(r"^cold_edges_per_dst (\S+)", text, re.M)
    if c:
        got["cold_edges_per_dst"] = num(c.group(1))
    return got if got["ms_per_batch"] > 0 else None


def add_sample_probes(out, probes):
    """Fills probes["sample"] from OUT/probes/sample-NAME.txt for the workloads it lacks (folders
    of harnesses that did not store it in probes.json). Returns probes."""
    samples = probes.setdefault("sample", {})
    for path in sorted(glob.glob(os.path.join(out, "probes", "sample-*.txt"))):
        wl = os.path.basename(path)[len("sample-"):-len(".txt")]
        if wl not in samples:
            got = parse_sample_probe(path)
            if got:
                samples[wl] = got
    return probes


def sampler_ms(probes, workload, threads):
    """The sampler term: bench_sample's CPU ms per mini-batch on one thread / the run's workers
    (each iteration's mini-batch is sampled by one worker), None when not measured."""
    sp = (probes.get("sample") or {}).get(workload)
    ms = num((sp or {}).get("ms_per_batch"))
    return ms / max(1, threads) if ms else None


def floor_of(row, probes, dims):
    """The floor columns of one results row (all empty when the run failed; in cpu mode, which
    has no cold rows and no GPU, only the sampler term and cpu_sum_ms)."""
    out = {k: None for k in FLOOR_COLUMNS}
    if row.get("status") != "ok":
        return out
    # The workers that ran: the final split (every worker samples, whatever its role), else
    # --workers as passed (inline, -1: the device thread samples alone; 0 with no split: 1).
    pw, tw = num(row.get("partial_workers")) or 0, num(row.get("transfer_workers")) or 0
    threads = int(pw + tw) if pw + tw > 0 else max(1, int(num(row.get("workers")) or 1))
    sampler = sampler_ms(probes, row["workload"], threads)
    out["floor_sampler_ms"] = sampler
    if row.get("mode") == "cpu":
        out["cpu_sum_ms"] = sampler  # no cold rows: no host term to add
        return out
    fp = floor_probe_of(probes, row["workload"], dims)
    device = row.get("device")
    terms = {}
    h2d = (fp or {}).get("h2d_gbs")
    pcie = num(row.get("pcie_bytes_per_iter"))
    if device != "cpu" and h2d and pcie is not None:
        terms["pcie"] = pcie / (h2d * 1e9) * 1e3
    rate = host_rate(fp, threads, device)
    read_rate = host_rate(fp, threads, device, reads_only=True)
    cold = num(row.get("cold_bytes_per_iter"))
    if rate and cold is not None:
        terms["host"] = cold / (rate * 1e9) * 1e3
    read_host = cold / (read_rate * 1e9) * 1e3 if read_rate and cold is not None else None
    g = probes.get("gpu", {}).get(row["workload"])
    if g and g.get("device") == device and g.get("iter_ms"):
        terms["gpu"] = g["iter_ms"]
    out["floor_pcie_ms"] = terms.get("pcie")
    out["floor_host_ms"] = terms.get("host")
    out["floor_gpu_ms"] = terms.get("gpu")
    if sampler is not None:
        terms["sampler"] = sampler
        if "host" in terms:
            out["cpu_sum_ms"] = sampler + terms["host"]
    if terms:
        binding = max(terms, key=terms.get)
        out["floor_ms"] = terms[binding]
        out["binding"] = binding
        mean = num(row.get("iter_ms_mean"))
        if mean:
            out["floor_fraction"] = terms[binding] / mean
        out["floor_read_host_ms"] = read_host
        read_terms = dict(terms)
        if read_host is not None:
            read_terms["host"] = read_host
        out["read_floor_ms"] = max(read_terms.values())
        if mean:
            out["read_floor_fraction"] = out["read_floor_ms"] / mean
    return out


def workload_floor(rows, workload, workers, host_key="floor_host_ms"):
    """The floor of a workload at a worker count, whatever the strategy: the least PCIe time any
    GPU run at that count needed, against the shared host, GPU and sampler terms (the host term
    from `host_key`: floor_read_host_ms gives the read-only floor). (name, ms) or None."""
    runs = [r for r in rows if r["workload"] == workload and str(r["workers"]) == str(workers)
            and r.get("status") == "ok" and r.get("mode") != "cpu"]
    if not runs:
        return None
    terms = {}
    pcie = [num(r.get("floor_pcie_ms")) for r in runs if num(r.get("floor_pcie_ms")) is not None]
    if pcie:
        terms["pcie"] = min(pcie)
    host = [num(r.get(host_key)) for r in runs if num(r.get(host_key)) is not None]
    if host:
        terms["host"] = max(host)  # the same cold rows in every mode; the slowest rate counts
    gpu = [num(r.get("floor_gpu_ms")) for r in runs if num(r.get("floor_gpu_ms")) is not None]
    if gpu:
        terms["gpu"] = gpu[0]
    sampler = [num(r.get("floor_sampler_ms")) for r in runs
               if num(r.get("floor_sampler_ms")) is not None]
    if sampler:
        terms["sampler"] = min(sampler)  # the same in every mode at a worker count
    if not terms:
        return None
    b = max(terms, key=terms.get)
    return b, terms[b]


# ---- device ops and the roofline ----

def run_json_path(out, workload, run):
    """The --json file of run `run` (MODE-wN, or gpu-probe) of a workload."""
    return os.path.join(out, "runs", workload, run + ".json")


def device_ops_of(path):
    """A run's op profile from its --json file: (ops, device_step_ms, timed iterations); ([],
    None, None) when the file is missing or has none (a binary without --op-profile)."""
    j = load_json(path, {}) if os.path.exists(path) else {}
    ops = [o for o in j.get("device_ops") or [] if isinstance(o, dict) and o.get("op")]
    return ops, j.get("device_step_ms"), j.get("op_profile_iterations")


def collect_ops(out, rows, probes, meta):
    """Every run's ops as device_ops.csv rows: each workload's GPU probe, then its finished runs
    in run order."""
    got = []

    def add(wl, run, device, precision):
        ops, _, timed = device_ops_of(run_json_path(out, wl, run))
        got.extend({"workload": wl, "run": run, "device": device, "precision": precision,
                    "op_profile_iterations": timed, **{k: o.get(k) for k in OP_COLUMNS[4:10]}}
                   for o in ops)

    order = list(meta.get("workloads", {}))
    for wl in order + sorted({r["workload"] for r in rows} - set(order)):
        g = probes.get("gpu", {}).get(wl)
        if g:
            add(wl, "gpu-probe", g.get("device"), g.get("precision") or "fp32")
        for r in rows:
            if r["workload"] == wl and r.get("status") == "ok":
                add(wl, run_name(r["mode"], r["workers"]), r.get("device"),
                    r.get("precision") or "fp32")
    return got


def write_ops(path, ops):
    write_csv(path, ops, OP_COLUMNS)


def peak(v):
    """A bench_floor peak, None when not measured (null, or -1 without CUDA)."""
    x = num(v)
    return x if x is not None and x > 0 else None


def roofline_peaks(probes, workload, device, precision):
    """(GEMM TFLOP/s, HBM GB/s, why not): bench_floor's device peaks for a run on `device` at
    `precision` (gemm_tf32_tflops for tf32, else gemm_fp32_tflops); (None, None, reason) when
    the run was not on the GPU or the probe did not measure them."""
    if device != "cuda":
        return None, None, (f"the run was on the {device or '?'} device, which bench_floor has "
                            "no peaks for")
    fp = (probes.get("floor") or {}).get(workload) or {}
    if not fp:
        return None, None, "bench_floor did not run for this workload"
    key = "gemm_tf32_tflops" if precision == "tf32" else "gemm_fp32_tflops"
    tflops, gbs = peak(fp.get(key)), peak(fp.get("hbm_gbs"))
    if tflops is None or gbs is None:
        return None, None, f"bench_floor measured no {key} or hbm_gbs (an older bench_floor?)"
    return tflops, gbs, ""


def roofline(op, tflops, gbs):
    """(roofline ms, fraction, bound) of one op: roofline time = max(flops / GEMM peak, bytes /
    HBM bandwidth), fraction = roofline time / its measured time, bound = which term is longer
    ('flops' or 'bytes'). (None, None, None) without peaks or a measured time."""
    ms = num(op.get("ms_per_iter"))
    if not tflops or not gbs or ms is None:
        return None, None, None
    t_flops = (num(op.get("flops_per_iter")) or 0) / (tflops * 1e12) * 1e3
    t_bytes = (num(op.get("bytes_per_iter")) or 0) / (gbs * 1e9) * 1e3
    roof = max(t_flops, t_bytes)
    return roof, (roof / ms if ms > 0 else None), ("flops" if t_flops > t_bytes else "bytes")


def op_source(out, wl, rows, probes, meta):
    """The run whose ops the report shows for a workload: the GPU probe (every row hot) when its
    --json has ops, else the workload's first run with ops. A dict (label, run, device,
    precision, ops, step_ms, timed, iter_ms) or None."""
    g = probes.get("gpu", {}).get(wl)
    if g:
        ops, step, timed = device_ops_of(run_json_path(out, wl, "gpu-probe"))
        if ops:
            n = g.get("workers")
            return {"label": f"the all-hot GPU probe (gpu-probe, {n} worker"
                             f"{'' if n == 1 else 's'})",
                    "run": "gpu-probe", "device": g.get("device") or meta.get("device"),
                    "precision": g.get("precision") or meta.get("precision") or "fp32",
                    "ops": ops, "step_ms": step, "timed": timed, "iter_ms": num(g.get("iter_ms"))}
    for r in rows:
        if r["workload"] != wl or r.get("status") != "ok":
            continue
        name = run_name(r["mode"], r["workers"])
        ops, step, timed = device_ops_of(run_json_path(out, wl, name))
        if ops:
            return {"label": f"the workload's first run, {name} (no GPU probe with ops)",
                    "run": name, "device": r.get("device"),
                    "precision": r.get("precision") or "fp32", "ops": ops, "step_ms": step,
                    "timed": timed, "iter_ms": num(r.get("iter_ms_mean"))}
    return None


def op_section(out, wl, rows, probes, meta):
    """The report's per-op table of a workload's device step, against the roofline."""
    src = op_source(out, wl, rows, probes, meta)
    lines = [f"### {wl}: device step by op", ""]
    if not src:
        lines += ["No run recorded its ops (a binary without `--op-profile`?).", ""]
        return lines
    ops = sorted(src["ops"], key=lambda o: -(num(o.get("ms_per_iter")) or 0))
    step = num(src["step_ms"]) or sum(num(o.get("ms_per_iter")) or 0 for o in ops)
    tflops, gbs, why = roofline_peaks(probes, wl, src["device"], src["precision"])
    text = (f"From {src['label']}, {src['device']} device, {src['precision']}: "
            f"{fmt(step, '.3f')} ms of device ops per iteration over {src['timed'] or '?'} "
            f"timed iteration{'' if src['timed'] == 1 else 's'} (one in "
            f"{meta.get('op_profile', '?')})")
    if src["iter_ms"]:
        text += f", {step / src['iter_ms']:.0%} of its {src['iter_ms']:.3f} ms per iteration"
    lines += [text + ".", ""]
    body, low, roof_sum = [], [], 0.0
    for o in ops:
        ms = num(o.get("ms_per_iter"))
        roof, frac, bound = roofline(o, tflops, gbs)
        layer = o.get("layer")
        name = f"{o.get('op')} (layer {layer})" if layer is not None and layer >= 0 else o.get("op")
        mark = ""
        if frac is not None and frac < ROOFLINE_FLAG:
            mark = " <50%"
            low.append(name)
        if roof is not None:
            roof_sum += roof

        def per_s(key):  # GFLOP/s or GB/s
            return None if not ms else (num(o.get(key)) or 0) / (ms * 1e-3) * 1e-9
        body.append([o.get("op"), layer if layer is not None and layer >= 0 else "-",
                     fmt(ms, ".4f"), fmt(ms / step if ms is not None and step else None, ".1%"),
                     fmt(per_s("flops_per_iter"), ".1f"), fmt(per_s("bytes_per_iter"), ".1f"),
                     fmt(roof, ".4f"), bound or "-",
                     (fmt(frac, ".0%") + mark) if frac is not None else "-"])
    lines.append(md_table(["op", "layer", "ms/iter", "share", "GFLOP/s", "GB/s", "roofline ms",
                           "roof bound", "of roofline"], body))
    lines.append("")
    if tflops:
        key = "gemm_tf32_tflops" if src["precision"] == "tf32" else "gemm_fp32_tflops"
        text = (f"Roofline: GEMM peak {tflops:.1f} TFLOP/s (bench_floor's `{key}`) and HBM "
                f"{gbs:.0f} GB/s (`hbm_gbs`); an op's roofline time = max(flops / GEMM peak, "
                "bytes / HBM bandwidth), of roofline = roofline time / its measured time "
                f"(roof bound: the longer term). The step's roofline sum is {roof_sum:.3f} ms")
        lines.append(text + (f", {roof_sum / step:.0%} of its device time." if step else "."))
        if low:
            lines.append(f"{len(low)} of {len(ops)} ops, each below half its roofline (marked "
                         f"<50%): {', '.join(low)}.")
        else:
            lines.append("No op runs below half its roofline.")
    else:
        lines.append(f"No roofline fraction: {why}.")
    lines.append("")
    return lines


# ---- results.csv ----

def read_results(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_csv(path, rows, columns):
    """Writes `rows` (dicts) as CSV with `columns`, through a temporary file renamed into place."""
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: cell(r.get(k)) for k in columns})
    os.replace(tmp, path)


def write_results(path, rows):
    write_csv(path, rows, COLUMNS)


def add_floors(rows, probes, dims):
    for r in rows:
        r.update(floor_of(r, probes, dims))
    return rows


# ---- losses ----

def loss_groups(rows):
    """Final losses by (workload, device, tiered): the runtime makes every mode and worker count
    of one device and hot tier end on the same bits; cpu mode keeps every row hot, a different
    summation order, so it forms its own group."""
    groups = {}
    for r in rows:
        if r.get("status") != "ok":
            continue
        key = (r["workload"], r["device"], "all rows hot" if r["mode"] == "cpu" else "tiered")
        groups.setdefault(key, []).append(r)
    return groups


def loss_check(rows):
    """(ok, lines): whether each group's final losses are identical, and a line per group."""
    ok, lines = True, []
    for (wl, dev, kind), rs in sorted(loss_groups(rows).items()):
        losses = sorted({cell(num(r["final_loss"])) for r in rs})
        if len(losses) == 1:
            lines.append(f"{wl} on {dev} ({kind}): all {len(rs)} runs end on final_loss "
                         f"{losses[0]}")
        else:
            ok = False
            detail = "; ".join(f"{run_name(r['mode'], r['workers'])}={r['final_loss']}"
                               for r in rs)
            lines.append(f"{wl} on {dev} ({kind}): final losses DIFFER: {detail}")
    return ok, lines


# ---- plots ----

def gnuplot_terminal():
    """pngcairo when this gnuplot has it, else png; None without gnuplot."""
    exe = shutil.which("gnuplot")
    if not exe:
        return None
    for term in ("pngcairo", "png"):
        p = subprocess.run([exe, "-e", f"set terminal {term}"], capture_output=True, text=True)
        if p.returncode == 0 and "unknown" not in p.stderr.lower():
            return term
    return None


def write_plots(out, rows, meta, render=True):
    """Writes the plots' data and gnuplot scripts under OUT/plots/ and, when gnuplot is on PATH
    and `render`, runs them. Returns the PNG files made, by workload."""
    pdir = os.path.join(out, "plots")
    ddir = os.path.join(pdir, "data")
    os.makedirs(ddir, exist_ok=True)
    term = gnuplot_terminal() if render else None
    scripts, made = [], {}
    workloads = sorted({r["workload"] for r in rows})
    for wl in workloads:
        # Throughput against worker count, one line per mode.
        plots = []
        xs = sorted({int(r["workers"]) for r in rows if r["workload"] == wl})
        for mode in sorted({r["mode"] for r in rows if r["workload"] == wl}, key=mode_key):
            pts = sorted((int(r["workers"]), num(r["it_per_s"])) for r in rows
                         if r["workload"] == wl and r["mode"] == mode and r["status"] == "ok"
                         and num(r["it_per_s"]))
            if not pts:
                continue
            dat = os.path.join(ddir, f"{wl}-{mode}.dat")
            with open(dat, "w") as f:
                f.write("# workers it_per_s\n")
                f.writelines(f"{w} {v}\n" for w, v in pts)
            plots.append(f"'data/{wl}-{mode}.dat' using 1:2 with linespoints lw 2 pt 7 "
                         f"title '{mode}'")
        if plots:
            gp = os.path.join(pdir, f"{wl}-throughput.gp")
            with open(gp, "w") as f:
                f.write(f"set terminal {term or 'pngcairo'} size 900,560\n"
                        f"set output '{wl}-throughput.png'\n"
                        f"set title '{wl}: {meta.get('titles', {}).get(wl, '')}' noenhanced\n"
                        "set xlabel 'worker threads (cores)'\nset ylabel 'iterations/s'\n"
                        "set key left top\nset grid\nset yrange [0:*]\n"
                        f"set xtics ({', '.join(map(str, xs))})\n"
                        "plot " + ", \\\n     ".join(plots) + "\n")
            scripts.append((wl, gp, f"{wl}-throughput.png"))
        # The hybrid runs' group split over time (all epochs, time running on).
        for r in rows:
            if r["workload"] != wl or r["mode"] != "hybrid" or r["status"] != "ok":
                continue
            tel = read_telemetry(os.path.join(out, "runs", wl,
                                              run_name(r["mode"], r["workers"]) + ".csv"))
            if not tel:
                continue
            name = f"{wl}-split-w{r['workers']}"
            base = os.path.join(out, "runs", wl, run_name(r["mode"], r["workers"]))
            # Epochs follow one another: each epoch's telemetry times start at 0, so they are
            # offset by the lengths of the epochs before (from the run's --json).
            starts, t0 = {}, 0.0
            for e in load_json(base + ".json", {}).get("epochs", []):
                starts[e.get("epoch")] = t0
                t0 += e.get("seconds") or 0
            with open(os.path.join(ddir, name + ".dat"), "w") as f, \
                    open(os.path.join(ddir, name + "-rate.dat"), "w") as g:
                f.write("# t partial partial+transfer (two points per interval: its start and "
                        "end)\n")
                g.write("# t(mid-interval) it_per_s\n")
                for line in tel:
                    off = starts.get(int(line.get("epoch") or 0), 0.0)
                    t1 = off + (line.get("t") or 0)
                    ta = t1 - (line.get("seconds") or 0)
                    p_w = line.get("partial_workers") or 0
                    all_w = p_w + (line.get("transfer_workers") or 0)
                    f.write(f"{ta:.4f} {p_w:g} {all_w:g}\n{t1:.4f} {p_w:g} {all_w:g}\n")
                    g.write(f"{(ta + t1) / 2:.4f} {line.get('it_per_s') or 0:g}\n")
            gp = os.path.join(pdir, name + ".gp")
            with open(gp, "w") as f:
                f.write(f"set terminal {term or 'pngcairo'} size 900,560\n"
                        f"set output '{name}.png'\n"
                        f"set title '{wl} hybrid, {r['workers']} worker"
                        f"{'s' if str(r['workers']) != '1' else ''}: group split over "
                        "time' noenhanced\n"
                        "set xlabel 'seconds of training (all epochs)'\n"
                        "set ylabel 'workers (stacked)'\nset y2label 'iterations/s'\n"
                        "set ytics nomirror\nset y2tics\nset yrange [0:*]\nset y2range [0:*]\n"
                        "set xrange [0:*]\nset key left bottom opaque\nset grid front\n"
                        "set style fill solid 0.6 noborder\n"
                        f"plot 'data/{name}.dat' using 1:3 with filledcurves x1 lc rgb '#e69f00' "
                        "title 'TRANSFER', \\\n"
                        f"     'data/{name}.dat' using 1:2 with filledcurves x1 lc rgb '#0072b2' "
                        "title 'PARTIAL', \\\n"
                        f"     'data/{name}-rate.dat' using 1:2 axes x1y2 with linespoints "
                        "lw 2 pt 7 lc rgb 'black' title 'it/s'\n")
            scripts.append((wl, gp, name + ".png"))
    if term:
        for wl, gp, png in scripts:
            p = subprocess.run(["gnuplot", os.path.basename(gp)], cwd=pdir, capture_output=True,
                               text=True)
            if p.returncode == 0 and os.path.exists(os.path.join(pdir, png)):
                made.setdefault(wl, []).append(png)
            else:
                log(f"gnuplot {gp} failed: {p.stderr.strip()[:300]}")
    return made


# ---- report.md ----

def split_text(r):
    """The final split of a run: PARTIAL/TRANSFER workers, and the device share when there is
    one (the share of PARTIAL packages' destinations the device reduced)."""
    share = num(r.get("device_share")) or 0
    text = f"{r['partial_workers']}/{r['transfer_workers']}"
    return text + (f"+{share:.0%}" if share else "")


def fmt(x, spec, scale=1.0):
    x = num(x)
    return "-" if x is None else format(x * scale, spec)


def md_table(header, body):
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---" if i < 2 else "---:" for i in range(len(header))) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def probe_section(probes):
    lines = ["## Measured limits (bench_floor)", ""]
    floors = probes.get("floor", {})
    if not floors:
        lines += ["Not measured (no bench_floor, or --no-floor-probe): the floors below lack the "
                  "PCIe and host-read terms.", ""]
    # Keyed by workload (its own rows per state), or by row width (older harnesses: those in
    # numeric order, after the workloads).
    order = lambda kv: (kv[0].isdigit(), int(kv[0]) if kv[0].isdigit() else 0, kv[0])  # noqa: E731
    for key, fp in sorted(floors.items(), key=order):
        whose = f"{key}: " if not key.isdigit() else ""
        lines.append(f"{whose}rows of {fp.get('row_bytes')} B ({fp.get('dim')}-d), host table "
                     f"{fp.get('table_bytes', 0) / 2**30:.2f} GiB, "
                     f"{fmt(fp.get('fanout'), '.2f')} rows summed per state, "
                     f"{fp.get('cpu_isa')} kernels, {fp.get('seconds')} s per figure; device: "
                     f"{fp.get('device')}. H2D pinned copy: {fmt(fp.get('h2d_gbs'), '.1f')} GB/s; "
                     f"GPU zero-copy gather alone: {fmt(fp.get('gpu_zcopy_gbs'), '.1f')} GB/s.")
        lines.append("")
        body = [[t.get("threads"), fmt(t.get("cpu_alone_gbs"), ".1f"),
                 fmt(t.get("cpu_together_gbs"), ".1f"), fmt(t.get("gpu_together_gbs"), ".1f"),
                 fmt(t.get("combined_gbs"), ".1f"), fmt(t.get("cpu_delivering_gbs"), ".1f"),
                 fmt(t.get("gpu_delivering_gbs"), ".1f"), fmt(t.get("states_gbs"), ".1f"),
                 fmt(t.get("delivered_gbs"), ".1f")] for t in fp.get("threads", [])]
        lines.append(md_table(["CPU threads", "CPU aggr. alone GB/s", "CPU together",
                               "GPU together", "combined (reads only)", "CPU delivering",
                               "GPU delivering", "states copied", "delivered"], body))
        lines.append("")
        own = ("" if key.isdigit() else
               " Each state sums the workload's own mean of cold input-layer edges per "
               "destination (`cold_edges_per_dst`), so the states cost what they cost its runs.")
        lines.append("The host term of the floor takes `delivered`: CPU aggregation that also "
                     "stages its states and has them copied to the GPU, as a PARTIAL worker "
                     "must, with zero-copy meanwhile; `combined` gives the read-only floor."
                     + own)
        lines.append("")
    for wl, g in sorted(probes.get("gpu", {}).items()):
        lines.append(f"- GPU compute time of {wl} (every row hot, {g.get('workers')} workers, "
                     f"{g.get('device')}): {fmt(g.get('iter_ms'), '.3f')} ms per iteration "
                     f"({fmt(g.get('it_per_s'), '.1f')} it/s).")
    if probes.get("gpu"):
        lines.append("")
    for wl, sp in sorted((probes.get("sample") or {}).items()):
        lines.append(f"- Sampling of {wl} (bench_sample, {sp.get('threads', 1)} thread"
                     f"{'s' if sp.get('threads', 1) != 1 else ''}, "
                     f"{sp.get('batches', '?')} mini-batches): "
                     f"{fmt(sp.get('ms_per_batch'), '.2f')} ms of CPU per mini-batch "
                     f"({sp.get('sampled_edges', 0):,} sampled edges, {sp.get('nodes', 0):,} "
                     "nodes); the floor's sampler term divides it by the run's workers.")
    if probes.get("sample"):
        lines.append("")
    return lines


def workload_section(out, wl, rows, probes, meta, plots):
    params = meta.get("workloads", {}).get(wl, {})
    rs = sorted((r for r in rows if r["workload"] == wl),
                key=lambda r: (int(r["workers"]), mode_key(r["mode"])))
    ok = [r for r in rs if r["status"] == "ok"]
    lines = [f"## {wl}: {meta.get('titles', {}).get(wl, '')}", ""]
    if params:
        lines.append(f"Dataset: {params.get('nodes'):,} nodes, {params.get('dim')}-d rows "
                     f"({params.get('dim', 0) * 4} B), features "
                     f"{params.get('nodes', 0) * params.get('dim', 0) * 4 / 2**30:.2f} GiB, "
                     f"fanouts {params.get('fanouts')}, batch {params.get('batch')}, hidden "
                     f"{params.get('hidden')}, hot tier {params.get('cache_ratio', 0) * 100:g}% of "
                     f"the nodes" + (f", {params['classes']} classes" if params.get("classes")
                                     else "")
                     + (f", train {params['train']:,} nodes ({params.get('iters_per_epoch')} "
                        "iterations per epoch)" if params.get("train") is not None else "")
                     + f"; {params.get('dataset')}.")
    tiered = [r for r in ok if r["mode"] != "cpu"]
    if tiered:
        r0 = tiered[0]
        lines.append(f"Per iteration (the last half of {r0['epochs']} epochs, {r0['iterations']} "
                     f"iterations): hit rate {fmt(r0['hit_rate'], '.1%')}, cold rows "
                     f"{fmt(r0['cold_bytes_per_iter'], '.2f', 1e-6)} MB.")
    lines.append("")
    body = []
    for r in rs:
        if r["status"] != "ok":
            body.append([r["mode"], r["workers"], r["status"], "", "", "", "", "", "", "", "",
                         "", "", "", "", "", "", "", (r.get("error") or "")[:80]])
            continue
        body.append([r["mode"], r["workers"], fmt(r["it_per_s"], ".1f"),
                     fmt(r["iter_ms_mean"], ".3f"), fmt(r["iter_ms_median"], ".3f"),
                     fmt(r["iter_ms_p99"], ".3f"), fmt(r.get("first_iteration_s"), ".2f"),
                     fmt(r.get("wall_to_last_step_s"), ".2f"), fmt(r.get("epoch0_ratio"), ".2f"),
                     fmt(r["pcie_bytes_per_iter"], ".2f", 1e-6),
                     fmt(r["cpu_cold_bytes_per_iter"], ".2f", 1e-6), fmt(r["gpu_busy"], ".2f"),
                     split_text(r),
                     fmt(r["floor_ms"], ".3f"), r.get("binding") or "-",
                     fmt(r["floor_fraction"], ".0%"), fmt(r.get("read_floor_fraction"), ".0%"),
                     fmt(r.get("floor_sampler_ms"), ".3f"), fmt(r.get("cpu_sum_ms"), ".3f")])
    lines.append(md_table(["mode", "workers", "it/s", "ms/it", "median ms", "p99 ms",
                           "first it s", "to last step s", "epoch 0 / steady", "PCIe MB/it",
                           "CPU cold MB/it", "GPU busy", "split P/T",
                           "floor ms", "bound", "of floor", "of read-only floor",
                           "sampler ms", "CPU sum ms"], body))
    lines.append("")
    # Per worker count: the best run against the workload's floor, and the hybrid's gains.
    summary = []
    for w in sorted({int(r["workers"]) for r in tiered}):
        at = [r for r in tiered if int(r["workers"]) == w]
        best = max(at, key=lambda r: num(r["it_per_s"]) or 0)
        wf = workload_floor(rows, wl, w)
        by = {r["mode"]: num(r["it_per_s"]) for r in at}
        s = (f"- {w} worker{'s' if w != 1 else ''}: best {best['mode']} at "
             f"{fmt(best['it_per_s'], '.1f')} it/s "
             f"({fmt(best['iter_ms_mean'], '.3f')} ms/it)")
        if wf:
            frac = wf[1] / num(best["iter_ms_mean"]) if num(best["iter_ms_mean"]) else None
            s += (f"; the workload's floor is {wf[1]:.3f} ms/it, bound by "
                  f"{BINDING_WORDS[wf[0]]}, and the best run reaches {fmt(frac, '.0%')} of it")
            if frac and frac > 1.05:
                s += " (above 100%: a floor term is overestimated, see docs/eval.md)"
            rf = workload_floor(rows, wl, w, "floor_read_host_ms")
            if rf and not math.isclose(rf[1], wf[1]) and num(best["iter_ms_mean"]):
                s += (f" ({rf[1] / num(best['iter_ms_mean']):.0%} of the read-only floor, "
                      f"{rf[1]:.3f} ms/it)")
        busy = num(best.get("gpu_busy"))
        if busy is not None:
            s += (f"; the device thread was busy {busy:.0%} of the time, so "
                  + ("the device set the pace" if busy >= 0.9 else
                     "the host side (workers) set the pace"))
        gains = [f"{by['hybrid'] / by[m]:.2f}x {m}" for m in ("baseline", "zerocopy", "partial",
                                                             "hybrid-static")
                 if by.get("hybrid") and by.get(m)]
        if gains:
            s += "; hybrid = " + ", ".join(gains)
        summary.append(s + ".")
    if summary:
        lines += summary + [""]
    lines += op_section(out, wl, rows, probes, meta)
    for png in plots.get(wl, []):
        lines += [f"![{png}](plots/{png})", ""]
    return lines


def write_report(out, rows, probes, meta, plots):
    lines = ["# neargnn evaluation harness report", ""]
    if meta:
        lines.append(f"Date {meta.get('date')}; host {meta.get('host')} "
                     f"({meta.get('cores')} cores); binary {meta.get('bin')} "
                     f"({meta.get('version', '').splitlines()[0] if meta.get('version') else '?'}"
                     f"); device {meta.get('device')}; precision "
                     f"{meta.get('precision', 'fp32')}"
                     + (" (cpu-mode runs fp32)" if meta.get("precision") == "tf32" else "")
                     + f"; {meta.get('epochs')} epochs per run, the last half reported"
                     + (f"; every run times its device ops on one iteration in "
                        f"{meta['op_profile']}" if meta.get("op_profile") else "") + ".")
        lines += ["", "```", meta.get("command", ""), "```", ""]
    lines += ["Columns and the floor are defined in docs/eval.md. ms/it = 1000 / it/s (the "
              "floor compares with it); median and p99 are the times between two iterations "
              "finishing on the device; PCIe = h2d + zero-copy bytes; split P/T = PARTIAL / "
              "TRANSFER workers at the end (+N%: the device share, docs/scheduler.md); bound = "
              "the floor's longest term (pcie, host, gpu, sampler); "
              "of floor = floor / ms/it; of read-only floor = the same with the host term at "
              "the rate of reads alone; sampler ms = the floor's sampler term, bench_sample's "
              "CPU time per mini-batch / the run's workers (also given for cpu mode, which has "
              "no floor); CPU sum ms = sampler + host term, the workers' sampling and cold-row "
              "reads as if they never overlapped on a core: an estimate, not a bound, never part "
              "of the floor. Whole run: first it s = seconds from process start to "
              "the first training iteration done, to last step s = to the last one (the run's "
              "wall time, dataset opening and warm-up included), epoch 0 / steady = epoch 0's "
              "seconds / the median of the later epochs'. Each workload's device step by op: "
              "one run's ops against the roofline of bench_floor's GEMM and HBM peaks; an op "
              "below half its roofline is marked <50%.", ""]
    lines += probe_section(probes)
    for wl in sorted({r["workload"] for r in rows}, key=lambda w: list(
            meta.get("workloads", {})).index(w) if w in meta.get("workloads", {}) else 99):
        lines += workload_section(out, wl, rows, probes, meta, plots)
    ok, loss_lines = loss_check(rows)
    lines += ["## Final losses", "",
              "Every mode and worker count of one device and hot tier must end on the same bits "
              "(the runtime consumes iterations in order):", ""]
    lines += [f"- {line}" for line in loss_lines] + [""]
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["## Runs that did not finish", ""]
        lines += [f"- {r['workload']} {run_name(r['mode'], r['workers'])}: {r['status']}: "
                  f"{r.get('error', '')}" for r in failed] + [""]
    tmp = os.path.join(out, "report.md.tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, os.path.join(out, "report.md"))
    return ok


def refresh(out, render_plots):
    """Recomputes the floors, rewrites results.csv, device_ops.csv and report.md, and
    (optionally) the plots.
    Returns whether the final losses agree."""
    meta = load_json(os.path.join(out, "meta.json"), {})
    probes = add_sample_probes(out, load_json(os.path.join(out, "probes.json"), {}))
    dims = {wl: p.get("dim") for wl, p in meta.get("workloads", {}).items()}
    path = os.path.join(out, "results.csv")
    rows = add_floors(read_results(path), probes, dims)
    write_results(path, rows)
    write_ops(os.path.join(out, "device_ops.csv"), collect_ops(out, rows, probes, meta))
    plots = write_plots(out, rows, meta, render=render_plots)
    return write_report(out, rows, probes, meta, plots)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="Recompute floors and write report.md and plots "
                                 "from a harness output folder.")
    ap.add_argument("out", help="the harness's output folder (with results.csv)")
    ap.add_argument("--no-plots", action="store_true", help="do not run gnuplot")
    a = ap.parse_args(argv)
    if not os.path.exists(os.path.join(a.out, "results.csv")):
        print(f"report.py: {a.out}/results.csv does not exist; run eval/harness/run.py first",
              file=sys.stderr)
        return 1
    ok = refresh(a.out, not a.no_plots)
    log(f"wrote {a.out}/report.md" + ("" if ok else " (final losses differ!)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
