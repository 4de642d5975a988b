#!/usr/bin/env bash
# Session 8, call 7: scatter_rows with 4 rows a warp (XP_SCATTER_R=0: one): gpu_parity/gpu_train; W4 and W2 all hot A/B; op profiles.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs7; rm -rf $L; mkdir -p $L
trap 'tar czf $OUT/logs7.tgz -C /tmp logs7' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/machine.txt; cat scratch/COMMIT >> $L/machine.txt
R=$PWD
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w2g --nodes 4000000 --avg-degree 16 --dim 128 --classes 32 --train 0.0256 --val 0 --test 0 --seed 3 --progress none > $L/gen2.log 2>&1 && $B reorder --dataset /tmp/w2g --out /tmp/w2 --progress none > $L/reo2.log 2>&1; rm -rf /tmp/w2g ) &
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
(cd build/default && NG_DATA_DIR=$R/.ngdata timeout 250 ctest -R "gpu_parity|gpu_train$" --output-on-failure > $L/ctest.log 2>&1; echo "ctest rc $?"; grep -E "tests passed|Failed|FAIL" $L/ctest.log | head -12)
wait
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15 --cache-ratio 1.0 --mode hybrid"
for i in 1 2; do
  $B train $T4 --json $L/w4-new-$i.json > $L/w4-new-$i.log 2>&1
  XP_SCATTER_R=0 $B train $T4 --json $L/w4-old-$i.json > $L/w4-old-$i.log 2>&1
done
T2="--dataset /tmp/w2 --device cuda --fanouts 12,12,12 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 6 --workers 15 --cache-ratio 1.0 --mode hybrid"
$B train $T2 --json $L/w2-new.json > $L/w2-new.log 2>&1
XP_SCATTER_R=0 $B train $T2 --json $L/w2-old.json > $L/w2-old.log 2>&1
$B train $T4 --op-profile 25 --json $L/w4-prof-new.json > $L/w4-prof-new.log 2>&1
XP_SCATTER_R=0 $B train $T4 --op-profile 25 --json $L/w4-prof-old.json > $L/w4-prof-old.log 2>&1
python3 eval/results/2026-11-26-h100-partial-states/summarize.py $L/w4-*.json $L/w2-*.json | tee $L/summary.txt
python3 - $L <<'PY' | tee -a $L/summary.txt
import json, sys, statistics as st
L = sys.argv[1]
for f in ['w4-new-1','w4-new-2','w4-old-1','w4-old-2','w2-new','w2-old']:
    d = json.load(open(f'{L}/{f}.json')); ep = d['epochs']; n = len(ep); last = ep[n // 2:]
    its = sum(e['iterations'] for e in last) / sum(e['seconds'] for e in last)
    print(f'{f:10s} last-half it/s {its:7.1f}  step median ms {st.median(e["iter_ms_median"] for e in last):.3f}')
for f in ['w4-prof-new', 'w4-prof-old']:
    d = json.load(open(f'{L}/{f}.json'))
    def rows(x):
        if isinstance(x, dict):
            for v in x.values(): yield from rows(v)
        elif isinstance(x, list):
            if x and isinstance(x[0], dict) and 'op' in x[0]: yield from x
            else:
                for v in x: yield from rows(v)
    print(f)
    for r in sorted(rows(d), key=lambda r: -r['ms_per_iter'])[:8]:
        print('   %-16s L%-2d %.4f ms %.0f GB/s' % (r['op'], r['layer'], r['ms_per_iter'], r['bytes_per_iter'] / r['ms_per_iter'] / 1e6))
PY
