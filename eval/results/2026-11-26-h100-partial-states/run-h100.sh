#!/usr/bin/env bash
# Session 8, call 4: PARTIAL packages without host states when no cold edge is the host's; the estimate's state count. Before/after on one instance, W4 all hot and 5% hot; GPU suites.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs4; rm -rf $L; mkdir -p $L
trap 'tar czf $OUT/logs4.tgz -C /tmp logs4' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/machine.txt
R=$PWD
rm -rf /tmp/before; mkdir -p /tmp/before; tar --exclude=./build --exclude=./.deps --exclude=./scratch -cf - . | tar -xf - -C /tmp/before
(cd /tmp/before && patch -s -R -p1 < $R/eval/results/2026-11-26-h100-partial-states/fix.patch) || exit 1
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake -S /tmp/before -B /tmp/before/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg-b.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
cmake --build /tmp/before/build -j 16 --target neargnn > $L/build-b.log 2>&1 || { tail -30 $L/build-b.log; exit 1; }
A=$PWD/build/default/neargnn; Bf=/tmp/before/build/neargnn
$A generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 > $L/gen.log 2>&1 && $A reorder --dataset /tmp/w4g --out /tmp/w4 > $L/reorder.log 2>&1; rm -rf /tmp/w4g
T="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --mode hybrid --workers 15 --epochs 5"
for i in 1 2; do
  for v in before after; do
    X=$A; [ $v = before ] && X=$Bf
    $X train $T --cache-ratio 1.0 --json $L/hot-$v-$i.json > $L/hot-$v-$i.log 2>&1 || echo "hot $v $i failed"
  done
done
for v in before after; do
  X=$A; [ $v = before ] && X=$Bf
  $X train $T --cache-ratio 0.05 --json $L/c5-$v.json > $L/c5-$v.log 2>&1 || echo "c5 $v failed"
done
python3 eval/results/2026-11-26-h100-partial-states/summarize.py $L/hot-*.json $L/c5-*.json | tee $L/summary.txt
grep "memory estimate" $L/hot-after-1.log $L/hot-before-1.log $L/c5-after.log $L/c5-before.log
(cd build/default && NG_DATA_DIR=$R/.ngdata timeout 280 ctest -L gpu --output-on-failure > $L/ctest.log 2>&1; echo "ctest rc $?"; grep -E "tests passed|Failed|FAIL" $L/ctest.log | head -12)
