#!/usr/bin/env bash
# Final call: build HEAD, GPU suites + serving suites, then S1 (hybrid, embedding cache 8G).
set -uo pipefail
source .deps/env.sh; export PATH=/opt/torch/.venv/bin:$PATH
export NG_DATA_DIR=$PWD/.ngdata
S=$(date +%s); el() { echo "[$(( $(date +%s) - S )) s] $*"; }
L=/tmp/logs; rm -rf $L; mkdir -p $L; trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; nproc; cat scratch/COMMIT; } > $L/machine.txt 2>&1
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$NG_DATA_DIR > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -40 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
(cd build/default && timeout 300 ctest -L gpu -j 3 --output-on-failure > $L/ctest-gpu.log 2>&1; echo "gpu ctest rc $?")
grep -E "Test +#|tests passed|tests failed" $L/ctest-gpu.log
(cd build/default && NG_SERVE_DEVICE=cuda timeout 200 ctest -R '^(serve_engine|serve_log|serve_cache|cli_serve|layers)$' -j 4 --output-on-failure > $L/ctest-serve.log 2>&1; echo "serve ctest rc $?")
grep -E "Test +#|tests passed|tests failed" $L/ctest-serve.log
wait; el tests+data
timeout 90 $B train --dataset /tmp/w4 --device cuda --fanouts 10,5 --hidden 256 --batch 1024 --epochs 1 --eval-every 0 --progress none --cache-ratio 0.05 --checkpoint /tmp/w4-new.st > $L/train.log 2>&1; echo "train rc $?"
export MODEL_ARGS="" DEVICE=cuda MODES=hybrid RATES="${RATES:-1000 2500 5000 10000 20000}" DURATION=3 WARMUP=1 CONNECTIONS=256 THREADS=4
export SERVE_ARGS="--cache-ratio 0.05 --embedding-cache 8G"
timeout 240 bash eval/serve_bench.sh /tmp/w4 /tmp/w4-new.st $B $L/serve > $L/serve_bench.log 2>&1; echo "serve_bench rc $?"; grep -E "mix . rate" $L/serve_bench.log; cp $L/serve/summary.md $L/serve/summary.csv $OUT/ 2>/dev/null
el done
