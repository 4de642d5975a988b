#!/usr/bin/env bash
# Session 7, call 6: epoch 0 with every worker slot sized before it (XP_PRESIZE=7) against the first 3 (default).
set -uo pipefail
source .deps/env.sh
L=/tmp/logs6; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs6.tgz -C /tmp logs6' EXIT
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 --target neargnn > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
B=$PWD/build/default/neargnn
[ -d /tmp/w4 ] || { $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g; }
el data
run() { local name=$1; shift; timeout 100 env "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,statistics as st; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]; s=[x['seconds'] for x in e]
print(' '.join('%.3f' % x for x in s), '| %.1f it/s' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| e0/steady %.2f' % (s[0]/st.median(s[1:])), '| first %.2f wall %.2f s' % (j.get('first_iteration_s',0), j.get('wall_to_last_step_s',0)), '| staging %.2f s' % j['startup'].get('staging_s',0), '| peak %.2f GB' % (j.get('memory',{}).get('peak_rss',0)/1e9), '| loss %.10f' % j.get('final_loss', 0))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 5 --workers 15"
for r in 1 2; do
  for p in 3 7; do
    run hot-p$p-$r XP_PRESIZE=$p $B train $T4 --cache-ratio 1.0 --mode hybrid
  done
done
for m in hybrid partial baseline; do
  for p in 3 7; do
    run $m-p$p XP_PRESIZE=$p $B train $T4 --cache-ratio 0.05 --mode $m
  done
done
el done
