#!/usr/bin/env bash
# Updates after the in-place group apply: mix (a) with 10k and 20k updates/s beside it; overload.
set -uo pipefail
source .deps/env.sh; export PATH=/opt/torch/.venv/bin:$PATH
export NG_DATA_DIR=$PWD/.ngdata
S=$(date +%s); el() { echo "[$(( $(date +%s) - S )) s] $*"; }
L=/tmp/logs; rm -rf $L; mkdir -p $L; trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; nproc; cat scratch/COMMIT; } > $L/machine.txt 2>&1
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$NG_DATA_DIR > $L/cfg.log 2>&1
B=$PWD/build/default/neargnn
cmake --build build/default -j 16 --target neargnn loadgen > $L/build.log 2>&1 || { tail -40 $L/build.log; exit 1; }
el built
$B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g
timeout 90 $B train --dataset /tmp/w4 --device cuda --fanouts 10,5 --hidden 256 --batch 1024 --epochs 1 --eval-every 0 --progress none --cache-ratio 0.05 --checkpoint /tmp/w4-new.st > $L/train.log 2>&1; echo "train rc $?"; el trained
export MODEL_ARGS="" DEVICE=cuda MODES=hybrid MIXES=a DURATION=6 WARMUP=1 CONNECTIONS=1024 THREADS=4
export UPDATE_KIND=mix UPDATE_CONNECTIONS=256 UPDATE_THREADS=2 DEADLINE_SLACK_MS=100
export SERVE_ARGS="--cache-ratio 0.05 --embedding-cache 8G --max-connections 4096"
for K in mix features edges; do
  R="20000"; [ $K = mix ] && R="20000 40000 80000"
  UPDATE_KIND=$K RATES="$R" UPDATES=10000 UPDATES_AT=20000 timeout 150 bash eval/serve_bench.sh /tmp/w4 /tmp/w4-new.st $B $L/serve-$K > $L/serve_bench-$K.log 2>&1; echo "serve_bench $K rc $?"
  grep -E "mix . rate|update" $L/serve_bench-$K.log | head -20; mkdir -p $OUT/$K; cp $L/serve-$K/summary.* $L/serve-$K/memory-bound.json $L/serve-$K/hybrid/metrics.txt $L/serve-$K/hybrid/serve.err $OUT/$K/ 2>/dev/null
  el "updates $K done"
done
python3 - <<'PY' > $OUT/degrees.txt 2>&1
import numpy as np
ip = np.load('/tmp/w4/indptr.npy'); d = np.diff(ip).astype(np.float64); N = len(d)
print("nodes %d mean in-degree %.2f E[deg^2] %.1f max %d p99 %d" % (N, d.mean(), (d*d).mean(), d.max(), np.percentile(d, 99)))
PY
cat $OUT/degrees.txt
