#!/usr/bin/env bash
# Session 6, call 3: all-hot W4 with the CPU and GPU sampler (op profile); W2 and W4 partial vs hybrid at 15 workers.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log -1 --format=%h; } | tee $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w2g --nodes 4000000 --avg-degree 16 --dim 128 --train 0.0256 --val 0 --test 0 --seed 3 --progress none > $L/gen2.log 2>&1 && $B reorder --dataset /tmp/w2g --out /tmp/w2 --progress none > $L/reo2.log 2>&1; rm -rf /tmp/w2g ) &
[ -d /tmp/w4 ] || { $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g; }
wait
el ready
run() { local name=$1; shift; timeout 150 $B train "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,sys; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]
print(' '.join('%.3f' % x['seconds'] for x in e), '| %.1f it/s last half' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| first_iter %.2f s | loss %.10f' % (j.get('first_iteration_s',0), j.get('final_loss', 0)))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15"
T2="--dataset /tmp/w2 --device cuda --fanouts 12,12,12 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15 --cache-ratio 0.10"
run hot-gpu $T4 --cache-ratio 1.0 --mode hybrid --sampler gpu --op-profile 25
run hot-cpu $T4 --cache-ratio 1.0 --mode hybrid --sampler cpu --op-profile 25
run hot-gpu-tf32 $T4 --cache-ratio 1.0 --mode hybrid --sampler gpu --precision tf32
run hot-cpu-tf32 $T4 --cache-ratio 1.0 --mode hybrid --sampler cpu --precision tf32
for r in 1 2; do
  for m in partial hybrid; do run w2-$m-$r $T2 --mode $m; run w4-$m-$r $T4 --cache-ratio 0.05 --mode $m; done
done
run w2-baseline $T2 --mode baseline
run w2-zerocopy $T2 --mode zerocopy
python3 - <<'PY' > $L/ops.txt 2>&1
import json
for n in ("hot-gpu", "hot-cpu"):
    j = json.load(open(f"/tmp/logs/{n}.json"))
    ops = j.get("device_ops") or j.get("op_profile") or {}
    print(n, "keys:", [k for k in j.keys()][:40])
    print(json.dumps(ops)[:3000])
PY
head -c 3000 $L/ops.txt
el done
