#!/usr/bin/env bash
# Final serving run: build HEAD, link loop on cuda (4 modes), S1 all mixes with prefill, updates, memory.
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
( $B convert --format planetoid --in .ngdata/cora --out /tmp/cora > $L/link.log 2>&1 && $B split-edges --dataset /tmp/cora >> $L/link.log 2>&1
  for m in baseline zerocopy partial hybrid auto; do echo "mode $m" >> $L/link.log; timeout 120 $B train --dataset /tmp/cora --task link --device cuda --mode $m --cache-ratio 0.2 --fanouts 5,5 --hidden 32 --embed-dim 16 --batch 1024 --epochs 2 --seed 4 --progress none >> $L/link.log 2>&1; echo "rc $?" >> $L/link.log; done )
grep -E "^mode|epoch 2|^rc" $L/link.log
(cd build/default && timeout 200 ctest -R '^(link|link_gae|cli_link|python)$' -j 4 --output-on-failure > $L/ctest-link.log 2>&1; echo "link ctest rc $?")
grep -E "Test +#|tests passed|tests failed" $L/ctest-link.log
wait; el data
timeout 90 $B train --dataset /tmp/w4 --device cuda --fanouts 10,5 --hidden 256 --batch 1024 --epochs 1 --eval-every 0 --progress none --cache-ratio 0.05 --checkpoint /tmp/w4-new.st > $L/train.log 2>&1; echo "train rc $?"
timeout 120 $B embed --dataset /tmp/w4 --checkpoint /tmp/w4-new.st --layer 0 --for-serve --device cuda --out /tmp/w4-l0.npy > $L/embed.log 2>&1; echo "embed rc $?"; el embedded
export MODEL_ARGS="" DEVICE=cuda MODES=hybrid MIXES="${MIXES:-a b c d}" RATES="${RATES:-5000 10000 20000 40000 60000 80000}" DURATION=3 WARMUP=1 CONNECTIONS=256 THREADS=4
export UPDATES=${UPDATES:-10000} UPDATE_KIND=mix UPDATE_CONNECTIONS=64 UPDATE_THREADS=2 DEADLINE_SLACK_MS=100
export SERVE_ARGS="--cache-ratio 0.05 --embedding-cache 8G --embedding-cache-prefill /tmp/w4-l0.npy"
timeout 330 bash eval/serve_bench.sh /tmp/w4 /tmp/w4-new.st $B $L/serve > $L/serve_bench.log 2>&1; echo "serve_bench rc $?"; grep -E "mix . rate|update" $L/serve_bench.log | head -40; cp $L/serve/summary.* $L/serve/*.png $OUT/ 2>/dev/null
el done
