#!/usr/bin/env bash
# Device call 2: the load generator's calibration against a trivial endpoint, then the serving
# benchmark (issue 36's S1: W4's graph reordered, 2-layer GraphSAGE-mean fanouts 10,5, hidden 256,
# 5% hot, --device cuda) in hybrid mode, mixes a-d.
set -uo pipefail
source .deps/env.sh; export PATH=/opt/torch/.venv/bin:$PATH
export NG_DATA_DIR=$PWD/.ngdata
S=$(date +%s); el() { echo "[$(( $(date +%s) - S )) s] $*"; }
L=/tmp/logs; mkdir -p $L; trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; nproc; cat scratch/COMMIT; } > $L/machine.txt 2>&1
if [ ! -x build/default/neargnn ]; then
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$NG_DATA_DIR > $L/cfg.log 2>&1
cmake --build build/default -j 16 --target neargnn loadgen > $L/build.log 2>&1 || { tail -40 $L/build.log; exit 1; }
fi
B=$PWD/build/default/neargnn; G=$PWD/build/default/loadgen
el built
if [ ! -d /tmp/w4 ]; then
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
fi
# calibration: trivial endpoint, 4 generator threads
$G --serve-trivial 18080 --threads 4 > $L/trivial.out 2>&1 & TP=$!
sleep 1
for r in 50000 100000; do $G --url http://127.0.0.1:18080/v2/models/x --rate $r --duration 4 --warmup 1 --connections 256 --threads 4 --nodes 1000 --json $L/trivial-$r.json 2> $L/trivial-$r.txt; tail -4 $L/trivial-$r.txt; done
kill $TP; wait $TP 2>/dev/null
wait; el data; ls /tmp/w4 | head -3
[ -f /tmp/w4-2hop.st ] || timeout 90 $B train --dataset /tmp/w4 --device cuda --fanouts 10,5 --hidden 256 --batch 1024 --epochs 1 --eval-every 0 --progress none --cache-ratio 0.05 --checkpoint /tmp/w4-2hop.st > $L/train.log 2>&1; echo "train rc $?"; tail -2 $L/train.log
el trained
export MODEL_ARGS="--fanouts 10,5 --hidden 256" DEVICE=cuda MODES=${MODES:-hybrid} RATES="${RATES:-1000 2500 5000 10000 20000 40000}" DURATION=${DURATION:-3} WARMUP=1 CONNECTIONS=256 THREADS=4
export SERVE_ARGS="--cache-ratio 0.05"
timeout 300 bash eval/serve_bench.sh /tmp/w4 /tmp/w4-2hop.st $B $L/serve > $L/serve_bench.log 2>&1; echo "serve_bench rc $?"; tail -25 $L/serve_bench.log; cp $L/serve/summary.md $OUT/ 2>/dev/null; cp $L/serve/summary.csv $OUT/ 2>/dev/null
el bench
