#!/usr/bin/env bash
# Session 6, call 7: the merged tree (feed depth, GEMM epilogue, epoch-0 staging, max/min template):
# every GPU suite; max/min kernels before/after (bench_agg_gpu); W4 epoch 0 before/after; max-aggregator losses.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat scratch/COMMIT; } | tee $L/machine.txt
R=$PWD
mk() { rm -rf $2 && mkdir -p $2 && tar -cf - --exclude=./build --exclude=./scratch --exclude=./.git . | tar -xf - -C $2 && (cd $2 && patch -s -R -p1 < $R/scratch/$1) || { echo "patch $1 failed"; exit 1; }; }
mk maxmin.patch /tmp/base-agg; mk epoch0.patch /tmp/base-e0
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
GEN=$!
(cd build/default && NG_DATA_DIR=$R/.ngdata timeout 330 ctest -L gpu --output-on-failure > $L/ctest.log 2>&1; echo "ctest rc $?"; grep -E "Test +#|tests passed|Failed|FAIL" $L/ctest.log | head -16)
el gpu suites
(cd /tmp/base-agg && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$R/.ngdata > $L/cfg-agg.log 2>&1 && cmake --build build -j 16 --target test_gpu_agg bench_agg_gpu neargnn > $L/build-agg.log 2>&1) || { echo base-agg build failed; tail -20 $L/build-agg.log; }
(cd /tmp/base-e0 && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg-e0.log 2>&1 && cmake --build build -j 16 --target neargnn > $L/build-e0.log 2>&1) || { echo base-e0 build failed; tail -20 $L/build-e0.log; }
el base builds
(cd /tmp/base-agg && NG_DATA_DIR=$R/.ngdata timeout 120 build/tests/test_gpu_agg > $L/base-test_gpu_agg.log 2>&1; echo "base test_gpu_agg (hand-written vs the reference) rc $?"; tail -2 $L/base-test_gpu_agg.log)
timeout 90 /tmp/base-agg/build/bench_agg_gpu 2048 20 > $L/bench-agg-before.log 2>&1; echo "bench before rc $?"
timeout 90 build/default/bench_agg_gpu 2048 20 > $L/bench-agg-after.log 2>&1; echo "bench after rc $?"
python3 - <<'PY' | tee $L/bench-agg-compare.txt
def rows(p):
    d = {}
    for l in open(p):
        t = l[48:].split()
        if len(l) > 48 and t and t[0].replace('.', '', 1).isdigit() and l[:18].strip():
            d[(l[:18].strip(), l[18:47].strip())] = float(t[0])
    return d
a, b = rows('/tmp/logs/bench-agg-before.log'), rows('/tmp/logs/bench-agg-after.log')
for k in b:
    if any(w in k[1] for w in ('max', 'min', 'mean', 'sum')):
        print('%-18s %-28s before %8s after %8.4f' % (k[0], k[1], '%.4f' % a[k] if k in a else '-', b[k]))
PY
wait $GEN
el data
run() { local name=$1; shift; local bin=$1; shift; timeout 120 $bin train "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,statistics as st; j=json.load(open('$L/$name.json')); e=j['epochs']; s=[x['seconds'] for x in e]
print(' '.join('%.3f' % x for x in s), '| e0/steady %.2f' % (s[0]/st.median(s[1:])), '| first_iter %.2f s, wall %.2f s' % (j.get('first_iteration_s',0), j.get('wall_to_last_step_s',0)), '| staging_s', j['startup'].get('staging_s'), '| peak', j.get('memory',{}).get('peak_rss_bytes'), '| loss %.10f' % j.get('final_loss', 0))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 4 --workers 15"
for v in base new; do
  bin=$B; [ $v = base ] && bin=/tmp/base-e0/build/neargnn
  run e0-$v-hybrid $bin $T4 --cache-ratio 0.05 --mode hybrid
  run e0-$v-partial $bin $T4 --cache-ratio 0.05 --mode partial
  run e0-$v-baseline $bin $T4 --cache-ratio 0.05 --mode baseline
  run e0-$v-hot $bin $T4 --cache-ratio 1.0 --mode hybrid
done
run e0-new-partial-mapped $B $T4 --cache-ratio 0.05 --mode partial --features-memory mapped
run e0-new-partial-trace $B $T4 --cache-ratio 0.05 --mode partial --trace $L/e0-new-partial.trace
python3 scratch/trace_epochs.py $L/e0-new-partial.trace > $L/e0-new-partial.epochs.txt 2>&1; head -6 $L/e0-new-partial.epochs.txt
el e0
T4M="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0.5 --lr 0.003 --epochs 2 --workers 15 --aggregator max --cache-ratio 0.05 --mode hybrid-static --partial-workers 15"
run max-new $B $T4M
run max-base /tmp/base-agg/build/neargnn $T4M
el done
