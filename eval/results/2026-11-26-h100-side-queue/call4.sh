#!/usr/bin/env bash
# Session 7, call 4: experiments on top of the side queue: layer 0's two weight-gradient GEMMs side by side (XP_SIDE_L0), ops+side streams at the highest priority (XP_PRIO); an all-hot trace of epoch 0.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs4; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs4.tgz -C /tmp logs4' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat scratch/COMMIT; } | tee $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 --target neargnn > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
[ -d /tmp/w4 ] || { $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g; }
el data
run() { local name=$1; shift; timeout 100 env "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,statistics as st; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]; s=[x['seconds'] for x in e]
print(' '.join('%.3f' % x for x in s), '| %.1f it/s' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| e0/steady %.2f' % (s[0]/st.median(s[1:])), '| first %.2f wall %.2f s' % (j.get('first_iteration_s',0), j.get('wall_to_last_step_s',0)), '| loss %.10f' % j.get('final_loss', 0))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15 --cache-ratio 1.0 --mode hybrid"
for r in 1 2; do
  run hot-A-$r $B train $T4
  run hot-L0-$r XP_SIDE_L0=1 $B train $T4
  run hot-prio-$r XP_PRIO=1 $B train $T4
  run hot-both-$r XP_SIDE_L0=1 XP_PRIO=1 $B train $T4
done
run hot-trace $B train $T4 --epochs 3 --trace $L/hot.trace
python3 scratch/trace_iters.py $L/hot.trace > $L/hot.trace.txt 2>&1; head -60 $L/hot.trace.txt
el done
