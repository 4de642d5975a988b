#!/usr/bin/env bash
# Session 4, call 8 (one GPU): W4 partial vs hybrid over 16 epochs (15 cores), twice alternating;
# the 100 M-node graph's peak RSS with 2 workers.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat scratch/COMMIT; } > $L/machine.txt; cat $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg.log 2>&1
cmake --build build/default -j 16 --target neargnn > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
$B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g
T="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress plain --dropout 0 --lr 0.003 --cache-ratio 0.05 --epochs 16"
run() { local name=$1; shift; timeout 100 $B train $T "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,sys; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]
print('%.1f it/s last half, splits %s, loss %.10f, wall %.2f s' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h), ','.join('%d/%d' % (x['partial_workers'], x['transfer_workers']) for x in e[::3]), e[-1]['loss'], j.get('wall_to_last_step_s',0)))" 2>&1)"; }
for r in 1 2; do run part-$r --mode partial; run hyb-$r --mode hybrid; done
el w4
rm -rf /tmp/w4
timeout 200 $B generate --out /tmp/g100 --nodes 100000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 5 --progress none > $L/gen100.log 2>&1; echo "generate rc $?"
for w in 2; do /usr/bin/time -v $B train --dataset /tmp/g100 --device cuda --mode hybrid --workers $w --fanouts 15,10,5 --batch 1024 --hidden 256 --cache-ratio 0.05 --epochs 1 --eval-every 0 --progress none --dropout 0 --lr 0.003 --json $L/t100-w$w.json > $L/t100-w$w.log 2>&1; echo "workers $w rc $?"; grep -E "memory estimate|epoch    0|Maximum resident" $L/t100-w$w.log; done
el done
