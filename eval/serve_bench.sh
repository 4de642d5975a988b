#!/usr/bin/env bash
# Serving benchmark (issue 21, docs/serving.md): for each mode, latency against offered load up
# to saturation, with eval/loadgen.py (open loop, Poisson arrivals, hub and ordinary nodes).
#
#   bash eval/serve_bench.sh DATASET CHECKPOINT BINARY [OUT_DIR]
#
# DATASET: the dataset folder; CHECKPOINT: a model trained on it (neargnn train --checkpoint);
# BINARY: the neargnn command; OUT_DIR (default eval/results/serve-<date>): one JSON report per
# (mode, rate), the servers' logs, summary.csv and summary.json. Environment:
#   MODEL_ARGS    the model options the checkpoint was trained with ("--fanouts 10,5 --hidden 256")
#   MODES         modes to compare (default "transfer zerocopy partial hybrid")
#   DEVICE        cuda (default) or cpu
#   RATES         offered rates, increasing (default 100 200 500 1000 2000 3000 5000 7500 10000
#                 15000 20000 30000); a mode stops at saturation: achieved < 90% of offered,
#                 more than 1% errors, or p99 over 1 s
#   DURATION      seconds per rate (10); WARMUP seconds left out of each (2)
#   CONNECTIONS   connections per generator process (64); PROCESSES generator processes (4)
#   HUB_SHARE     share of requests for hub nodes (0.1); HUB_TOP share of nodes that are hubs (0.01)
#   SERVE_ARGS    more options for serve (--max-batch, --max-delay-us, --hub-edges, --workers ...)
#   LOADGEN_ARGS  more options for eval/loadgen.py (--fanouts 10,5 --seed 1, --nodes-per-request)
# summary.json holds, per mode: the saturation rate (largest achieved), the largest achieved
# rate with p99 <= 10 ms, hub and ordinary p99 there and at half the saturation rate, and the
# comparison of hybrid's p99 with transfer's at half of hybrid's saturation rate.
set -euo pipefail
if [ $# -lt 3 ] || [ $# -gt 4 ]; then
  sed -n '2,25p' "$0" >&2
  exit 2
fi
dataset=$1
checkpoint=$2
bin=$3
here=$(cd "$(dirname "$0")" && pwd)
out=${4:-$here/results/serve-$(date -u +%Y%m%d-%H%M%S)}
modes=${MODES:-transfer zerocopy partial hybrid}
device=${DEVICE:-cuda}
rates=${RATES:-100 200 500 1000 2000 3000 5000 7500 10000 15000 20000 30000}
duration=${DURATION:-10}
warmup=${WARMUP:-2}
connections=${CONNECTIONS:-64}
processes=${PROCESSES:-4}
hub_share=${HUB_SHARE:-0.1}
hub_top=${HUB_TOP:-0.01}
mkdir -p "$out"
[ -d "$dataset" ] || { echo "serve_bench: no dataset folder $dataset" >&2; exit 2; }
[ -f "$checkpoint" ] || { echo "serve_bench: no checkpoint $checkpoint" >&2; exit 2; }
[ -x "$bin" ] || { echo "serve_bench: $bin is not executable" >&2; exit 2; }

server_pid=
stop_server() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
}
trap stop_server EXIT

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
  for rate in $rates; do
    report="$out/$mode/rate-$rate.json"
    # shellcheck disable=SC2086
    python3 "$here/loadgen.py" --url "$url" --rate "$rate" --duration "$duration" \
      --warmup "$warmup" --connections "$connections" --processes "$processes" \
      --dataset "$dataset" --hub-share "$hub_share" --hub-top "$hub_top" --json \
      ${LOADGEN_ARGS:-} >"$report"
    saturated=$(python3 - "$report" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p99 = (r["latency_ms"]["all"] or {}).get("p99", float("inf"))
errs = sum(r["errors"].values())
print("%s achieved %.0f/s p99 %.2f ms errors %d" % (
    "saturated" if r["achieved_rate"] < 0.9 * r["offered_rate"] or errs > 0.01 * max(1, r["measured"]) or p99 > 1000 else "ok",
    r["achieved_rate"], p99, errs))
PY
)
    echo "    $mode rate $rate: $saturated" >&2
    case $saturated in saturated*) break ;; esac
  done
  curl -s "${url%/v2/models/*}/metrics" >"$out/$mode/metrics.txt" 2>/dev/null || true
  stop_server
done

# shellcheck disable=SC2086 # one argument per mode
python3 - "$out" $modes <<'PY'
import csv, glob, json, os, sys
out, modes = sys.argv[1], sys.argv[2:]
SLO_MS = 10.0
rows, summary = [], {}
for mode in modes:
    pts = []
    for path in glob.glob(os.path.join(out, mode, "rate-*.json")):
        try:
            r = json.load(open(path))
        except ValueError:
            continue
        lat = r["latency_ms"]
        get = lambda k, q: (lat.get(k) or {}).get(q)
        pts.append({"offered": r["offered_rate"], "achieved": r["achieved_rate"],
                    "p50": get("all", "p50"), "p99": get("all", "p99"),
                    "p999": get("all", "p999"), "hub_p99": get("hub", "p99"),
                    "ordinary_p99": get("ordinary", "p99"),
                    "errors": sum(r["errors"].values()), "late_sends": r["late_sends"]})
    pts.sort(key=lambda p: p["offered"])
    for p in pts:
        rows.append(dict(mode=mode, **p))
    if not pts:
        continue
    sat = max(p["achieved"] for p in pts)
    under = [p for p in pts if p["p99"] is not None and p["p99"] <= SLO_MS and p["errors"] == 0]
    best = max(under, key=lambda p: p["achieved"]) if under else None
    half = min(pts, key=lambda p: abs(p["offered"] - sat / 2))
    ratio = lambda p: (p["hub_p99"] / p["ordinary_p99"]
                       if p and p["hub_p99"] and p["ordinary_p99"] else None)
    summary[mode] = {
        "saturation_rate": sat,
        "max_rate_p99_le_10ms": best["achieved"] if best else None,
        "at_max_rate": best,
        "hub_over_ordinary_p99_at_max_rate": ratio(best),
        "half_saturation": half,
        "hub_over_ordinary_p99_at_half_saturation": ratio(half),
    }
if "hybrid" in summary and "transfer" in summary:
    h = summary["hybrid"]["half_saturation"]
    t = [r for r in rows if r["mode"] == "transfer" and r["offered"] == h["offered"]]
    if t and t[0]["p99"] and h["p99"] is not None:
        summary["hybrid_vs_transfer_p99_at_half_hybrid_saturation"] = {
            "offered": h["offered"], "hybrid_p99": h["p99"], "transfer_p99": t[0]["p99"],
            "ratio": h["p99"] / t[0]["p99"]}
with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=["mode", "offered", "achieved", "p50", "p99", "p999",
                                      "hub_p99", "ordinary_p99", "errors", "late_sends"])
    w.writeheader()
    w.writerows(rows)
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
for mode, s in summary.items():
    if mode in modes:
        print("%-10s saturation %8.0f/s  max rate with p99<=10ms %s  hub/ordinary p99 there %s" % (
            mode, s["saturation_rate"],
            "%.0f/s" % s["max_rate_p99_le_10ms"] if s["max_rate_p99_le_10ms"] else "none",
            "%.2f" % s["hub_over_ordinary_p99_at_max_rate"]
            if s["hub_over_ordinary_p99_at_max_rate"] else "n/a"))
print("results in %s (summary.csv, summary.json)" % out)
PY
