#!/usr/bin/env python3
"""The link-prediction harness (docs/eval.md#link-prediction-l4): for each link workload,
generates its graph once (`neargnn generate --links`, renumbered by degree, `split-edges` holding
out the test edges with their fixed negatives), then runs `neargnn train --task link` in every
requested mode x thread count for a fixed number of mini-batches per epoch, each run ending with
the MRR evaluation of the held-out edges. Writes results.csv, results.json and report.md into one
output folder: positive edges/s and pairs/s (the last epoch), the loss and its exact bits per
run, the evaluation's seconds and metrics, and each run's peak resident set against the
documented bound (docs/link-prediction.md, "Memory").

`--eval-modes` picks the modes whose runs evaluate (the others train on a view of the dataset
whose test split is empty), and `--iters` / `--epochs` cap the mini-batches, so that a subset
fits a time-limited call on the GPU machine:

    python3 eval/harness/run_link.py --workload L4 --modes baseline,hybrid --eval-modes hybrid \
        --iters 50 --bin build/default/neargnn --out /tmp/l4

    python3 eval/harness/run_link.py --workload L4 --bin build/default/neargnn --out /tmp/l4

Progress goes to stderr; the files are rewritten after every run. Python 3 standard library only.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402
import run  # noqa: E402  (the node harness: its helpers find_bin and last_line)
import workloads  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_MODES = "baseline,zerocopy,partial,hybrid-static,hybrid"
MODES = ("cpu", "baseline", "zerocopy", "partial", "hybrid-static", "hybrid")
COLUMNS = ["workload", "device", "mode", "threads", "cache_ratio", "status", "iterations", "it_per_s",
           "edges_per_s", "pairs_per_s", "final_loss", "loss_hex", "evaluated", "eval_seconds",
           "mrr", "hits10", "hits50", "hits100", "auc", "test_edges", "peak_rss_mib",
           "rss_bound_mib", "rss_within_bound", "wall_s", "error"]
GIB = 1 << 30
log = report.log


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="run_link.py",
        description="neargnn's link-prediction harness: every mode x thread count of a link "
        "workload, with the MRR evaluation of its held-out edges (docs/eval.md).")
    ap.add_argument("--workload", action="append", default=[],
                    help=f"link workload, repeatable or a comma list: "
                    f"{', '.join(workloads.LINK_PRESETS)} (default L4)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every workload's nodes")
    ap.add_argument("--nodes", type=int, default=0, help="nodes of every workload (overrides)")
    ap.add_argument("--iters", type=int, default=0,
                    help="mini-batches per epoch (default: the preset's)")
    ap.add_argument("--epochs", type=int, default=2,
                    help="epochs per run, >= 2: the figures are the last epoch's (default 2)")
    ap.add_argument("--modes", default=DEFAULT_MODES, help=f"modes (default {DEFAULT_MODES})")
    ap.add_argument("--threads", default="0",
                    help="host thread counts, a comma list (0: every core; default 0)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="the device of every mode but cpu (default cuda)")
    ap.add_argument("--out", default="", help="output folder (default "
                    "eval/results/link-<date>-<time>)")
    ap.add_argument("--bin", default="", help="the neargnn binary (default $NEARGNN, else "
                    "build/default/neargnn)")
    ap.add_argument("--data", default="", help="folder for generated datasets, kept for later "
                    "runs (default $TMPDIR/neargnn-eval-data)")
    ap.add_argument("--lr", type=float, default=0.0,
                    help="learning rate (default: the workload's recipe, docs/link-prediction.md)")
    ap.add_argument("--eval-modes", default="",
                    help="the modes whose runs end with the MRR evaluation, a comma list, or "
                    "'none' (default: every mode); the others train only (the evaluation of L4 "
                    "is the same bits in every mode, so once is enough to time it)")
    ap.add_argument("--seed", type=int, default=1, help="training seed (default 1)")
    ap.add_argument("--cpuset", default="", help="cores for the threads, e.g. 0-15")
    ap.add_argument("--extra", default="", help="more `neargnn train` options, one string")
    ap.add_argument("--run-timeout", type=float, default=1800,
                    help="seconds before a run is stopped and recorded as timed out")
    ap.add_argument("--check-loss", action="store_true",
                    help="exit 1 when the runs of one workload and device end on different loss "
                    "bits or MRR")
    a = ap.parse_args(argv)
    names = [n.strip() for w in (a.workload or ["L4"]) for n in w.split(",") if n.strip()]
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in a.modes if m not in MODES]
    if bad or not a.modes:
        ap.error(f"--modes: unknown mode(s) {', '.join(bad) or '(none)'}; known: "
                 f"{', '.join(MODES)}")
    if a.eval_modes.strip() == "none":
        a.eval_modes = []
    elif a.eval_modes.strip():
        a.eval_modes = [m.strip() for m in a.eval_modes.split(",") if m.strip()]
        bad = [m for m in a.eval_modes if m not in a.modes]
        if bad:
            ap.error(f"--eval-modes: {', '.join(bad)} not among --modes {', '.join(a.modes)}")
    else:
        a.eval_modes = list(a.modes)
    try:
        a.threads = [int(t) for t in a.threads.split(",") if t.strip()]
    except ValueError:
        ap.error(f"--threads '{a.threads}': expected whole numbers like 0,8,16")
    if not a.threads or any(t < 0 for t in a.threads):
        ap.error("--threads: expected whole numbers >= 0")
    if a.epochs < 2:
        ap.error("--epochs must be >= 2: the first epoch warms up and is never reported")
    if not a.scale > 0:
        ap.error("--scale must be > 0")
    try:
        a.workloads = [workloads.resolve_link(n, a.scale, a.nodes, a.iters) for n in names]
    except KeyError as e:
        ap.error(str(e.args[0]))
    return a


def run_measured(cmd, out_path, err_path, timeout):
    """Runs cmd with stdout and stderr to the files: (returncode or 'timeout', peak RSS in MiB of
    the process, wall seconds). The RSS is the child's own (wait4), not the harness's."""
    t0 = time.time()
    with open(out_path, "w") as fo, open(err_path, "w") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                # ru_maxrss is in KiB on Linux.
                return p.returncode, ru.ru_maxrss / 1024.0, time.time() - t0
            if time.time() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9
                return "timeout", 0.0, time.time() - t0
            time.sleep(0.05)


def err_tail(path):
    try:
        with open(path) as f:
            return run.last_line(f.read())
    except OSError:
        return ""


def step(cmd, what):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or [""])[-1]
        raise RuntimeError(f"{what}: {shlex.join(cmd)} failed: {tail}")


def dataset_for(a, w):
    """The workload's dataset folder (generated, renumbered by degree and split once, then
    reused) and how it came."""
    root = os.path.abspath(a.data or os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                  "neargnn-eval-data"))
    path = os.path.join(root, w.data_key())
    if os.path.exists(os.path.join(path, "links", "links.json")):
        return path, f"reused {path}"
    os.makedirs(root, exist_ok=True)
    raw, tmp = path + ".raw", path + ".tmp"
    for d in (raw, tmp, path):
        shutil.rmtree(d, ignore_errors=True)
    t0 = time.time()
    log(f"{w.name}: generating {w.nodes:,} nodes x {w.dim}-d ({w.feature_bytes / 2**30:.2f} GiB "
        "of features) with planted communities")
    step([a.bin, "generate", "--links", "--out", raw, "--nodes", str(w.nodes), "--avg-degree",
          f"{w.avg_degree:g}", "--dim", str(w.dim), "--classes", str(w.classes), "--communities",
          str(w.communities), "--train", "0", "--val", "0", "--test", "0", "--seed", str(w.seed),
          "--progress", "none"], "generate")
    # Renumbered by degree, as the node workloads: the hot tier is then a prefix of the ids.
    step([a.bin, "reorder", "--dataset", raw, "--out", tmp, "--progress", "none"], "reorder")
    shutil.rmtree(raw, ignore_errors=True)
    step([a.bin, "split-edges", "--dataset", tmp, "--val", "0", "--test", f"{w.held_out:g}",
          "--neg-per-pos", str(w.eval_neg), "--neg-source", "source", "--seed", str(w.seed)],
         "split-edges")
    os.replace(tmp, path)
    how = f"generated, renumbered by degree and split in {time.time() - t0:.0f} s, kept in {path}"
    log(f"{w.name}: dataset {how}")
    return path, how


def train_only_view(data):
    """A view of the dataset `data` whose test split is empty (its validation split's, which
    the harness's split leaves empty), for the runs that skip the evaluation: `train --task link`
    evaluates the test split whenever it holds edges. Every other file is a link to the
    dataset's, so the training reads the same bytes and ends on the same loss bits."""
    view = data + ".train-only"
    if os.path.exists(os.path.join(view, "links", "links.json")):
        return view
    with open(os.path.join(data, "links", "links.json")) as f:
        lj = json.load(f)
    if int(lj.get("val", 0)) != 0:
        raise RuntimeError(f"{data}: the split has validation edges; a train-only view needs an "
                           "empty validation split")
    tmp = view + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "links"))
    for name in os.listdir(data):
        if name != "links":
            os.symlink(os.path.join(data, name), os.path.join(tmp, name))
    empty = {"test_pos.npy": "val_pos.npy", "test_neg.npy": "val_neg.npy"}
    for name in os.listdir(os.path.join(data, "links")):
        if name != "links.json":
            os.symlink(os.path.join(data, "links", empty.get(name, name)),
                       os.path.join(tmp, "links", name))
    lj["test"] = 0
    with open(os.path.join(tmp, "links", "links.json"), "w") as f:
        json.dump(lj, f, indent=2)
    shutil.rmtree(view, ignore_errors=True)
    os.replace(tmp, view)
    return view


def rss_bound(w, ds, lj, threads, device):
    """The documented bound of a link run's peak RSS in bytes (docs/link-prediction.md,
    "Memory"), from the workload, dataset.json `ds` and links.json `lj`: features + topology +
    split + staging + evaluation + inference + 2 GiB. `threads` 0 is every core."""
    n, d, h = int(ds["nodes"]), int(ds["feature_dim"]), w.hidden
    e, b = int(ds["edges"]), 8 if ds.get("index_dtype") == "int64" else 4
    train, test, k = int(lj["train"]), int(lj["test"]), int(lj["neg_per_pos"])
    fanouts = [int(f) for f in w.fanouts.split(",")]
    layers = len(fanouts)
    features = n * d * 4
    topology = 2 * ((n + 1) * 8 + e * b) + n * 4
    split = train * 16 + test * (1 + k) * 16
    rows = 2 * w.batch * (1 + w.neg_per_pos)
    for f in fanouts:
        rows = min(n, rows * (1 + f))
    staging = 2 * rows * (d * 4 + 16)
    evaluation = (n * 4 + n * 8 + n * h * 4 + test * (1 + k) * 4) if test else 0
    slots = (threads or os.cpu_count() or 1) + 1 if device == "cuda" else 3
    deg = 1 + e / max(n, 1)
    inference = (min(n * h * 4, GIB) * min(2, layers - 1)
                 + slots * max(min(n, 4096 * deg) * (max(d, h) * 4 + 16),
                               min(n, 65536 * deg) * 96)) if test else 0
    return int(features + topology + split + staging + evaluation + inference + 2 * GIB)


def train_cmd(a, w, data, mode, threads, json_path):
    device = "cpu" if mode == "cpu" else a.device
    cmd = [a.bin, "train", "--task", "link", "--dataset", data, "--device", device, "--mode", mode,
           "--threads", str(threads), "--model", "sage", "--fanouts", w.fanouts,
           "--batch", str(w.batch), "--hidden", str(w.hidden), "--embed-dim", str(w.hidden),
           "--decoder", "dot", "--neg", "uniform", "--neg-per-pos", str(w.neg_per_pos),
           "--epochs", str(a.epochs), "--epoch-iters", str(w.iters), "--eval-every", "0",
           "--dropout", "0", "--lr", f"{a.lr or w.lr:g}", "--seed", str(a.seed),
           "--progress", "none",
           "--json", json_path]
    if mode != "cpu":
        cmd += ["--cache-ratio", f"{w.cache_ratio:g}"]
    if a.cpuset:
        cmd += ["--cpuset", a.cpuset]
    return cmd + shlex.split(a.extra), device


def row_from_json(row, w, path):
    with open(path) as f:
        j = json.load(f)
    e = j["epochs"][-1]
    t = j.get("test", {})
    row.update(status="ok", iterations=e["iterations"], it_per_s=e["it_per_s"],
               edges_per_s=e["edges_per_s"],
               pairs_per_s=e["edges_per_s"] * (1 + w.neg_per_pos),
               final_loss=float.fromhex(e["loss_hex"]), loss_hex=e["loss_hex"], eval_seconds=t.get("seconds"),
               mrr=t.get("mrr"), hits10=t.get("hits10"), hits50=t.get("hits50"),
               hits100=t.get("hits100"), auc=t.get("auc"), test_edges=t.get("positives"))
    return row


def loss_check(rows):
    """(ok, lines): per workload, device and hot tier, whether every run ended on one loss and
    one MRR (the runtime's guarantee across modes and thread counts; the cpu mode has no hot
    tier, so it is a group of its own)."""
    ok, lines, groups = True, [], {}
    for r in rows:
        if r["status"] == "ok":
            groups.setdefault((r["workload"], r["device"], str(r["cache_ratio"])), []).append(r)
    for (wl, dev, tier), rs in sorted(groups.items()):
        what = f"{wl} on {dev} ({'no hot tier' if tier == '' else 'hot tier ' + tier})"
        # A run that skipped the evaluation has no MRR: its loss bits are compared alone.
        bits = {r["loss_hex"] for r in rs}
        mrrs = {repr(r["mrr"]) for r in rs if r.get("evaluated", True)}
        ev = next((r for r in rs if r.get("evaluated", True)), None)
        if len(bits) == 1 and len(mrrs) <= 1:
            mrr = f"MRR {ev['mrr']!r}" if ev else "none evaluated"
            lines.append(f"{what}: all {len(rs)} runs end on loss {rs[0]['loss_hex']}, {mrr}")
        else:
            ok = False
            lines.append(f"{what}: runs differ: " + "; ".join(
                f"{r['mode']}/{r['threads']}: {r['loss_hex']} MRR {r['mrr']!r}" for r in rs))
    return ok, lines


def fmt(v, spec):
    return "" if v is None or v == "" else format(v, spec)


def write_outputs(out, meta, rows):
    tmp = os.path.join(out, "results.csv.tmp")
    with open(tmp, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        wr.writeheader()
        for r in rows:
            wr.writerow({c: r.get(c, "") for c in COLUMNS})
    os.replace(tmp, os.path.join(out, "results.csv"))
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = [f"# Link prediction: {', '.join(meta['workloads'])}", "",
             f"{meta['date']}, {meta['host']}, {meta['cores']} cores, device {meta['device']}, "
             f"{meta['epochs']} epochs per run (figures: the last epoch's).", "",
             f"Command: `{meta['command']}`", ""]
    for name, wm in meta["workloads"].items():
        lines += [f"## {name}: {wm['title']}", "", f"Dataset: {wm['dataset']}; "
                  f"{wm['train_edges']:,} training edges, {wm['test_edges']:,} test edges with "
                  f"{wm['eval_neg']} negatives each; {wm['iters']} mini-batches per epoch.", "",
                  "| mode | threads | status | edges/s | pairs/s | it/s | final loss (bits) | "
                  "eval s | MRR | Hits@100 | peak RSS MiB | bound MiB |",
                  "| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: "
                  "| ---: |"]
        for r in rows:
            if r["workload"] != name:
                continue
            lines.append(
                f"| {r['mode']} | {r['threads']} | {r['status']} | {fmt(r.get('edges_per_s'), ',.0f')}"
                f" | {fmt(r.get('pairs_per_s'), ',.0f')} | {fmt(r.get('it_per_s'), '.2f')} | "
                f"{r.get('loss_hex', '')} | {fmt(r.get('eval_seconds'), '.2f')} | "
                f"{fmt(r.get('mrr'), '.4f')} | {fmt(r.get('hits100'), '.4f')} | "
                f"{fmt(r.get('peak_rss_mib'), ',.0f')} | {fmt(r.get('rss_bound_mib'), ',.0f')}"
                f"{'' if r.get('rss_within_bound') or r['status'] != 'ok' else ' (exceeded)'} |")
        base = next((r for r in rows if r["workload"] == name and r["mode"] == "baseline"
                     and r["status"] == "ok"), None)
        for r in rows:
            if base and r["workload"] == name and r["mode"] == "hybrid" and r["status"] == "ok" \
                    and r["threads"] == base["threads"] and base["edges_per_s"]:
                lines.append(f"\nhybrid / baseline at {r['threads']} threads: "
                             f"{r['edges_per_s'] / base['edges_per_s']:.2f}x")
        lines.append("")
    ok, check = loss_check(rows)
    lines += ["## Loss bits", ""] + [f"- {ln}" for ln in check] + [""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines))
    return ok


def main(argv):
    a = parse_args(argv)
    a.bin = run.find_bin(a.bin)
    if not os.access(a.bin, os.X_OK):
        print(f"run_link.py: no neargnn binary at {a.bin} (build it, pass --bin or set NEARGNN)",
              file=sys.stderr)
        return 2
    version = subprocess.run([a.bin, "version"], capture_output=True, text=True).stdout.strip()
    if a.device == "cuda" and any(ln.startswith("cuda: off") for ln in version.splitlines()):
        print(f"run_link.py: {a.bin} is built without the CUDA backend: pass --device cpu or a "
              "binary of a -DNG_CUDA=ON build", file=sys.stderr)
        return 2
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
    out = os.path.abspath(a.out or os.path.join(ROOT, "eval", "results", f"link-{stamp}"))
    os.makedirs(out, exist_ok=True)
    t_start = time.time()
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "host": platform.node(), "cores": os.cpu_count(), "device": a.device,
            "epochs": a.epochs, "version": version,
            "command": shlex.join([sys.executable, os.path.relpath(__file__, ROOT)] + argv),
            "modes": a.modes, "threads": a.threads, "workloads": {}}
    rows = []
    plan = []
    for w in a.workloads:
        try:
            data, how = dataset_for(a, w)
            with open(os.path.join(data, "links", "links.json")) as f:
                lj = json.load(f)
            with open(os.path.join(data, "dataset.json")) as f:
                dj = json.load(f)
            view = train_only_view(data) if set(a.modes) - set(a.eval_modes) else None
        except (OSError, RuntimeError, ValueError) as e:
            print(f"run_link.py: {w.name}: no dataset: {e}", file=sys.stderr)
            return 1
        meta["workloads"][w.name] = {
            "title": w.title, "nodes": w.nodes, "dim": w.dim, "fanouts": w.fanouts,
            "batch": w.batch, "hidden": w.hidden, "cache_ratio": w.cache_ratio,
            "iters": w.iters, "neg_per_pos": w.neg_per_pos, "eval_neg": w.eval_neg,
            "held_out": w.held_out, "train_edges": int(lj.get("train", 0)),
            "test_edges": int(lj.get("test", 0)), "dataset": how, "path": data,
            "lr": a.lr or w.lr, "eval_modes": a.eval_modes}
        plan.append((w, data, view, dj, lj))
    write_outputs(out, meta, rows)
    total = len(plan) * len(a.modes) * len(a.threads)
    done = 0
    for w, data, view, dj, lj in plan:
        rdir = os.path.join(out, "runs", w.name)
        os.makedirs(rdir, exist_ok=True)
        for threads in a.threads:
            for mode in a.modes:
                done += 1
                base = os.path.join(rdir, f"{mode}-t{threads}")
                evaluated = mode in a.eval_modes
                cmd, device = train_cmd(a, w, data if evaluated else view, mode, threads,
                                        base + ".json")
                with open(base + ".cmd", "w") as f:
                    f.write(shlex.join(cmd) + "\n")
                row = {"workload": w.name, "device": device, "mode": mode, "threads": threads,
                       "cache_ratio": "" if mode == "cpu" else w.cache_ratio}
                rc, rss, wall = run_measured(cmd, base + ".out", base + ".err", a.run_timeout)
                bound = rss_bound(w, dj, lj if evaluated else dict(lj, test=0), threads,
                                  device) / 2**20
                row.update(peak_rss_mib=round(rss, 1), wall_s=round(wall, 2),
                           evaluated=evaluated, rss_bound_mib=round(bound, 1),
                           rss_within_bound=rc == 0 and rss <= bound)
                if rc == 0:
                    try:
                        row_from_json(row, w, base + ".json")
                    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
                        row.update(status="failed", error=f"unreadable results: {e}")
                else:
                    row.update(status="timeout" if rc == "timeout" else "failed",
                               error=f"exit {rc}: {err_tail(base + '.err')}")
                rows.append(row)
                if row["status"] == "ok":
                    ev = (f"eval {row['eval_seconds']:.2f} s MRR {row['mrr']:.4f}"
                          if evaluated else "not evaluated")
                    log(f"[{done}/{total}] {w.name} {mode} t{threads}: "
                        f"{row['edges_per_s']:,.0f} edges/s, loss {row['loss_hex']}, {ev}, "
                        f"peak RSS {rss:,.0f} MiB (bound {bound:,.0f} MiB)")
                else:
                    log(f"[{done}/{total}] {w.name} {mode} t{threads}: {row['status']}: "
                        f"{row['error']}")
                write_outputs(out, meta, rows)
    ok_loss = write_outputs(out, meta, rows)
    ok_rows = sum(r["status"] == "ok" for r in rows)
    log(f"done in {time.time() - t_start:.0f} s: {ok_rows}/{len(rows)} runs ok; "
        f"{out}/results.csv, {out}/report.md")
    for line in loss_check(rows)[1]:
        log(f"loss: {line}")
    if ok_rows != len(rows):
        return 1
    if a.check_loss and not ok_loss:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
