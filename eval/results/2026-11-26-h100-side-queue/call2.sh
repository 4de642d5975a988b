#!/usr/bin/env bash
# Session 7, call 2 (warm): W4 all hot, side + priority without ahead; W4 at 15 workers, 5% cache, each mode with the switches.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs2; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs2.tgz -C /tmp logs2' EXIT
nvidia-smi --query-gpu=name --format=csv,noheader; ls /tmp/w4 >/dev/null || { echo no w4; exit 1; }
cmake --build build/default -j 16 --target neargnn > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
B=$PWD/build/default/neargnn
run() { local name=$1; shift; timeout 100 env "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,statistics as st; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]; s=[x['seconds'] for x in e]
print(' '.join('%.3f' % x for x in s), '| %.1f it/s' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| e0/steady %.2f' % (s[0]/st.median(s[1:])), '| wall %.2f s' % j.get('wall_to_last_step_s',0), '| loss %.10f' % j.get('final_loss', 0))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15"
for r in 1 2; do
  run hot-sideprio-$r NG_INPUT_AHEAD=0 $B train $T4 --cache-ratio 1.0 --mode hybrid
  run hot-side-$r NG_INPUT_AHEAD=0 NG_CUDA_PRIORITY=0 $B train $T4 --cache-ratio 1.0 --mode hybrid
done
for m in hybrid partial baseline; do
  run $m-off NG_CUDA_SIDE=0 NG_INPUT_AHEAD=0 NG_CUDA_PRIORITY=0 $B train $T4 --cache-ratio 0.05 --mode $m
  run $m-side NG_INPUT_AHEAD=0 NG_CUDA_PRIORITY=0 $B train $T4 --cache-ratio 0.05 --mode $m
  run $m-sideprio NG_INPUT_AHEAD=0 $B train $T4 --cache-ratio 0.05 --mode $m
  run $m-all $B train $T4 --cache-ratio 0.05 --mode $m
done
el done
