#!/usr/bin/env python3
"""The evaluation harness (docs/eval.md): for each workload, generates (or opens) its dataset
once, measures the machine's limits (bench_floor, and the GPU's compute time with every row hot),
then trains every requested mode x worker count for a fixed number of iterations and writes
results.csv, report.md and plots into one output folder.

    python3 eval/harness/run.py --workload W1 --out /tmp/eval-w1 --bin build/cuda/neargnn

Progress goes to stderr. results.csv and report.md are rewritten after every run, so a harness
stopped by a time limit still leaves what it measured. Python 3 standard library only.
"""

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

# The harness runs from the source tree (also in CI): leave no __pycache__ there.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402
import workloads  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODES = "cpu,baseline,zerocopy,partial,hybrid-static,hybrid"
DEFAULT_WORKERS = "1,2,4,8,12,15"
# Every training run times each op of its device step on one iteration in OP_PROFILE (`neargnn
# train --op-profile`, device events): the report's per-op table. One in 25 keeps its cost small.
OP_PROFILE = 25
log = report.log


def int_list(text, what, lo):
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} '{text}': expected whole numbers like 1,2,4")
    if not vals or any(v < lo for v in vals):
        raise argparse.ArgumentTypeError(f"{what} '{text}': expected whole numbers >= {lo}")
    return vals


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="run.py",
        description="neargnn's evaluation harness: every mode x worker count of each workload, "
        "against the machine's physical floor (docs/eval.md).")
    ap.add_argument("--workload", action="append", default=[],
                    help="workload preset, repeatable or a comma list: "
                    f"{', '.join(workloads.PRESETS)} (default W1)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every workload's nodes (e.g. 0.01 for a quick run)")
    ap.add_argument("--nodes", type=int, default=0, help="nodes of every workload (overrides)")
    ap.add_argument("--iters", type=int, default=0,
                    help="iterations per epoch (default: the preset's); sets the training split")
    ap.add_argument("--epochs", type=int, default=2,
                    help="epochs per run, >= 2: the figures are of the last half")
    ap.add_argument("--modes", default=DEFAULT_MODES, help=f"modes (default {DEFAULT_MODES})")
    ap.add_argument("--workers", default=DEFAULT_WORKERS,
                    help=f"worker counts (default {DEFAULT_WORKERS}); -1 = inline")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="the device of every mode but cpu (cpu mode always runs on the cpu "
                    "device); on cpu the hot tier is simulated (default cuda)")
    ap.add_argument("--out", default="", help="output folder (default "
                    "eval/results/harness-<date>-<time>)")
    ap.add_argument("--bin", default="", help="the neargnn binary (default $NEARGNN, else "
                    "build/default/neargnn, else the newest build/*/neargnn)")
    ap.add_argument("--floor-bin", default="",
                    help="the bench_floor binary (default: beside --bin)")
    ap.add_argument("--data", default="", help="folder for generated datasets, kept for later "
                    "runs (default $TMPDIR/neargnn-eval-data)")
    ap.add_argument("--dataset", default="",
                    help="use this renumbered dataset instead of generating (one workload only)")
    ap.add_argument("--hidden", type=int, default=0, help="hidden width (default: the preset's)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"],
                    help="`neargnn train --precision`: tf32 (tensor-core products) needs "
                    "--device cuda and cpu-mode runs stay fp32; bf16 (feature storage) applies "
                    "to every run (default fp32)")
    ap.add_argument("--lr", type=float, default=0.003, help="learning rate (default 0.003)")
    ap.add_argument("--seed", type=int, default=1, help="training seed (default 1)")
    ap.add_argument("--transfer", default="", help="the TRANSFER group's way: batch, zcopy, auto")
    ap.add_argument("--cpuset", default="", help="cores for the threads, e.g. 0-15")
    ap.add_argument("--extra", default="", help="more `neargnn train` options, one string")
    ap.add_argument("--ranks", type=int, default=1,
                    help="data-parallel ranks (GPUs) of every run: neargnn train --ranks N "
                         "(docs/distributed.md); --batch stays the workload's per rank, the "
                         "global batch is N times it (default 1)")
    ap.add_argument("--probe-seconds", type=float, default=1.0,
                    help="measured interval of each bench_floor figure (default 1)")
    ap.add_argument("--probe-table-gib", type=float, default=0,
                    help="bench_floor's host table (default: the workload's features, 1/64 to "
                    "16 GiB)")
    ap.add_argument("--floor-probe", action=argparse.BooleanOptionalAction, default=True,
                    help="run bench_floor for the PCIe and host-read terms (default on)")
    ap.add_argument("--gpu-probe", action=argparse.BooleanOptionalAction, default=True,
                    help="one extra run per workload with every row hot (--cache-ratio 1 --mode "
                    "partial, most workers): the floor's GPU term (default on)")
    ap.add_argument("--run-timeout", type=float, default=1200,
                    help="seconds before a run is stopped and recorded as timed out")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="start no run after this many seconds (0: no limit); the rest are "
                    "recorded as skipped")
    ap.add_argument("--check-loss", action="store_true",
                    help="exit 1 when the final losses of one device and hot tier differ")
    ap.add_argument("--no-plots", action="store_true", help="do not run gnuplot")
    a = ap.parse_args(argv)
    names = [n.strip() for w in (a.workload or ["W1"]) for n in w.split(",") if n.strip()]
    try:
        a.workers = int_list(a.workers, "--workers", -1)
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in a.modes if m not in report.MODE_ORDER]
    if bad or not a.modes:
        ap.error(f"--modes: unknown mode(s) {', '.join(bad) or '(none)'}; known: "
                 f"{', '.join(report.MODE_ORDER)}")
    if a.ranks < 1:
        ap.error("--ranks must be >= 1")
    if a.epochs < 2:
        ap.error("--epochs must be >= 2: the first epoch warms up and is never reported")
    if not a.scale > 0:
        ap.error("--scale must be > 0")
    if a.precision == "tf32" and a.device != "cuda":
        ap.error("--precision tf32 needs --device cuda (the CPU backend computes in fp32 only)")
    try:
        a.workloads = [workloads.resolve(n, a.scale, a.nodes, a.iters) for n in names]
    except KeyError as e:
        ap.error(str(e.args[0]))
    if len({w.name for w in a.workloads}) != len(a.workloads):
        ap.error("--workload names a workload twice")
    if a.dataset and len(a.workloads) != 1:
        ap.error("--dataset needs exactly one --workload")
    if a.hidden:
        a.workloads = [dataclasses.replace(w, hidden=a.hidden) for w in a.workloads]
    return a


def shown_path(path):
    """`path` as the results record it: relative to the repository when inside it, so that a
    results folder names no machine's folders."""
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def find_bin(arg):
    if arg:
        return os.path.abspath(arg)
    if os.environ.get("NEARGNN"):
        return os.path.abspath(os.environ["NEARGNN"])
    default = os.path.join(ROOT, "build", "default", "neargnn")
    if os.access(default, os.X_OK):
        return default
    cands = []
    bdir = os.path.join(ROOT, "build")
    for d in os.listdir(bdir) if os.path.isdir(bdir) else []:
        b = os.path.join(bdir, d, "neargnn")
        if os.access(b, os.X_OK) and not any(s in d for s in ("asan", "tsan", "fuzz")):
            cands.append((os.path.getmtime(b), b))
    return max(cands)[1] if cands else ""


def run_cmd(cmd, out_path=None, err_path=None, timeout=None):
    """Runs cmd; stdout/stderr to the files (or captured). (returncode or 'timeout', stderr)."""
    with open(out_path or os.devnull, "w") as fo, open(err_path or os.devnull, "w") as fe:
        try:
            p = subprocess.run(cmd, stdout=fo, stderr=fe, timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    err = ""
    if err_path and os.path.exists(err_path):
        with open(err_path) as f:
            err = f.read()
    return rc, err


def last_line(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# ---- datasets ----

def dataset_for(a, w):
    """The renumbered dataset of workload w (generated and reordered once, then reused), and the
    workload updated from its dataset.json."""
    if a.dataset:
        path = os.path.abspath(a.dataset)
        how = f"opened {path}"
        if not os.path.exists(os.path.join(path, "dataset.json")):
            raise RuntimeError(f"--dataset {path} holds no dataset.json: pass a folder made by "
                               "neargnn generate, convert or reorder")
    else:
        root = os.path.abspath(a.data or os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                      "neargnn-eval-data"))
        path = os.path.join(root, w.data_key())
        how = f"generated in {path}"
        if not os.path.exists(os.path.join(path, "dataset.json")):
            os.makedirs(root, exist_ok=True)
            raw = path + ".raw"
            shutil.rmtree(raw, ignore_errors=True)
            t0 = time.time()
            log(f"{w.name}: generating {w.nodes:,} nodes x {w.dim}-d "
                f"({w.feature_bytes / 2**30:.2f} GiB of features), train {w.train_fraction:.4g}")
            gen = [a.bin, "generate", "--out", raw, "--nodes", str(w.nodes), "--avg-degree",
                   f"{w.avg_degree:g}", "--dim", str(w.dim), "--classes", str(w.classes),
                   "--train", f"{w.train_fraction:.6g}", "--val", "0", "--test", "0",
                   "--seed", str(w.seed), "--progress", "none"]
            p = subprocess.run(gen, capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"{shlex.join(gen)} failed: {last_line(p.stderr)}")
            reo = [a.bin, "reorder", "--dataset", raw, "--out", path, "--progress", "none"]
            p = subprocess.run(reo, capture_output=True, text=True)
            shutil.rmtree(raw, ignore_errors=True)
            if p.returncode != 0:
                raise RuntimeError(f"{shlex.join(reo)} failed: {last_line(p.stderr)}")
            how = f"generated and renumbered by degree in {time.time() - t0:.0f} s, kept in {path}"
            log(f"{w.name}: dataset {how}")
        else:
            how = f"reused {path}"
    with open(os.path.join(path, "dataset.json")) as f:
        dj = json.load(f)
    w = dataclasses.replace(w, nodes=int(dj["nodes"]), dim=int(dj["feature_dim"]))
    return path, w, how, dj


# ---- probes ----

def allowed_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def threads_for(workers):
    """The CPU thread counts bench_floor measures: one per positive worker count (inline = 1;
    0 = every allowed core but the device thread's)."""
    cores = allowed_cores()
    ts = {1 if w < 0 else (max(1, cores - 1) if w == 0 else w) for w in workers}
    return sorted(ts)


def rows_per_state(a, w, data, out):
    """The cold rows a PARTIAL state sums in workload w, on average: its cold input-layer edges
    per destination, which bench_sample counts over 200 of its mini-batches with its hot tier
    (with the runs' seed, those of their first epoch; the runs report the same figure as
    cold_edges_per_dst); the input layer's fanout (10 for -1, every neighbour) when bench_sample
    is missing or fails. At least 1: bench_floor's states sum one row or more. (rows, how)."""
    fanout = float(w.fanouts.split(",")[-1])
    fallback = fanout if fanout >= 1 else 10.0
    sample_bin = os.path.join(os.path.dirname(a.floor_bin), "bench_sample")
    if not os.access(sample_bin, os.X_OK):
        return fallback, "the input layer's fanout (no bench_sample)"
    txt = os.path.join(out, "probes", f"sample-{w.name}.txt")
    cmd = [sample_bin, "--fanout", w.fanouts, "--batch", str(w.batch), "--hot-ratio",
           f"{w.cache_ratio:g}", "--iters", "200", "--threads", "1", "--seed", str(a.seed),
           data]
    log(f"probe: {shlex.join(cmd)}")
    rc, err = run_cmd(cmd, txt, txt + ".err", timeout=a.run_timeout)
    with open(txt) as f:
        got = [ln.split()[1] for ln in f if ln.startswith("cold_edges_per_dst ")]
    if rc != 0 or not got:
        log(f"probe: bench_sample failed ({rc}): {last_line(err)}")
        return fallback, "the input layer's fanout (bench_sample failed)"
    count = float(got[0])
    if count < 1.0:
        return 1.0, f"bench_sample's count, {count:.3g}, raised to 1"
    return count, "bench_sample's count"


def floor_probe(a, w, data, out):
    table = a.probe_table_gib or min(16.0, max(1 / 64, w.feature_bytes / 2**30))
    os.makedirs(os.path.join(out, "probes"), exist_ok=True)
    fanout, how = rows_per_state(a, w, data, out)
    log(f"probe: {w.name}: {fanout:.2f} cold rows per state ({how})")
    js = os.path.join(out, "probes", f"floor-{w.name}.json")
    txt = os.path.join(out, "probes", f"floor-{w.name}.txt")
    # The probe's threads get the cores the runs' threads get.
    pre = ["taskset", "-c", a.cpuset] if a.cpuset and shutil.which("taskset") else []
    threads = ",".join(map(str, threads_for(a.workers)))
    # bf16 rows (--precision bf16) are half the bytes: bench_floor reads fp32 rows of half the
    # columns, the same bytes per row (its states are then half too: a looser floor, still a floor).
    probe_dim = max(1, w.dim // 2) if a.precision == "bf16" else w.dim
    cmd = pre + [a.floor_bin, "--dim", str(probe_dim), "--threads", threads,
           "--table-gib", f"{table:.6g}", "--seconds", f"{a.probe_seconds:g}",
           "--fanout", f"{fanout:.4g}", "--json", js]
    log(f"probe: {shlex.join(cmd)}")
    rc, err = run_cmd(cmd, txt, txt + ".err", timeout=a.run_timeout)
    with open(txt) as f:
        for line in f:
            log(f"probe: {line.rstrip()}")
    if rc != 0 or not os.path.exists(js):
        log(f"probe: bench_floor failed ({rc}): {last_line(err)}; floors lack its terms")
        return None
    with open(js) as f:
        return json.load(f)


def precision_of(a, device):
    """The --precision of a run on `device`: the harness's on cuda; on the CPU backend fp32,
    except bf16 (feature storage, which the CPU backend has too)."""
    return a.precision if device == "cuda" or a.precision == "bf16" else "fp32"


def train_cmd(a, w, data, mode, workers, json_path, tel_path, cache_ratio=None):
    device = "cpu" if mode == "cpu" else a.device
    ranks = getattr(a, "ranks", 1)
    cmd = [a.bin, "train", "--dataset", data, "--device", device, "--mode", mode,
           "--workers", str(workers), "--fanouts", w.fanouts, "--batch", str(w.batch * ranks),
           "--hidden", str(w.hidden), "--epochs", str(a.epochs), "--eval-every", "0",
           "--dropout", "0", "--lr", f"{a.lr:g}", "--seed", str(a.seed), "--progress", "none",
           "--json", json_path, "--telemetry", tel_path,
           "--precision", precision_of(a, device), "--op-profile", str(OP_PROFILE)]
    ratio = cache_ratio if cache_ratio is not None else (None if mode == "cpu" else w.cache_ratio)
    if ratio is not None:
        cmd += ["--cache-ratio", f"{ratio:g}"]
    if a.cpuset:
        cmd += ["--cpuset", a.cpuset]
    if ranks > 1:
        cmd += ["--ranks", str(ranks)]
    if a.transfer and mode in ("hybrid", "hybrid-static"):
        cmd += ["--transfer", a.transfer]
    return cmd + shlex.split(a.extra), device


def gpu_probe(a, w, data, rdir):
    """Trains with every row hot: no fetch work, so its iteration time is the device's compute
    time for the workload (plus sampling, when workers are few; hence the most workers)."""
    pos = [x for x in a.workers if x >= 0]
    workers = 0 if 0 in pos else max(pos) if pos else -1
    base = os.path.join(rdir, "gpu-probe")
    cmd, device = train_cmd(a, w, data, "partial", workers, base + ".json", base + ".csv",
                            cache_ratio=1.0)
    log(f"probe: {w.name} GPU compute time: {shlex.join(cmd)}")
    rc, err = run_cmd(cmd, base + ".out", base + ".err", timeout=a.run_timeout)
    if rc != 0:
        log(f"probe: {w.name} GPU probe failed ({rc}): {last_line(err)}")
        return None
    try:
        e = report.row_from_json(w.name, device, "partial", workers, base + ".json",
                                 base + ".csv", 0)
    except (OSError, ValueError, KeyError) as ex:
        log(f"probe: {w.name} GPU probe gave no figure: {ex}")
        return None
    g = {"iter_ms": e["iter_ms_mean"], "it_per_s": e["it_per_s"],
         "iter_ms_median": e["iter_ms_median"], "workers": workers, "device": device,
         "precision": precision_of(a, device), "device_step_ms": e.get("device_step_ms"),
         "run": "gpu-probe"}
    log(f"probe: {w.name} GPU compute time {g['iter_ms']:.3f} ms/it ({e['it_per_s']:.1f} it/s)")
    return g


# ---- the runs ----

def save_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def main(argv):
    a = parse_args(argv)
    a.bin = find_bin(a.bin)
    if not a.bin or not os.access(a.bin, os.X_OK):
        print("run.py: no neargnn binary (build it, pass --bin or set NEARGNN)", file=sys.stderr)
        return 2
    a.floor_bin = os.path.abspath(a.floor_bin) if a.floor_bin else os.path.join(
        os.path.dirname(a.bin), "bench_floor")
    if a.floor_probe and not os.access(a.floor_bin, os.X_OK):
        log(f"no bench_floor at {a.floor_bin} (build the bench_floor target or pass --floor-bin):"
            " floors lack the PCIe and host-read terms")
        a.floor_probe = False
    version = subprocess.run([a.bin, "version"], capture_output=True, text=True).stdout.strip()
    if a.device == "cuda" and any(ln.startswith("cuda: off") for ln in version.splitlines()):
        print(f"run.py: {a.bin} is built without the CUDA backend: pass --device cpu (a "
              "simulated hot tier) or a binary of a -DNG_CUDA=ON build", file=sys.stderr)
        return 2
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
    out = os.path.abspath(a.out or os.path.join(ROOT, "eval", "results", f"harness-{stamp}"))
    os.makedirs(out, exist_ok=True)
    t_start = time.time()
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(), "cores": allowed_cores(),
            "bin": shown_path(a.bin), "version": version, "device": a.device, "epochs": a.epochs,
            "precision": a.precision, "op_profile": OP_PROFILE,
            "command": shlex.join([sys.executable, os.path.relpath(__file__, ROOT)] + argv),
            "modes": a.modes, "workers": a.workers, "ranks": a.ranks, "workloads": {},
            "titles": {}}
    probes = {"floor": {}, "gpu": {}, "sample": {}}
    results_path = os.path.join(out, "results.csv")
    rows = []

    def refresh(render=False):
        save_json(os.path.join(out, "meta.json"), meta)
        save_json(os.path.join(out, "probes.json"), probes)
        report.write_results(results_path, rows)
        return report.refresh(out, render and not a.no_plots)

    log(f"binary {a.bin} ({version.splitlines()[0] if version else '?'}); output {out}")
    # Datasets first: a failure there shows before any measuring.
    plan = []
    for w in a.workloads:
        try:
            data, w2, how, dj = dataset_for(a, w)
        except (OSError, RuntimeError, ValueError, KeyError) as e:
            print(f"run.py: {w.name}: no dataset: {e}", file=sys.stderr)
            return 1
        epoch_iters = -(-int(dj["splits"]["train"]) // (w2.batch * a.ranks))
        meta["workloads"][w2.name] = {
            "nodes": w2.nodes, "dim": w2.dim, "fanouts": w2.fanouts, "batch": w2.batch,
            "hidden": w2.hidden, "cache_ratio": w2.cache_ratio, "avg_degree": w2.avg_degree,
            "classes": dj.get("classes", w2.classes), "train_fraction": w2.train_fraction,
            "train": dj["splits"]["train"], "iters_per_epoch": epoch_iters, "dataset": how,
            "path": data}
        meta["titles"][w2.name] = w2.title if not a.dataset else (
            f"{w2.fanouts} fanouts, batch {w2.batch}, hot tier {w2.cache_ratio:g} of the "
            f"nodes, on the given {w2.dim}-d dataset")
        log(f"{w2.name}: {w2.title}; {w2.nodes:,} nodes, {epoch_iters} iterations per epoch, "
            f"{a.epochs} epochs per run")
        if not w.train and w.iters * w.batch > w.nodes and not a.dataset:
            log(f"{w2.name}: {w.iters} iterations of {w.batch} targets need more than its "
                f"{w.nodes:,} nodes: every node trains, {epoch_iters} iterations per epoch")
        plan.append((w2, data))
    refresh()

    if a.floor_probe:
        for w, data in plan:
            fp = floor_probe(a, w, data, out)
            if fp:
                probes["floor"][w.name] = fp
            # bench_sample's time per mini-batch (run by floor_probe): the sampler term.
            sp = report.parse_sample_probe(os.path.join(out, "probes", f"sample-{w.name}.txt"))
            if sp:
                probes["sample"][w.name] = sp
        refresh()

    total = len(plan) * len(a.workers) * len(a.modes)
    done = 0
    for w, data in plan:
        rdir = os.path.join(out, "runs", w.name)
        os.makedirs(rdir, exist_ok=True)
        if a.gpu_probe:
            g = gpu_probe(a, w, data, rdir)
            if g:
                probes["gpu"][w.name] = g
            refresh()
        for workers in a.workers:
            for mode in a.modes:
                done += 1
                name = report.run_name(mode, workers)
                base = os.path.join(rdir, name)
                cmd, device = train_cmd(a, w, data, mode, workers, base + ".json", base + ".csv")
                row = {"workload": w.name, "device": device, "mode": mode, "workers": workers,
                       "precision": precision_of(a, device)}
                elapsed = time.time() - t_start
                if a.time_budget and elapsed >= a.time_budget:
                    row.update(status="skipped", error=f"time budget of {a.time_budget:g} s spent")
                    rows.append(row)
                    log(f"[{done}/{total}] {w.name} {name}: skipped (time budget)")
                    continue
                with open(base + ".cmd", "w") as f:
                    f.write(shlex.join(cmd) + "\n")
                timeout = a.run_timeout
                budget_cut = False
                if a.time_budget and a.time_budget - elapsed < timeout:
                    timeout = max(1.0, a.time_budget - elapsed)
                    budget_cut = True
                t0 = time.time()
                rc, err = run_cmd(cmd, base + ".out", base + ".err", timeout=timeout)
                if rc == 0:
                    try:
                        row_bytes = w.row_bytes // 2 if a.precision == "bf16" else w.row_bytes
                        row = report.row_from_json(w.name, device, mode, workers, base + ".json",
                                                   base + ".csv", row_bytes)
                        row["precision"] = precision_of(a, device)
                    except (OSError, ValueError, KeyError, TypeError) as e:
                        row.update(status="failed", error=f"unreadable results: {e}")
                elif rc == "timeout" and budget_cut:
                    row.update(status="skipped",
                               error=f"stopped after {timeout:.0f} s: time budget of "
                                     f"{a.time_budget:g} s spent")
                else:
                    row.update(status="timeout" if rc == "timeout" else "failed",
                               error=f"exit {rc}: {last_line(err)}")
                rows.append(row)
                if row["status"] == "ok":
                    log(f"[{done}/{total}] {w.name} {name}: {row['it_per_s']:.1f} it/s, "
                        f"split {report.split_text(row)}, "
                        f"loss {row['final_loss']!r} ({time.time() - t0:.1f} s)")
                else:
                    log(f"[{done}/{total}] {w.name} {name}: {row['status']}: {row['error']}")
                refresh()

    # The probes' rows per state against the runs' own count (the same in every tiered run).
    for w, _ in plan:
        fp = probes["floor"].get(w.name)
        ran = next((float(r["cold_edges_per_dst"]) for r in rows if r["workload"] == w.name
                    and r.get("mode") != "cpu" and r.get("cold_edges_per_dst")), None)
        if fp and ran and abs(fp["fanout"] / ran - 1) > 0.03:
            log(f"probe: {w.name}: the floor probe summed {fp['fanout']:.2f} rows per state, the "
                f"runs' states {ran:.2f}: its delivered rate was measured for states of "
                f"another size")

    losses_ok = refresh(render=True)
    ok_rows = sum(r["status"] == "ok" for r in rows)
    log(f"done in {time.time() - t_start:.0f} s: {ok_rows}/{len(rows)} runs ok; "
        f"{out}/results.csv, {out}/report.md")
    for line in report.loss_check(rows)[1]:
        log(f"loss: {line}")
    if ok_rows != len(rows):
        return 1
    if a.check_loss and not losses_ok:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
