#!/usr/bin/env bash
# Session 4, call 3: the merged tree on one H100: every GPU suite, serving on the GPU, the user
# aggregators' kernels, W4 in fp32 and bf16 per mode, 20 M-node inference.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; cat scratch/COMMIT; } > $L/machine.txt
cat $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
(cd build/default && NG_DATA_DIR=$PWD/../../.ngdata timeout 420 ctest -L gpu --output-on-failure > $L/ctest-gpu.log 2>&1; echo "ctest gpu rc $?"; grep -E "tests passed|\*\*\*|Failed" $L/ctest-gpu.log | head -12)
(cd build/default && NG_SERVE_DEVICE=cuda NG_DATA_DIR=$PWD/../../.ngdata timeout 200 ctest -R "cli_serve" --output-on-failure > $L/ctest-serve.log 2>&1; echo "cli_serve cuda rc $?")
wait; el data+tests
BA=$(find build/default -name bench_agg_gpu -type f | head -1)
[ -n "$BA" ] && timeout 120 $BA 2048 20 > $L/bench_agg_gpu.log 2>&1; echo "bench_agg_gpu rc $?"; tail -25 $L/bench_agg_gpu.log
cmake --install build/default --prefix /tmp/ng > /dev/null 2>&1; export PKG_CONFIG_PATH=/tmp/ng/lib/pkgconfig
cc -std=c11 examples/train_powmean.c $(pkg-config --cflags --libs neargnn) -lm -Wl,-rpath,/tmp/ng/lib -o /tmp/tp > $L/powmean-build.log 2>&1 && timeout 120 /tmp/tp .ngdata/cora 50 cuda > $L/powmean.log 2>&1; echo "powmean cuda rc $?: $(tail -1 $L/powmean.log)"
T="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress plain --dropout 0 --lr 0.003"
run() { local name=$1; shift; timeout 120 $B train $T "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,sys; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]
print(' '.join('%.2f' % x['seconds'] for x in e), '| %.1f it/s last half, loss %.10f' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h), e[-1]['loss']), '| first_iter %.2f s, wall %.2f s' % (j.get('first_iteration_s',0), j.get('wall_to_last_step_s',0)))" 2>&1)"; grep -E "rror|MB per it|cold" $L/$name.log | head -3; }
run hot-prof --cache-ratio 1.0 --mode hybrid --sampler gpu --epochs 4 --op-profile 25
sed -n '/device step/,+8p' $L/hot-prof.log
for p in fp32 bf16; do
  run hyb-$p --cache-ratio 0.05 --mode hybrid --sampler gpu --epochs 8 --precision $p
  run part-$p --cache-ratio 0.05 --mode partial --sampler gpu --epochs 8 --precision $p
  run base-$p --cache-ratio 0.05 --mode baseline --sampler gpu --epochs 8 --precision $p
  run zc-$p --cache-ratio 0.05 --mode zerocopy --sampler gpu --epochs 8 --precision $p
done
run base-cpus --cache-ratio 0.05 --mode baseline --sampler cpu --workers 15 --epochs 8
el train
rm -rf /tmp/w4
timeout 280 eval/bench_infer.sh 20000000 cuda hybrid 0.05 4096 /tmp/w4-20m > $L/infer-dev.log 2>&1; echo "infer device rc $?"; grep bench_infer $L/infer-dev.log
DEVICE_BYTES=-1 timeout 200 eval/bench_infer.sh 20000000 cuda hybrid 0.05 4096 /tmp/w4-20m > $L/infer-host.log 2>&1; echo "infer host rc $?"; grep bench_infer $L/infer-host.log
el done
