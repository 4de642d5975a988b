#!/usr/bin/env bash
# Session 8, call 9: max/min on the template (maxmin2 merged + T = 1 instances unbounded, one tail row): bench_agg_gpu main vs merged; W4 max losses; W4/W2 all hot (mean) A/B; every GPU suite.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs9; rm -rf $L; mkdir -p $L
trap 'tar czf $OUT/logs9.tgz -C /tmp logs9' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/machine.txt; cat scratch/COMMIT >> $L/machine.txt
R=$PWD
rm -rf /tmp/base && mkdir -p /tmp/base && tar -cf - --exclude=./build --exclude=./scratch --exclude=./.deps --exclude=./.git . | tar -xf - -C /tmp/base && (cd /tmp/base && patch -s -R -p1 < $R/eval/results/2026-11-26-h100-maxmin-template2/maxmin2.patch) || exit 1
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_WERROR=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake -S /tmp/base -B /tmp/base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg-base.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
cmake --build /tmp/base/build -j 16 --target neargnn bench_agg_gpu test_gpu_agg > $L/build-base.log 2>&1 || { tail -30 $L/build-base.log; exit 1; }
B=$PWD/build/default/neargnn; B0=/tmp/base/build/neargnn
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
( $B generate --out /tmp/w2g --nodes 4000000 --avg-degree 16 --dim 128 --classes 32 --train 0.0256 --val 0 --test 0 --seed 3 --progress none > $L/gen2.log 2>&1 && $B reorder --dataset /tmp/w2g --out /tmp/w2 --progress none > $L/reo2.log 2>&1; rm -rf /tmp/w2g ) &
(cd build/default && NG_DATA_DIR=$R/.ngdata timeout 200 ctest -R "gpu_agg|gpu_parity" --output-on-failure > $L/ctest-agg.log 2>&1; echo "ctest agg/parity rc $?"; grep -E "tests passed|Failed|FAIL" $L/ctest-agg.log | head -12)
(cd /tmp/base/build && ./tests/test_gpu_agg > $L/base-test_gpu_agg.log 2>&1 || ./test_gpu_agg > $L/base-test_gpu_agg.log 2>&1; echo "base test_gpu_agg rc $?"; tail -2 $L/base-test_gpu_agg.log)
wait
BB0=$(ls /tmp/base/build/bench_agg_gpu /tmp/base/build/eval/bench_agg_gpu 2>/dev/null | head -1); BB=$(ls build/default/bench_agg_gpu build/default/eval/bench_agg_gpu 2>/dev/null | head -1)
for i in 1 2; do $BB0 2048 20 > $L/bench-main-$i.log 2>&1; $BB 2048 20 > $L/bench-new-$i.log 2>&1; done
python3 - $L <<'PY' | tee $L/compare.txt
import sys, re
L = sys.argv[1]
def parse(f):
    d = {}; shape = ''
    for line in open(f):
        if len(line) < 58: continue
        sh, ker, ms = line[:18].strip(), line[19:47].strip(), line[48:58].strip()
        if sh: shape = sh
        try: d[shape + ' | ' + ker] = float(ms)
        except ValueError: pass
    return d
a1, a2, b1, b2 = (parse(f'{L}/bench-{t}-{i}.log') for t in ('main', 'new') for i in (1, 2))
print('%-60s %9s %9s %9s %9s %7s' % ('row', 'main', 'main', 'new', 'new', 'new/main'))
for k in a1:
    if k in b1:
        m = min(a1[k], a2.get(k, a1[k])); n = min(b1[k], b2.get(k, b1[k]))
        print('%-60s %9.4f %9.4f %9.4f %9.4f %7.3f' % (k, a1[k], a2.get(k, 0), b1[k], b2.get(k, 0), n / m))
PY
head -20 $L/bench-new-1.log
T4M="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0.5 --lr 0.003 --epochs 2 --workers 15 --aggregator max --cache-ratio 0.05 --mode hybrid-static --partial-workers 15"
$B0 train $T4M --json $L/w4max-main.json > $L/w4max-main.log 2>&1; $B train $T4M --json $L/w4max-new.json > $L/w4max-new.log 2>&1
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15 --cache-ratio 1.0 --mode hybrid"
T2="--dataset /tmp/w2 --device cuda --fanouts 12,12,12 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 6 --workers 15 --cache-ratio 1.0 --mode hybrid"
for i in 1 2; do $B0 train $T4 --json $L/w4-main-$i.json > $L/w4-main-$i.log 2>&1; $B train $T4 --json $L/w4-new-$i.json > $L/w4-new-$i.log 2>&1; done
$B0 train $T2 --json $L/w2-main.json > $L/w2-main.log 2>&1; $B train $T2 --json $L/w2-new.json > $L/w2-new.log 2>&1
python3 eval/results/2026-11-26-h100-partial-states/summarize.py $L/w4max-*.json $L/w4-*.json $L/w2-*.json | tee $L/summary.txt
python3 - $L <<'PY' | tee -a $L/summary.txt
import json, sys, statistics as st
L = sys.argv[1]
for f in ['w4-main-1','w4-main-2','w4-new-1','w4-new-2','w2-main','w2-new']:
    d = json.load(open(f'{L}/{f}.json')); ep = d['epochs']; n = len(ep); last = ep[n // 2:]
    its = sum(e['iterations'] for e in last) / sum(e['seconds'] for e in last)
    print(f'{f:10s} last-half it/s {its:7.1f}  step median ms {st.median(e["iter_ms_median"] for e in last):.3f}')
PY
(cd build/default && NG_DATA_DIR=$R/.ngdata timeout 280 ctest -L gpu --output-on-failure > $L/ctest.log 2>&1; echo "ctest -L gpu rc $?"; grep -E "tests passed|Failed|FAIL" $L/ctest.log | head -12)
