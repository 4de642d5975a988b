#!/usr/bin/env bash
# Session 4, call 2: the step's kernels (op profile, all hot), hybrid's start, GPU suites.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat scratch/COMMIT; } > $L/machine.txt
cat $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
(cd build/default && NG_DATA_DIR=$PWD/../../.ngdata timeout 300 ctest -L gpu --output-on-failure > $L/ctest-gpu.log 2>&1; echo "ctest rc $?"; grep -E "tests passed|Failed|\*\*\*|ballast|device full" $L/ctest-gpu.log | head)
wait; el data
T="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress plain --dropout 0 --lr 0.003"
run() { local name=$1; shift; timeout 100 $B train $T "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,sys; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]
print(' '.join('%.2f' % x['seconds'] for x in e), '| %.1f it/s last half, loss %.10f' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h), e[-1]['loss']), '| first_iter %.2f s, wall %.2f s' % (j.get('first_iteration_s',0), j.get('wall_to_last_step_s',0)))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
run hot-prof --cache-ratio 1.0 --mode hybrid --sampler gpu --epochs 4 --op-profile 25
run hot --cache-ratio 1.0 --mode hybrid --sampler gpu --epochs 8
run hot-tf32 --cache-ratio 1.0 --mode hybrid --sampler gpu --epochs 8 --precision tf32
run hyb --cache-ratio 0.05 --mode hybrid --sampler gpu --epochs 8
run hyb-p7 --cache-ratio 0.05 --mode hybrid --sampler gpu --epochs 8 --partial-workers 7
run hyb-p14 --cache-ratio 0.05 --mode hybrid --sampler gpu --epochs 8 --partial-workers 14
run part --cache-ratio 0.05 --mode partial --sampler gpu --epochs 8
run base --cache-ratio 0.05 --mode baseline --sampler gpu --epochs 8
sed -n '/device step/,+22p' $L/hot-prof.log
el done
