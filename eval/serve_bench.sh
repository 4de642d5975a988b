#!/usr/bin/env bash
# Serving benchmark (issue 36's workload S1, docs/eval.md#serving-benchmark): for each mode and
# each request mix, latency and goodput against offered load, from light load to past
# saturation, with the open-loop load generator eval/loadgen.c (built as `loadgen` beside the
# neargnn binary).
#
#   bash eval/serve_bench.sh DATASET CHECKPOINT BINARY [OUT_DIR]
#
# DATASET: the dataset folder; CHECKPOINT: a model trained on it (neargnn train --checkpoint);
# BINARY: the neargnn command; OUT_DIR (default eval/results/serve-<date>). Mixes, one node a
# request:
#   a  full neighbourhood, node ids uniform over the graph
#   b  sampled with parameters.fanouts (FANOUTS) and a random seed each
#   c  90% (a) + 10% for the top 1% of nodes by in-degree (hubs-1pct.txt)
#   d  99% (a) + 1% for the top 1,000 nodes (top-1000.txt)
# Per mix, rates go up RATES until the first saturated one (goodput below 90% of offered), then
# one more point at twice the highest goodput seen (overload), then stop.
# Environment:
#   MODEL_ARGS    the model options the checkpoint was trained with ("--fanouts 10,5 --hidden 256")
#   MODES         modes to compare (default "transfer zerocopy partial hybrid")
#   MIXES         mixes to run (default "a b c d")
#   DEVICE        cuda (default) or cpu
#   RATES         offered rates, increasing (default 500 1000 2000 5000 10000 20000 30000 40000
#                 50000 75000 100000)
#   DURATION      seconds per point (10); WARMUP seconds left out of each (2)
#   CONNECTIONS   keep-alive connections (512); THREADS generator threads (4)
#   TIMEOUT_MS    clients give up after this long, and send it as parameters.timeout_ms (1000)
#   FANOUTS       fanouts of mix b (10,5)
#   LOADGEN       the generator (default: loadgen beside BINARY)
#   SERVE_ARGS    more options for serve (--max-batch, --hub-edges, --workers ...)
#   LOADGEN_ARGS  more options for the generator (--arrivals constant, --outputs ...)
#   DEADLINE_SLACK_MS  clients wait this long past TIMEOUT_MS before giving up, so that answers
#                 sent after the deadline are seen and counted (100)
#   UPDATES       graph updates per second (0: none, the default). With it, serve runs with
#                 --log OUT_DIR/MODE/updates.log (fsynced: each update durable before its
#                 answer), and after the mixes one more run per mode sends mix (a) at UPDATES_AT
#                 with UPDATES updates/s beside it, on connections of their own
#   UPDATES_AT    the infer rate of that run (default: half of mix (a)'s peak goodput in the
#                 same mode, i.e. half saturation; needs mix a in MIXES then)
#   UPDATE_KIND   features (a random node's row replaced), edges (an edge added) or mix (half
#                 each; the default)
#   UPDATE_CONNECTIONS, UPDATE_THREADS  the updates' connections (64) and generator threads (2)
# Memory: at the end of every run the server's /proc/PID/status is read: its peak RSS (VmHWM),
# set beside the bound features + topology + embedding cache + 2 GiB, computed from the
# dataset's files (features.npy, indptr.npy + indices.npy), --embedding-cache in SERVE_ARGS, and
# the checkpoint: when it normalises rows, the server holds a normalised copy of the features
# beside the mapped file, and the features count twice.
# Writes OUT_DIR/MODE/MIX/rate-R.json (the generator's reports, with "server_memory" added),
# OUT_DIR/MODE/updates/rate-R-updates-U.json, OUT_DIR/MODE/serve.{out,err} and metrics.txt,
# summary.csv (one row a point), summary.json (per mode and mix: peak goodput, the largest rate
# with p99 <= 10 ms, p99s at 5,000 req/s by class, the overload point with its refusal latency
# and answers after the deadline; per mode: peak RSS against the bound, and the updates run),
# summary.md (the same as tables) and, when gnuplot is installed, mix-X.png: p50, p99, p99.9
# and goodput against offered load, one line a mode. Needs python3 (with numpy if there: faster).
set -euo pipefail
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  sed -n '2,55p' "$0" >&2
  exit 2
fi
dataset=$1
checkpoint=$2
bin=$3
here=$(cd "$(dirname "$0")" && pwd)
out=${4:-$here/results/serve-$(date -u +%Y%m%d-%H%M%S)}
modes=${MODES:-transfer zerocopy partial hybrid}
mixes=${MIXES:-a b c d}
device=${DEVICE:-cuda}
rates=${RATES:-500 1000 2000 5000 10000 20000 30000 40000 50000 75000 100000}
duration=${DURATION:-10}
warmup=${WARMUP:-2}
connections=${CONNECTIONS:-512}
threads=${THREADS:-4}
timeout_ms=${TIMEOUT_MS:-1000}
fanouts=${FANOUTS:-10,5}
slack_ms=${DEADLINE_SLACK_MS:-100}
updates=${UPDATES:-0}
updates_at=${UPDATES_AT:-}
update_kind=${UPDATE_KIND:-mix}
update_connections=${UPDATE_CONNECTIONS:-64}
update_threads=${UPDATE_THREADS:-2}
loadgen=${LOADGEN:-$(dirname "$bin")/loadgen}
[ -d "$dataset" ] || { echo "serve_bench: no dataset folder $dataset" >&2; exit 2; }
[ -f "$checkpoint" ] || { echo "serve_bench: no checkpoint $checkpoint" >&2; exit 2; }
[ -x "$bin" ] || { echo "serve_bench: $bin is not executable" >&2; exit 2; }
[ -x "$loadgen" ] || { echo "serve_bench: no load generator at $loadgen (LOADGEN=)" >&2; exit 2; }
case $update_kind in features | edges | mix) ;; *)
  echo "serve_bench: UPDATE_KIND '$update_kind' is not features, edges or mix" >&2
  exit 2
  ;;
esac
if [ "$updates" != 0 ] && [ -z "$updates_at" ] && ! echo " ${MIXES:-a} " | grep -q " a "; then
  echo "serve_bench: UPDATES without UPDATES_AT needs mix a (its peak sets the load)" >&2
  exit 2
fi
mkdir -p "$out"

# The memory bound of the served process, from the dataset's files, the embedding cache's size
# and the checkpoint's feature normalisation: OUT_DIR/memory-bound.json; prints the feature width.
# shellcheck disable=SC2086 # SERVE_ARGS is a list of options
dim=$(UPDATE_SECONDS=$((updates != 0 ? duration + warmup : 0)) UPDATE_RATE=$updates \
  python3 - "$dataset" "$checkpoint" "$out" ${SERVE_ARGS:-} <<'PY'
import ast, json, os, re, struct, sys
ds, ckpt, out, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
GIB = 1 << 30

def npy(name):
    """(shape, data bytes) of DIR/name, from its header."""
    with open(os.path.join(ds, name), "rb") as f:
        head = f.read(12)
        major = head[6]
        hl = struct.unpack("<H", head[8:10])[0] if major == 1 else struct.unpack("<I", head[8:12])[0]
        start = 10 if major == 1 else 12
        f.seek(start)
        d = ast.literal_eval(f.read(hl).decode("latin1"))
    return tuple(d["shape"]), os.path.getsize(os.path.join(ds, name)) - start - hl

def size(s):  # as the command reads SIZE: powers of 1024
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?)([KMGTkmgt]?)(i?B)?", s)
    if not m:
        raise SystemExit("serve_bench: --embedding-cache %s: not a size" % s)
    return int(float(m.group(1)) * 1024 ** ("KMGT".find(m.group(2).upper()) + 1 if m.group(2) else 1))

has_f32 = os.path.exists(os.path.join(ds, "features.npy"))
shape, features = npy("features.npy" if has_f32 else "features.bf16.npy")
(ip_shape, ip_bytes), (ix_shape, ix_bytes) = npy("indptr.npy"), npy("indices.npy")
topology = ip_bytes + ix_bytes
cache = 0
for i, a in enumerate(args):
    if a == "--embedding-cache" and i + 1 < len(args):
        cache = size(args[i + 1])
    elif a.startswith("--embedding-cache="):
        cache = size(a.split("=", 1)[1])
with open(ckpt, "rb") as f:  # safetensors: an 8-byte length, then the JSON header
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n)).get("__metadata__", {})
copies = 2 if meta.get("train.normalize") == "row" else 1
# With updates: the cache's out-neighbour index of the base graph (edges x 4 + nodes x 8, and
# nodes x 8 of scratch while it is built) and its per-node record of the last invalidating
# update (nodes x 8), and the delta: per update at most one feature row and one copied
# neighbour row of the average degree (the bench's updates change one row each).
nodes, edges = ip_shape[0] - 1, ix_shape[0]
upd = int(os.environ["UPDATE_RATE"]) * int(os.environ["UPDATE_SECONDS"])
transpose = edges * 4 + nodes * 24 if upd and cache else 0
delta = upd * (shape[1] * 4 + 8 * (edges // max(nodes, 1) + 1) + 64)
bound = copies * features + topology + cache + transpose + delta + 2 * GIB
json.dump({"features_bytes": features, "feature_copies": copies, "topology_bytes": topology,
           "embedding_cache_bytes": cache, "update_index_bytes": transpose,
           "update_delta_bytes": delta, "allowance_bytes": 2 * GIB, "bound_bytes": bound},
          open(os.path.join(out, "memory-bound.json"), "w"), indent=1)
print(shape[1] if len(shape) == 2 else 0)
PY
) || exit 2

# The node count and the hub lists, from the row lengths (in-degrees) of the served graph.
nodes=$(python3 - "$dataset" "$out" <<'PY'
import ast, heapq, mmap, os, struct, sys
ds, out = sys.argv[1:3]
path = os.path.join(ds, "indptr.npy")
try:
    import numpy as np
    deg = np.diff(np.load(path, mmap_mode="r"))
    n = len(deg)
    order = np.argsort(-deg, kind="stable")[:max(1, n // 100, min(n, 1000))].tolist()
except ImportError:  # the same lists without numpy, more slowly
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    hl, start = ((struct.unpack("<H", mm[8:10])[0], 10) if mm[6] == 1
                 else (struct.unpack("<I", mm[8:12])[0], 12))
    head = ast.literal_eval(mm[start:start + hl].decode("latin1"))
    assert head["descr"] in ("<i8", "=i8") and len(head["shape"]) == 1, head
    ip = memoryview(mm)[start + hl:].cast("q")
    n = head["shape"][0] - 1
    order = heapq.nlargest(max(1, n // 100, min(n, 1000)), range(n),
                           key=lambda v: ip[v + 1] - ip[v])
# By in-degree, largest first; ties by id.
with open(os.path.join(out, "hubs-1pct.txt"), "w") as f:
    f.writelines("%d\n" % v for v in order[:max(1, n // 100)])
with open(os.path.join(out, "top-1000.txt"), "w") as f:
    f.writelines("%d\n" % v for v in order[:min(n, 1000)])
print(n)
PY
)

# mix_args MIX: the generator's options of a mix.
mix_args() {
  case $1 in
    a) echo "--mix full:1" ;;
    b) echo "--mix sampled:1 --fanouts $fanouts" ;;
    c) echo "--mix full:0.9,hub:0.1 --hubs $out/hubs-1pct.txt" ;;
    d) echo "--mix full:0.99,tophub:0.01 --tophubs $out/top-1000.txt" ;;
    *) echo "serve_bench: unknown mix '$1' (a b c d)" >&2; return 1 ;;
  esac
}
for mix in $mixes; do mix_args "$mix" >/dev/null || exit 2; done

# server_memory REPORT: adds the server's memory now (VmHWM: its peak RSS so far; VmRSS, RssAnon,
# RssFile), in bytes, to the generator's report as "server_memory".
server_memory() {
  cp "/proc/$server_pid/status" "$1.status" 2>/dev/null || return 0
  python3 - "$1" "$1.status" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
mem = {}
for line in open(sys.argv[2]):
    k, _, v = line.partition(":")
    if k in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
        mem[k] = int(v.split()[0]) * 1024  # kB
r["server_memory"] = mem
json.dump(r, open(sys.argv[1], "w"))
PY
  rm -f "$1.status"
}

server_pid=
stop_server() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}
trap stop_server EXIT

# point MODE MIX RATE URL: one run of the generator; prints "saturated" or "ok" and a summary.
point() {
  local report="$out/$1/$2/rate-$3.json"
  # shellcheck disable=SC2046,SC2086 # the mix's and LOADGEN_ARGS's options are lists
  "$loadgen" --url "$4" --rate "$3" --duration "$duration" --warmup "$warmup" \
    --connections "$connections" --threads "$threads" --timeout-ms "$timeout_ms" \
    --deadline-slack-ms "$slack_ms" --nodes "$nodes" $(mix_args "$2") ${LOADGEN_ARGS:-} \
    --json "$report" 2>"$out/$1/$2/rate-$3.txt"
  server_memory "$report"
  python3 - "$report" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
a = r["classes"]["all"]
p99 = (a["latency_ms"] or {}).get("p99")
print("%s goodput %.0f/s p99 %s ms 503 %d errors %d abandoned %d late sends %d" % (
    "saturated" if a["goodput_rate"] < 0.9 * r["offered_rate"] else "ok", a["goodput_rate"],
    "%.2f" % p99 if p99 is not None else "-", a["refused_503"], a["errors"], a["abandoned"],
    r["late_sends"]))
PY
}

for mode in $modes; do
  mkdir -p "$out/$mode"
  # Updates need the log; a fresh one, so that the mixes run on the dataset as it is.
  log_args=()
  if [ "$updates" != 0 ]; then
    rm -f "$out/$mode/updates.log"
    log_args=(--log "$out/$mode/updates.log")
  fi
  # The generator's connections all come from one address: no per-client cap.
  # shellcheck disable=SC2086 # MODEL_ARGS and SERVE_ARGS are lists of options
  "$bin" serve --dataset "$dataset" --checkpoint "$checkpoint" ${MODEL_ARGS:-} --device "$device" \
    --mode "$mode" --port 0 --max-connections-per-client 0 "${log_args[@]}" ${SERVE_ARGS:-} \
    >"$out/$mode/serve.out" 2>"$out/$mode/serve.err" &
  server_pid=$!
  url=
  for _ in $(seq 1 6000); do # up to 10 minutes: a large graph takes a while to set up
    url=$(sed -n 's/^listening on //p' "$out/$mode/serve.out" 2>/dev/null | head -n 1)
    [ -n "$url" ] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$url" ]; then
    echo "serve_bench: $mode: the server did not start:" >&2
    cat "$out/$mode/serve.err" >&2
    stop_server
    continue
  fi
  echo "==> $mode at $url" >&2
  peak_a=0
  for mix in $mixes; do
    mkdir -p "$out/$mode/$mix"
    peak=0
    for rate in $rates; do
      line=$(point "$mode" "$mix" "$rate" "$url") || { echo "    $mode $mix $rate: failed" >&2; break; }
      echo "    $mode mix $mix rate $rate: $line" >&2
      g=$(echo "$line" | awk '{printf "%d", $3}')
      [ "$g" -gt "$peak" ] && peak=$g
      case $line in
        saturated*)
          over=$((2 * peak))
          if [ "$over" -gt "$rate" ]; then
            line=$(point "$mode" "$mix" "$over" "$url") || true
            echo "    $mode mix $mix rate $over (2x peak goodput): $line" >&2
          fi
          break
          ;;
      esac
    done
    [ "$mix" = a ] && peak_a=$peak
  done
  # Updates beside mix (a) at half saturation (or UPDATES_AT), after the mixes: they change
  # the graph, which the mixes' points must not see.
  if [ "$updates" != 0 ]; then
    at=${updates_at:-$((peak_a / 2))}
    mkdir -p "$out/$mode/updates"
    report="$out/$mode/updates/rate-$at-updates-$updates.json"
    if [ "$at" -gt 0 ]; then
      # shellcheck disable=SC2086 # LOADGEN_ARGS is a list of options
      "$loadgen" --url "$url" --rate "$at" --duration "$duration" --warmup "$warmup" \
        --connections "$connections" --threads "$threads" --timeout-ms "$timeout_ms" \
        --deadline-slack-ms "$slack_ms" --nodes "$nodes" --mix full:1 --updates "$updates" \
        --update-kind "$update_kind" --dim "$dim" --update-connections "$update_connections" \
        --update-threads "$update_threads" ${LOADGEN_ARGS:-} --json "$report" \
        2>"${report%.json}.txt" || echo "    $mode updates: the generator failed" >&2
      server_memory "$report"
      python3 - "$report" <<'PY' >&2 || true
import json, sys
r = json.load(open(sys.argv[1]))
u, f = r["updates"], r["classes"]["full"]
lat = lambda c, q: "%.2f" % c["latency_ms"][q] if c["latency_ms"] else "-"
print("    updates %.0f/s (%s) beside (a) at %.0f/s: acknowledged %.0f/s, p50 %s p99 %s p99.9 %s ms, "
      "errors %d; ordinary p99 %s ms, goodput %.0f/s" % (
          r["update_rate"], r["update_kind"], r["offered_rate"], u["achieved_rate"],
          lat(u, "p50"), lat(u, "p99"), lat(u, "p999"), u["errors"] + u["abandoned"],
          lat(f, "p99"), f["goodput_rate"]))
PY
    else
      echo "    $mode updates: no load to run them beside (mix a's peak is 0; set UPDATES_AT)" >&2
    fi
  fi
  if command -v curl >/dev/null; then
    curl -s "${url%/v2/models/*}/metrics" >"$out/$mode/metrics.txt" 2>/dev/null || true
  fi
  stop_server
done

# shellcheck disable=SC2086 # one argument per mode
python3 - "$out" "$mixes" $modes <<'PY'
import csv, glob, json, os, sys
out, mixes, modes = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
SLO_MS = 10.0
MIX = {"a": "full neighbourhood", "b": "sampled", "c": "90% full + 10% top-1% hubs",
       "d": "99% full + 1% top-1000"}
HUB = {"c": "hub", "d": "tophub"}  # the class of a mix's hub requests

def lat(c, q):
    return (c or {}).get("latency_ms") and c["latency_ms"].get(q)

def mem(r):
    return (r.get("server_memory") or {}).get("VmHWM")

bound = json.load(open(os.path.join(out, "memory-bound.json")))
rows, summary = [], {}
for mode in modes:
    for mix in mixes:
        pts = []
        for path in glob.glob(os.path.join(out, mode, mix, "rate-*.json")):
            try:
                r = json.load(open(path))
            except ValueError:
                continue
            a, cl = r["classes"]["all"], r["classes"]
            hub = cl.get(HUB.get(mix, ""), {})
            pts.append({
                "mode": mode, "mix": mix, "offered": r["offered_rate"],
                "achieved": a["achieved_rate"], "goodput": a["goodput_rate"],
                "p50": lat(a, "p50"), "p90": lat(a, "p90"), "p99": lat(a, "p99"),
                "p999": lat(a, "p999"), "max": lat(a, "max"),
                "ordinary_p99": lat(cl.get("full") or cl.get("sampled"), "p99"),
                "hub_p99": lat(hub, "p99"),
                "refused_503": a["refused_503"],
                "refused_p99": (a["refused_latency_ms"] or {}).get("p99"),
                "errors": a["errors"], "abandoned": a["abandoned"],
                "late_sends": r["late_sends"], "sent": a["sent"],
                "refused_p50": (a["refused_latency_ms"] or {}).get("p50"),
                "refused_max": (a["refused_latency_ms"] or {}).get("max"),
                "answered_after_deadline": a.get("answered_after_deadline"),
                "server_vm_hwm": mem(r), "rss_bound": bound["bound_bytes"]})
        pts.sort(key=lambda p: p["offered"])
        rows += pts
        if not pts:
            continue
        peak = max(pts, key=lambda p: p["goodput"])
        under = [p for p in pts if p["p99"] is not None and p["p99"] <= SLO_MS
                 and p["goodput"] >= 0.99 * p["offered"]]
        best = max(under, key=lambda p: p["offered"]) if under else None
        at5k = [p for p in pts if p["offered"] == 5000]
        # The overload point: the one past the first saturated point (goodput under 90% of
        # offered), at least 1.9x the best goodput before it; its own goodput may set the peak.
        sat = [i for i, p in enumerate(pts) if p["goodput"] < 0.9 * p["offered"]]
        over = [p for i, p in enumerate(pts) if sat and i > sat[0]
                and p["offered"] >= 1.9 * max(q["goodput"] for q in pts[:i])]
        summary.setdefault(mode, {})[mix] = {
            "peak_goodput": peak["goodput"], "peak_at_offered": peak["offered"],
            "max_rate_p99_le_10ms": best["offered"] if best else None,
            "at_max_rate": best,
            "at_5000": at5k[0] if at5k else None,
            "overload": ({"point": over[0],
                          "goodput_over_peak": over[0]["goodput"] / peak["goodput"]
                          if peak["goodput"] else None,
                          "refused_503": over[0]["refused_503"],
                          "refused_latency_ms": {k: over[0]["refused_" + k]
                                                 for k in ("p50", "p99", "max")},
                          "every_refusal_within_5ms": over[0]["refused_max"] is None
                          or over[0]["refused_max"] <= 5.0,
                          "answered_after_deadline": over[0]["answered_after_deadline"]}
                         if over else None),
        }
    # Memory: the server's peak RSS over the mode's runs against the bound.
    hwm = [p["server_vm_hwm"] for p in rows if p["mode"] == mode and p["server_vm_hwm"]]
    upd = []
    for path in glob.glob(os.path.join(out, mode, "updates", "rate-*.json")):
        try:
            r = json.load(open(path))
        except ValueError:
            continue
        if mem(r):
            hwm.append(mem(r))
        u, f = r.get("updates") or {}, r["classes"].get("full") or {}
        ul = u.get("latency_ms") or {}
        upd.append({"offered": r["offered_rate"], "update_rate": r.get("update_rate"),
                    "update_kind": r.get("update_kind"), "acknowledged": u.get("ok"),
                    "acknowledged_rate": u.get("achieved_rate"),
                    "update_errors": (u.get("errors") or 0) + (u.get("abandoned") or 0),
                    "update_errors_by_status": u.get("errors_by_status"),
                    "update_p50": ul.get("p50"), "update_p99": ul.get("p99"),
                    "update_p999": ul.get("p999"), "update_max": ul.get("max"),
                    "ordinary_p99": lat(f, "p99"), "goodput": f.get("goodput_rate")})
    summary.setdefault(mode, {})["memory"] = dict(
        bound, peak_vm_hwm_bytes=max(hwm) if hwm else None,
        within_bound=(max(hwm) <= bound["bound_bytes"]) if hwm else None)
    summary[mode]["updates"] = sorted(upd, key=lambda x: x["offered"])

fields = ["mode", "mix", "offered", "achieved", "goodput", "p50", "p90", "p99", "p999", "max",
          "ordinary_p99", "hub_p99", "refused_503", "refused_p99", "errors", "abandoned",
          "late_sends", "sent", "refused_p50", "refused_max", "answered_after_deadline",
          "server_vm_hwm", "rss_bound"]
with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)

fmt = lambda v, f="%.2f": "-" if v is None else f % v
md = ["# Serving benchmark", "",
      "Goodput: 2xx answers within the client timeout, per second. Latencies in ms from the "
      "intended send time. Ordinary: the mix's full (or sampled) requests; hub: its hub class.",
      "", "| mode | mix | peak goodput /s | max rate with p99 <= 10 ms | ordinary / hub p99 at "
      "5,000 /s | goodput at 2x saturation | 503 p99 there |", "| --- | --- | --- | --- | --- "
      "| --- | --- |"]
MIXES_ONLY = lambda by_mix: {k: v for k, v in by_mix.items() if k not in ("memory", "updates")}
for mode, by_mix in summary.items():
    for mix, s in MIXES_ONLY(by_mix).items():
        p5 = s["at_5000"] or {}
        ov = s["overload"] or {}
        md.append("| %s | %s (%s) | %.0f | %s | %s / %s | %s | %s |" % (
            mode, mix, MIX.get(mix, mix), s["peak_goodput"],
            fmt(s["max_rate_p99_le_10ms"], "%.0f"), fmt(p5.get("ordinary_p99")),
            fmt(p5.get("hub_p99")),
            ("%.0f%% of peak" % (100 * ov["goodput_over_peak"])
             if ov.get("goodput_over_peak") is not None else "-"),
            fmt((ov.get("point") or {}).get("refused_p99"))))
GIB = float(1 << 30)
md += ["", "Refusals and deadlines at 2x saturation (latency from the intended send time; after "
       "the deadline: answers, of any status, later than the timeout after their send):", "",
       "| mode | mix | 503s | 503 p50 / p99 / max ms | every 503 within 5 ms | answered after "
       "the deadline |", "| --- | --- | --- | --- | --- | --- |"]
for mode, by_mix in summary.items():
    for mix, s in MIXES_ONLY(by_mix).items():
        ov = s["overload"]
        if not ov:
            continue
        rl = ov["refused_latency_ms"]
        md.append("| %s | %s | %d | %s / %s / %s | %s | %s |" % (
            mode, mix, ov["refused_503"], fmt(rl["p50"]), fmt(rl["p99"]), fmt(rl["max"]),
            "yes" if ov["every_refusal_within_5ms"] else "no",
            fmt(ov["answered_after_deadline"], "%d")))
md += ["", "Memory: the server's peak RSS (VmHWM) over a mode's runs, and the bound features "
       "(x2 when the checkpoint normalises rows: the copy beside the mapping) + topology + "
       "embedding cache + (with updates) the cache's out-neighbour index and the updates' delta "
       "+ 2 GiB:", "", "| mode | peak RSS GiB | bound GiB | features x copies / topology / cache "
       "/ index / delta GiB | within |", "| --- | --- | --- | --- | --- |"]
for mode, by_mix in summary.items():
    m = by_mix["memory"]
    md.append("| %s | %s | %.2f | %.2f x %d / %.2f / %.2f / %.2f / %.2f | %s |" % (
        mode, fmt(m["peak_vm_hwm_bytes"] / GIB if m["peak_vm_hwm_bytes"] else None),
        m["bound_bytes"] / GIB, m["features_bytes"] / GIB, m["feature_copies"],
        m["topology_bytes"] / GIB, m["embedding_cache_bytes"] / GIB,
        m.get("update_index_bytes", 0) / GIB, m.get("update_delta_bytes", 0) / GIB,
        "-" if m["within_bound"] is None else "yes" if m["within_bound"] else "no"))
upd_rows = [(mode, u) for mode, by_mix in summary.items() for u in by_mix["updates"]]
if upd_rows:
    md += ["", "Updates beside mix (a) (each durable before its answer; latency from the intended "
           "send time):", "", "| mode | (a) offered /s | updates offered /s (kind) | acknowledged "
           "/s | update p50 / p99 / p99.9 ms | update errors | ordinary p99 ms | (a) goodput /s |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for mode, u in upd_rows:
        md.append("| %s | %.0f | %.0f (%s) | %s | %s / %s / %s | %d | %s | %s |" % (
            mode, u["offered"], u["update_rate"] or 0, u["update_kind"],
            fmt(u["acknowledged_rate"], "%.0f"), fmt(u["update_p50"]), fmt(u["update_p99"]),
            fmt(u["update_p999"]), u["update_errors"], fmt(u["ordinary_p99"]),
            fmt(u["goodput"], "%.0f")))
md += ["", "Every point: `summary.csv`; every report: `MODE/MIX/rate-R.json`, "
       "`MODE/updates/rate-R-updates-U.json`."]
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("\n".join(md) + "\n")
print("\n".join(md))

# Plot data: one file per (mix, mode): offered p50 p99 p99.9 goodput.
for mix in mixes:
    for mode in modes:
        pts = [p for p in rows if p["mode"] == mode and p["mix"] == mix]
        with open(os.path.join(out, "plot-%s-%s.dat" % (mix, mode)), "w") as f:
            for p in pts:
                f.write("%g %s %s %s %g\n" % (p["offered"], fmt(p["p50"], "%g"),
                        fmt(p["p99"], "%g"), fmt(p["p999"], "%g"), p["goodput"]))
PY

# Plots: optional (gnuplot may be missing on the GPU machine; the tables above are complete).
if command -v gnuplot >/dev/null; then
  term="pngcairo size 1400,1000"
  gnuplot -e "set terminal $term" 2>/dev/null </dev/null || term="png size 1400,1000"
  for mix in $mixes; do
    plots=""
    for q in 2:p50 3:p99 4:p99.9 5:goodput; do
      col=${q%%:*}
      name=${q#*:}
      cmd=""
      for mode in $modes; do
        f="$out/plot-$mix-$mode.dat"
        [ -s "$f" ] || continue
        cmd="$cmd${cmd:+, }'$f' using 1:$col with linespoints title '$mode'"
      done
      [ -n "$cmd" ] || continue
      if [ "$name" = goodput ]; then
        plots="$plots set title 'goodput (2xx within the timeout)'; set ylabel 'answers/s';"
        plots="$plots unset logscale y; plot $cmd, x with lines dashtype 2 title 'offered';"
      else
        plots="$plots set title '$name latency from the intended send time'; set ylabel 'ms';"
        plots="$plots set logscale y; plot $cmd;"
      fi
    done
    [ -n "$plots" ] || continue
    gnuplot <<EOF || echo "serve_bench: gnuplot failed on mix $mix" >&2
set terminal $term
set output '$out/mix-$mix.png'
set datafile missing '-'
set multiplot layout 2,2 title 'mix $mix, $(basename "$dataset")'
set logscale x
set xlabel 'offered load (req/s)'
set key top left
set grid
set samples 400
$plots
unset multiplot
EOF
  done
else
  echo "serve_bench: gnuplot not found, no plots (the tables and summary.csv are complete)" >&2
fi
echo "results in $out (summary.md, summary.csv, summary.json)" >&2
