#!/usr/bin/env bash
# Layer-wise inference benchmark (issue 20, docs/inference.md): every node of a W4-shaped
# generated graph (average degree 15, 128-d, 32 classes, train 1%) through a 3-layer
# GraphSAGE-mean model with hidden 256, by `neargnn embed` (logits of every node). Prints
#
#   bench_infer nodes=N device=D mode=M cache_ratio=R hidden=H chunk=C infer_s=S nodes_per_s=X
#               rows_per_s=Y peak_rss_bytes=B train_peak_rss_bytes=B estimate_bytes=B
#               producers=P device_bytes=B upload_s=S layer_s=a,b,c host_s=a,b,c device_s=a,b,c
#               wait_s=a,b,c chunks=a,b,c write_s=S
#
# The per-layer figures come from `embed --json` (docs/inference.md, "Where the time goes"):
# host_s is the producers' busy time summed over threads, device_s and wait_s the device
# thread's time computing and waiting for chunks. DEVICE_BYTES in the environment is passed as
# --infer-device-memory (-1: the host paths alone, as before device residency).
#
# infer_s is the inference alone, as `embed` reports it; rows_per_s counts every layer's rows
# (3 x nodes when the receptive field is the whole graph). The model is trained first for one
# short epoch (its accuracy does not matter, only its shape), whose --json gives the memory
# estimate and the training process's peak RSS. Targets: 20 M nodes within 10 s on the H100
# machine (device cuda); 1 M nodes within 60 s on the 2-core machine (device cpu).
#
# Usage: eval/bench_infer.sh [nodes [device [mode [cache_ratio [chunk [data_dir]]]]]]
#   defaults: 20000000 cuda hybrid 0.05 0 (chunk 0: embed's default, chosen per layer), and a
#   temporary folder under ${TMPDIR:-/tmp} for the dataset, removed afterwards (a data_dir you
#   name is generated once and kept: later runs reuse it). mode: any of train's --mode (zerocopy reads cold rows by zero-copy, baseline
#   batches them); on cpu use mode cpu and cache_ratio -1.
# The binary: $NEARGNN, else build/default/neargnn, else the first build/*/neargnn.
set -euo pipefail

NODES=${1:-20000000}
DEVICE=${2:-cuda}
MODE=${3:-hybrid}
RATIO=${4:-0.05}
CHUNK=${5:-0}
DATA=${6:-}
HIDDEN=256

here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/eval/lib.sh"
find_neargnn bench_infer

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bench-infer-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [ -z "$DATA" ]; then
  DATA=$WORK/data
fi
if [ ! -d "$DATA" ]; then
  "$BIN" generate --out "$DATA" --nodes "$NODES" --avg-degree 15 --dim 128 --classes 32 \
    --train 0.01 --val 0.01 --test 0.01 --seed 3 --progress none >"$WORK/generate.txt"
fi

model=(--model sage --fanouts 15,10,5 --hidden "$HIDDEN" --seed 3 --device "$DEVICE" --mode "$MODE")
if [ "$RATIO" != "-1" ]; then
  model+=(--cache-ratio "$RATIO")
fi
"$BIN" train --dataset "$DATA" "${model[@]}" --batch 1024 --epochs 1 --eval-every 0 \
  --progress none --checkpoint "$WORK/ck.safetensors" --json "$WORK/train.json" \
  >"$WORK/train.txt" 2>"$WORK/train.err" || { cat "$WORK/train.err" >&2; exit 1; }

/usr/bin/time -v "$BIN" embed --checkpoint "$WORK/ck.safetensors" --dataset "$DATA" "${model[@]}" \
  --eval-chunk "$CHUNK" --temp-dir "$WORK" --out "$WORK/logits.npy" --progress none \
  --infer-device-memory "${DEVICE_BYTES:-0}" --json "$WORK/embed.json" \
  >"$WORK/embed.txt" 2>"$WORK/embed.err" || { cat "$WORK/embed.err" >&2; exit 1; }

python3 - "$WORK" "$NODES" "$DEVICE" "$MODE" "$RATIO" "$HIDDEN" "$CHUNK" <<'PY'
import json, re, sys
work, nodes, device, mode, ratio, hidden, chunk = sys.argv[1:]
err = open(work + "/embed.err").read()
m = re.search(r"written to .* in ([0-9.]+) s", err)
secs = float(m.group(1))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1)) * 1024
mem = json.load(open(work + "/train.json"))["memory"]
n = int(nodes)
rep = json.load(open(work + "/embed.json"))
per = lambda k: ",".join(f"{l[k]:.2f}" for l in rep["layers"])
print(f"bench_infer nodes={n} device={device} mode={mode} cache_ratio={ratio} hidden={hidden} "
      f"chunk={chunk} infer_s={secs:.2f} nodes_per_s={n / secs:.0f} rows_per_s={3 * n / secs:.0f} "
      f"peak_rss_bytes={rss} train_peak_rss_bytes={int(mem['peak_rss'])} "
      f"estimate_bytes={int(mem['host_total'])} producers={rep['producers']} "
      f"device_bytes={rep['device_bytes']} upload_s={rep['upload_seconds']:.2f} "
      f"layer_s={per('seconds')} host_s={per('host_seconds')} device_s={per('device_seconds')} "
      f"wait_s={per('wait_seconds')} chunks={','.join(str(l.get('chunk', 0)) for l in rep['layers'])} "
      f"write_s={rep.get('write_seconds', 0):.2f}")
PY
