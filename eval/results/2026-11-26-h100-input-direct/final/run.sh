#!/usr/bin/env bash
# Session 7, call 13: the final tree: every GPU suite; W4 all hot, side queue off and on.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs13; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs13.tgz -C /tmp logs13' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat scratch/COMMIT; } | tee $L/machine.txt
R=$PWD
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
GEN=$!
(cd build/default && NG_DATA_DIR=$R/.ngdata timeout 300 ctest -L gpu --output-on-failure > $L/ctest.log 2>&1; echo "ctest rc $?"; grep -E "Test +#|tests passed|Failed|FAIL" $L/ctest.log | head -24)
el gpu suites
wait $GEN
run() { local name=$1; shift; timeout 100 env "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,statistics as st; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]; s=[x['seconds'] for x in e]
print(' '.join('%.3f' % x for x in s), '| %.1f it/s' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| e0/steady %.2f' % (s[0]/st.median(s[1:])), '| wall %.2f s' % j.get('wall_to_last_step_s',0), '| loss %.10f' % j.get('final_loss', 0))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15 --cache-ratio 1.0 --mode hybrid"
for r in 1 2; do
  run w4-oneq-$r NG_CUDA_SIDE=0 $B train $T4
  run w4-final-$r $B train $T4
done
el done
