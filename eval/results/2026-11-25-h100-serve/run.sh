#!/usr/bin/env bash
# Serving on the GPU: GPU tests, cli_serve on cuda, the serving benchmark on W4 (2-hop), PyG loop.
set -uo pipefail
source .deps/env.sh; export PATH=/opt/torch/.venv/bin:$PATH
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; cat scratch/COMMIT; } > $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
if [ ! -d /tmp/w4 ]; then
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
fi
true
true
wait; el tests+data
[ -f /tmp/w4-2hop.st ] || timeout 60 $B train --dataset /tmp/w4 --device cuda --fanouts 10,5 --hidden 256 --batch 1024 --epochs 2 --eval-every 0 --progress none --cache-ratio 0.05 --checkpoint /tmp/w4-2hop.st > $L/train2hop.log 2>&1; echo "train rc $?"; tail -2 $L/train2hop.log
el trained
export MODEL_ARGS="--fanouts 10,5 --hidden 256" DEVICE=cuda RATES="${RATES:-200 500 1000 1500 2000 3000}" DURATION=${DURATION:-4} WARMUP=1 CONNECTIONS=32 PROCESSES=4
export SERVE_ARGS="--cache-ratio 0.05"
timeout 330 bash eval/serve_bench.sh /tmp/w4 /tmp/w4-2hop.st $B $L/serve > $L/serve_bench.log 2>&1; echo "serve_bench rc $?"; tail -15 $L/serve_bench.log; cat $L/serve/summary.csv 2>/dev/null
el bench
for r in 50 200; do timeout 60 python3 eval/baselines/pyg_serve.py --dataset /tmp/w4 --fanouts=-1,-1 --hidden 256 --rate $r --seconds 6 --warmup 1 --json $L/pyg-serve-$r.json > $L/pyg-serve-$r.log 2>&1; echo "pyg rate $r rc $?"; grep -E "achieved|p99\"" $L/pyg-serve-$r.log | head -4; done
el pyg
