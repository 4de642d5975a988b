#!/usr/bin/env bash
# Session 8, call 2: which device-thread ops stall in epoch 0 (host time > 1 ms) and what grows meanwhile.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs2; rm -rf $L; mkdir -p $L
trap 'tar czf $OUT/logs2.tgz -C /tmp logs2' EXIT
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
B=$PWD/build/default/neargnn
[ -d /tmp/w4 ] || { $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 > $L/gen.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 > $L/reorder.log 2>&1; rm -rf /tmp/w4g; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --cache-ratio 1.0 --mode hybrid --workers 15 --epochs 3"
for v in def p7 def2 p72; do
  case $v in p7*) E="XP_PRESIZE=7";; *) E="";; esac
  env $E XP_HOSTOPS=1 XP_TASKS=1 $B train $T4 --trace $L/$v.trace --json $L/$v.json > $L/$v.log 2>&1; echo "$v rc $?"
  python3 eval/results/2026-11-26-h100-side-queue/trace_iters.py $L/$v.trace > $L/$v.trace.txt 2>&1; sed -n 2,12p $L/$v.trace.txt
  echo "hostops>1ms: $(grep -c XP_HOSTOP $L/$v.log)  with grows_now>0: $(grep XP_HOSTOP $L/$v.log | grep -vc 'grows_now 0')  slot grows: $(grep -c XP_SLOTGROW $L/$v.log)"
  grep XP_HOSTOP $L/$v.log | awk '{print $3, $4}' | sort | uniq -c | sort -rn | head -12
  grep -E "epoch|it/s" $L/$v.log | grep -v XP_ | head -5
done
grep -E "XP_HOSTOP|XP_SLOTGROW" $L/def.log | head -60
