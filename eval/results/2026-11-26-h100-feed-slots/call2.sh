#!/usr/bin/env bash
# Session 6, call 2: W4 at 15 workers: more feed slots (hybrid), huge pages for the table (copy vs mapped), THP on the file.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
B=$PWD/build/default/neargnn
[ -d /tmp/w4 ] || { $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g; }
el ready; uname -r; cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>&1; grep -i thp /boot/config-$(uname -r) 2>/dev/null | head
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --cache-ratio 0.05 --epochs 8 --workers 15"
run() { local name=$1; shift; timeout 150 $B train "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,sys; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]
print(' '.join('%.3f' % x['seconds'] for x in e), '| %.1f it/s last half' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| first_iter %.2f s, wall %.2f s' % (j.get('first_iteration_s',0), j.get('wall_to_last_step_s',0)), '| loss %.10f' % j.get('final_loss', 0))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
for r in 1 2; do
  run hyb-f0-$r $T4 --mode hybrid
  NG_X_FEED=16 run hyb-f16-$r $T4 --mode hybrid
  run part-$r $T4 --mode partial
  NG_X_FEED=16 run part-f16-$r $T4 --mode partial
done
run part-copy $T4 --mode partial --features-memory copy
run hyb-copy $T4 --mode hybrid --features-memory copy
NG_X_FEED=16 run hyb-f16-copy $T4 --mode hybrid --features-memory copy
run base-copy $T4 --mode baseline --features-memory copy
run base $T4 --mode baseline
el runs
gcc -O2 -o /tmp/thp scratch/thp.c && timeout 120 /tmp/thp /tmp/w4/features.npy 2>&1 | tee $L/thp.txt
el done
