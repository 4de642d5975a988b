#!/usr/bin/env bash
# Session 7, call 3 (warm): TF32 side vs off on W4 all hot; W2 (3-hop 12,12,12) all hot and hybrid, side vs off; W4 hidden 128 all hot.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs3; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs3.tgz -C /tmp logs3' EXIT
ls /tmp/w4 >/dev/null || { echo no w4; exit 1; }
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w2 --nodes 4000000 --avg-degree 16 --dim 128 --classes 32 --train 0.0256 --val 0 --test 0 --seed 3 --progress none > $L/gen2.log 2>&1 ) &
GEN=$!
run() { local name=$1; shift; timeout 100 env "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,statistics as st; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]; s=[x['seconds'] for x in e]
print(' '.join('%.3f' % x for x in s), '| %.1f it/s' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| e0/steady %.2f' % (s[0]/st.median(s[1:])), '| wall %.2f s' % j.get('wall_to_last_step_s',0), '| loss %.10f' % j.get('final_loss', 0))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
X="NG_INPUT_AHEAD=0 NG_CUDA_PRIORITY=0"
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15 --cache-ratio 1.0 --mode hybrid"
wait $GEN
el gen
for r in 1 2; do
  run w4-tf32-off-$r $X NG_CUDA_SIDE=0 $B train $T4 --hidden 256 --precision tf32
  run w4-tf32-side-$r $X $B train $T4 --hidden 256 --precision tf32
done
run w4-h128-off $X NG_CUDA_SIDE=0 $B train $T4 --hidden 128
run w4-h128-side $X $B train $T4 --hidden 128
T2="--dataset /tmp/w2 --device cuda --fanouts 12,12,12 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0.5 --lr 0.003 --epochs 6 --workers 15"
for r in 1 2; do
  run w2-hot-off-$r $X NG_CUDA_SIDE=0 $B train $T2 --cache-ratio 1.0 --mode hybrid
  run w2-hot-side-$r $X $B train $T2 --cache-ratio 1.0 --mode hybrid
done
run w2-hybrid-off $X NG_CUDA_SIDE=0 $B train $T2 --cache-ratio 0.10 --mode hybrid
run w2-hybrid-side $X $B train $T2 --cache-ratio 0.10 --mode hybrid
el done
