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
printf '#!/bin/sh\nexec taskset -c 4-15 %s "$@"\n' $B > /tmp/srv-pinned; chmod +x /tmp/srv-pinned
printf '#!/bin/sh\nexec taskset -c 0-3 %s "$@"\n' $PWD/build/default/loadgen > /tmp/lg-pinned; chmod +x /tmp/lg-pinned
mkdir -p $OUT/res
# 1: (a) to 2x saturation, then 10,000 edge updates/s at half saturation (34,000/s)
UPDATE_KIND=edges RATES="40000 80000" UPDATES=10000 UPDATES_AT=34000 timeout 150 bash eval/serve_bench.sh /tmp/w4 /tmp/w4-new.st $B $L/s1 > $L/s1.log 2>&1; echo "s1 rc $?"
grep -E "mix . rate|update" $L/s1.log | head; el s1
# 2: the same overload with the generator on cores 0-3 and the server on 4-15
RATES="40000 80000" UPDATES=0 LOADGEN=/tmp/lg-pinned timeout 120 bash eval/serve_bench.sh /tmp/w4 /tmp/w4-new.st /tmp/srv-pinned $L/s2 > $L/s2.log 2>&1; echo "s2 rc $?"
grep -E "mix . rate|update" $L/s2.log | head; el s2
for r in s1 s2; do mkdir -p /tmp/res/$r; cp $L/$r/summary.md $L/$r/summary.csv $L/$r/memory-bound.json $L/$r/hybrid/metrics.txt /tmp/res/$r/ 2>/dev/null; cp $L/$r.log /tmp/res/$r/serve_bench.log; done
tar czf $OUT/res.tgz -C /tmp res; ls -la $OUT
