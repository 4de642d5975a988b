#!/usr/bin/env bash
# Session 4, call 7 (one GPU): 20 M-node inference with 65,536-node chunks; then a 100 M-node
# graph (51 GiB of features) trained for one epoch, hybrid, peak RSS recorded (issue 20).
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; free -g | head -2; df -h /tmp | tail -1; cat scratch/COMMIT; } > $L/machine.txt
cat $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
timeout 200 eval/bench_infer.sh 20000000 cuda hybrid 0.05 65536 /tmp/w4-20m > $L/infer-64k.log 2>&1; echo "infer 64k rc $?"; grep bench_infer $L/infer-64k.log
rm -rf /tmp/w4-20m; el infer
timeout 240 $B generate --out /tmp/g100 --nodes 100000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 5 --progress none > $L/gen100.log 2>&1; echo "generate 100M rc $?"; du -sh /tmp/g100; el generated
timeout $(( 580 - ($(date +%s) - S) )) $B train --dataset /tmp/g100 --device cuda --mode hybrid --fanouts 15,10,5 --batch 1024 --hidden 256 --cache-ratio 0.05 --epochs 1 --eval-every 0 --progress plain --dropout 0 --lr 0.003 --json $L/t100.json > $L/t100.log 2>&1; echo "train 100M rc $?"
grep -E "memory estimate|set up|epoch|peak|rror" $L/t100.log | head -12
python3 -c "
import json; j=json.load(open('$L/t100.json')); m=j.get('memory',{}); print('peak_rss GB %.1f' % (m.get('peak_rss',0)/1e9), 'estimate', {k:round(v/1e9,2) for k,v in m.items() if isinstance(v,(int,float))}); print('it/s', j.get('it_per_s'), 'first_iter', j.get('first_iteration_s'), 'wall', j.get('wall_to_last_step_s'))"
el done
