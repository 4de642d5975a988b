#!/usr/bin/env bash
# Session 6, call 1: GPU suites on the final tree of session 5; W4 traces at 15 workers over 8 epochs.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git rev-parse --short HEAD; } | tee $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
GEN=$!
(cd build/default && NG_DATA_DIR=$PWD/../../.ngdata timeout 400 ctest -L gpu --output-on-failure > $L/ctest.log 2>&1; echo "ctest rc $?"; grep -E "tests passed|Failed|FAIL|\*\*\*" $L/ctest.log | head -12)
wait $GEN
el gpu tests + data
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --cache-ratio 0.05 --epochs 8 --workers 15"
run() { local name=$1; shift; timeout 150 $B train "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,sys; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]
print(' '.join('%.3f' % x['seconds'] for x in e), '| %.1f it/s last half' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| first_iter %.2f s, wall %.2f s' % (j.get('first_iteration_s',0), j.get('wall_to_last_step_s',0)))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
for m in partial hybrid baseline; do
  run $m $T4 --mode $m --trace $L/$m.trace
  python3 scratch/trace_epochs.py $L/$m.trace > $L/$m.epochs.txt 2>&1; cat $L/$m.epochs.txt | head -40
done
run hot $T4 --cache-ratio 1.0 --mode hybrid
grep -iE "memory|rss|slot" $L/partial.log | head
el done
