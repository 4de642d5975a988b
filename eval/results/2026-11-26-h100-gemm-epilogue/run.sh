#!/usr/bin/env bash
# Session 6, call 5: the GEMM epilogue (gemm_bias_act): GPU tests; all-hot W4 step and W4 hybrid/partial/bf16 before (patch reverted) and after, same instance.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $L/machine.txt
rm -rf /tmp/base && mkdir /tmp/base && git ls-files -z | xargs -0 cp --parents -t /tmp/base && cp -r .deps /tmp/base/ && (cd /tmp/base && patch -s -R -p1 < $OLDPWD/scratch/epi.patch) || { echo patch failed; exit 1; }
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
(cd /tmp/base && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg-base.log 2>&1 && cmake --build build -j 16 --target neargnn > $L/build-base.log 2>&1) || { tail -20 $L/build-base.log; exit 1; }
el built
B=$PWD/build/default/neargnn; B0=/tmp/base/build/neargnn
( [ -d /tmp/w4 ] || { $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g; } ) &
(cd build/default && NG_DATA_DIR=$PWD/../../.ngdata timeout 300 ctest -R "gpu_parity|gpu_train|gpu_infer" --output-on-failure > $L/ctest.log 2>&1; echo "ctest rc $?"; grep -E "tests passed|Failed|FAIL|\*\*\*" $L/ctest.log | head -12)
wait
el data
run() { local name=$1; shift; local bin=$1; shift; timeout 150 $bin train "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,sys; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]
print(' '.join('%.3f' % x['seconds'] for x in e), '| %.1f it/s last half' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| step %s ms' % j.get('device_step_ms'), '| first %.2f s | loss %.10f' % (j.get('first_iteration_s',0), j.get('final_loss', 0)))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15"
for r in 1; do :
  for v in base new; do
    bin=$B; [ $v = base ] && bin=$B0
    run hot-$v-$r $bin $T4 --cache-ratio 1.0 --mode hybrid
    run hot-tf32-$v-$r $bin $T4 --cache-ratio 1.0 --mode hybrid --precision tf32

  done
done
run hot-new-prof $B $T4 --cache-ratio 1.0 --mode hybrid --op-profile 25
run hot-base-prof $B0 $T4 --cache-ratio 1.0 --mode hybrid --op-profile 25
python3 - <<'PY' > $L/ops.txt 2>&1
import json
a = {(o["op"], o["layer"]): o["ms_per_iter"] for o in json.load(open("/tmp/logs/hot-base-prof.json"))["device_ops"]}
b = {(o["op"], o["layer"]): o["ms_per_iter"] for o in json.load(open("/tmp/logs/hot-new-prof.json"))["device_ops"]}
for k in sorted(set(a) | set(b), key=lambda k: -a.get(k, 0)):
    print("%-16s %2d base %.4f new %.4f" % (k[0], k[1], a.get(k, 0), b.get(k, 0)))
print("sum", sum(a.values()), sum(b.values()))
PY
cat $L/ops.txt
el done
