#!/usr/bin/env bash
# GPU sampler, call 2: one round trip per layer, high-priority stream; W4 8 epochs per mode.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; cat scratch/COMMIT; } > $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
if [ ! -d /tmp/w4 ]; then
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
fi
(cd build/default && NG_DATA_DIR=$PWD/../../.ngdata timeout 150 ctest -R gpu_sample --output-on-failure > $L/gpu_sample.log 2>&1; echo "gpu_sample rc $?"; grep -E "edges/s|FAIL" $L/gpu_sample.log | head -5)
wait; el data
BS=$(find build/default -name bench_sample -type f | head -1)
timeout 60 $BS --fanout 15,10,5 --batch 1024 --transpose --device cuda --iters 600 /tmp/w4 > $L/bs-gpu.log 2>&1; grep -E "per batch|edges/s|rror" $L/bs-gpu.log
T="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress plain --dropout 0 --lr 0.003 --epochs 8"; C="--cache-ratio 0.05"
run() { local name=$1; shift; timeout 80 $B train $T $C "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,sys; j=json.load(open('$L/$name.json')); e=j['epochs'][4:]; it=sum(x['iterations'] for x in e); s=sum(x['seconds'] for x in e)
print('last4 %.1f it/s, med %.2f ms, first_iter %.2f s, wall %.2f s' % (it/s, e[-1]['iter_ms_median'], j.get('first_iteration_s',0), j.get('wall_to_last_step_s',0)))" 2>&1)"; grep -E "rror" $L/$name.log | head -2; }
run hyb-gpu --mode hybrid --sampler gpu --trace $L/hyb-gpu.trace
run hyb-gpu-prof --mode hybrid --sampler gpu --op-profile 25
run hyb-gpu-tf32 --mode hybrid --sampler gpu --precision tf32
run hyb-cpu --mode hybrid --sampler cpu --workers 15
run part-gpu --mode partial --sampler gpu
run base-cpu --mode baseline --sampler cpu --workers 15
run base-gpu --mode baseline --sampler gpu
run zc-gpu --mode zerocopy --sampler gpu
run zc-cpu --mode zerocopy --sampler cpu --workers 15
C="--cache-ratio 1.0" run hot-gpu --mode hybrid --sampler gpu
el train
