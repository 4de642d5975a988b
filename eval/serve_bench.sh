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
# Writes OUT_DIR/MODE/MIX/rate-R.json (the generator's reports), OUT_DIR/MODE/serve.{out,err}
# and metrics.txt, summary.csv (one row a point), summary.json (per mode and mix: peak goodput,
# the largest rate with p99 <= 10 ms, p99s at 5,000 req/s by class, the overload point),
# summary.md (the same as tables) and, when gnuplot is installed, mix-X.png: p50, p99, p99.9
# and goodput against offered load, one line a mode. Needs python3 (with numpy if there: faster).
set -euo pipefail
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  sed -n '2,35p' "$0" >&2
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
loadgen=${LOADGEN:-$(dirname "$bin")/loadgen}
[ -d "$dataset" ] || { echo "serve_bench: no dataset folder $dataset" >&2; exit 2; }
[ -f "$checkpoint" ] || { echo "serve_bench: no checkpoint $checkpoint" >&2; exit 2; }
[ -x "$bin" ] || { echo "serve_bench: $bin is not executable" >&2; exit 2; }
[ -x "$loadgen" ] || { echo "serve_bench: no load generator at $loadgen (LOADGEN=)" >&2; exit 2; }
mkdir -p "$out"

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
    --nodes "$nodes" $(mix_args "$2") ${LOADGEN_ARGS:-} --json "$report" \
    2>"$out/$1/$2/rate-$3.txt"
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
  # The generator's connections all come from one address: no per-client cap.
  # shellcheck disable=SC2086 # MODEL_ARGS and SERVE_ARGS are lists of options
  "$bin" serve --dataset "$dataset" --checkpoint "$checkpoint" ${MODEL_ARGS:-} --device "$device" \
    --mode "$mode" --port 0 --max-connections-per-client 0 ${SERVE_ARGS:-} \
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
  done
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
                "late_sends": r["late_sends"], "sent": a["sent"]})
        pts.sort(key=lambda p: p["offered"])
        rows += pts
        if not pts:
            continue
        peak = max(pts, key=lambda p: p["goodput"])
        under = [p for p in pts if p["p99"] is not None and p["p99"] <= SLO_MS
                 and p["goodput"] >= 0.99 * p["offered"]]
        best = max(under, key=lambda p: p["offered"]) if under else None
        at5k = [p for p in pts if p["offered"] == 5000]
        over = [p for p in pts if p["offered"] >= 1.9 * peak["goodput"]]
        summary.setdefault(mode, {})[mix] = {
            "peak_goodput": peak["goodput"], "peak_at_offered": peak["offered"],
            "max_rate_p99_le_10ms": best["offered"] if best else None,
            "at_max_rate": best,
            "at_5000": at5k[0] if at5k else None,
            "overload": ({"point": over[0],
                          "goodput_over_peak": over[0]["goodput"] / peak["goodput"]
                          if peak["goodput"] else None} if over else None),
        }

fields = ["mode", "mix", "offered", "achieved", "goodput", "p50", "p90", "p99", "p999", "max",
          "ordinary_p99", "hub_p99", "refused_503", "refused_p99", "errors", "abandoned",
          "late_sends", "sent"]
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
for mode, by_mix in summary.items():
    for mix, s in by_mix.items():
        p5 = s["at_5000"] or {}
        ov = s["overload"] or {}
        md.append("| %s | %s (%s) | %.0f | %s | %s / %s | %s | %s |" % (
            mode, mix, MIX.get(mix, mix), s["peak_goodput"],
            fmt(s["max_rate_p99_le_10ms"], "%.0f"), fmt(p5.get("ordinary_p99")),
            fmt(p5.get("hub_p99")),
            ("%.0f%% of peak" % (100 * ov["goodput_over_peak"])
             if ov.get("goodput_over_peak") is not None else "-"),
            fmt((ov.get("point") or {}).get("refused_p99"))))
md += ["", "Every point: `summary.csv`; every report: `MODE/MIX/rate-R.json`."]
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
