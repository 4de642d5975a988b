#!/usr/bin/env bash
# Session 7, call 12: the input layer finalized in aggr_fwd when no edge is cold: every GPU suite; W4 / W2 all hot before (patch reverted) and after.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs12; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs12.tgz -C /tmp logs12' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat scratch/COMMIT; } | tee $L/machine.txt
R=$PWD
rm -rf /tmp/base && mkdir -p /tmp/base && tar -cf - --exclude=./build --exclude=./scratch --exclude=./.git . | tar -xf - -C /tmp/base && (cd /tmp/base && patch -s -R -p1 < $R/scratch/direct.patch) || { echo patch failed; exit 1; }
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g; $B generate --out /tmp/w2g --nodes 4000000 --avg-degree 16 --dim 128 --classes 32 --train 0.0256 --val 0 --test 0 --seed 3 --progress none > $L/gen2.log 2>&1 && $B reorder --dataset /tmp/w2g --out /tmp/w2 --progress none > $L/reo2.log 2>&1; rm -rf /tmp/w2g ) &
GEN=$!
(cd build/default && NG_DATA_DIR=$R/.ngdata timeout 280 ctest -L gpu --output-on-failure > $L/ctest.log 2>&1; echo "ctest rc $?"; grep -E "Test +#|tests passed|Failed|FAIL" $L/ctest.log | head -24)
el gpu suites
(cd /tmp/base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg-base.log 2>&1 && cmake --build build -j 16 --target neargnn > $L/build-base.log 2>&1) || { echo base build failed; tail -20 $L/build-base.log; }
B0=/tmp/base/build/neargnn
wait $GEN
el data
run() { local name=$1; shift; timeout 100 "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,statistics as st; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]; s=[x['seconds'] for x in e]
print(' '.join('%.3f' % x for x in s), '| %.1f it/s' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| e0/steady %.2f' % (s[0]/st.median(s[1:])), '| wall %.2f s' % j.get('wall_to_last_step_s',0), '| loss %.10f' % j.get('final_loss', 0))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15 --cache-ratio 1.0 --mode hybrid"
T2="--dataset /tmp/w2 --device cuda --fanouts 12,12,12 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 6 --workers 15 --cache-ratio 1.0 --mode hybrid"
for r in 1 2; do
  run w4-base-$r $B0 train $T4 --hidden 256
  run w4-new-$r $B train $T4 --hidden 256
done
run w4-h128-base $B0 train $T4 --hidden 128
run w4-h128-new $B train $T4 --hidden 128
run w4-tf32-base $B0 train $T4 --hidden 256 --precision tf32
run w4-tf32-new $B train $T4 --hidden 256 --precision tf32
for r in 1 2; do
  run w2-base-$r $B0 train $T2
  run w2-new-$r $B train $T2
done
run w4-new-prof $B train $T4 --hidden 256 --op-profile 25
python3 -c "
import json
for o in json.load(open('$L/w4-new-prof.json'))['device_ops'][:12]: print('  %-16s %2d %.4f ms' % (o['op'], o['layer'], o['ms_per_iter']))"
el done
