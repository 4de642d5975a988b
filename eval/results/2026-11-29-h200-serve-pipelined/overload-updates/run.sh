#!/usr/bin/env bash
# Final serving check: updates beside (a), overload with more connections; memory.
set -uo pipefail
source .deps/env.sh; export PATH=/opt/torch/.venv/bin:$PATH
export NG_DATA_DIR=$PWD/.ngdata
S=$(date +%s); el() { echo "[$(( $(date +%s) - S )) s] $*"; }
L=/tmp/logs; rm -rf $L; mkdir -p $L; trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; nproc; cat scratch/COMMIT; } > $L/machine.txt 2>&1
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$NG_DATA_DIR > $L/cfg.log 2>&1
B=$PWD/build/default/neargnn
cmake --build build/default -j 16 --target neargnn loadgen test_gpu_link > $L/build.log 2>&1 || { tail -40 $L/build.log; exit 1; }
el built
(cd build/default && true ctest -R "^gpu_link$" --output-on-failure | tail -3)
$B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g
timeout 90 $B train --dataset /tmp/w4 --device cuda --fanouts 10,5 --hidden 256 --batch 1024 --epochs 1 --eval-every 0 --progress none --cache-ratio 0.05 --checkpoint /tmp/w4-new.st > $L/train.log 2>&1; echo "train rc $?"; el trained
export MODEL_ARGS="" DEVICE=cuda MODES=hybrid MIXES="${MIXES:-a}" RATES="${RATES:-5000 20000 40000 80000 120000}" DURATION=${DURATION:-6} WARMUP=1 CONNECTIONS=${CONNECTIONS:-1024} THREADS=4
export UPDATES=${UPDATES:-10000} UPDATES_AT=${UPDATES_AT:-} UPDATE_KIND=mix UPDATE_CONNECTIONS=${UPDATE_CONNECTIONS:-256} UPDATE_THREADS=2 DEADLINE_SLACK_MS=100
export SERVE_ARGS="--cache-ratio 0.05 --embedding-cache 8G --max-connections 4096"
timeout 165 bash eval/serve_bench.sh /tmp/w4 /tmp/w4-new.st $B $L/serve > $L/serve_bench.log 2>&1; echo "serve_bench rc $?"; grep -E "mix . rate|update" $L/serve_bench.log | head -40; cp $L/serve/summary.* $OUT/ 2>/dev/null
el done
