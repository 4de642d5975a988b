# Needs a one-line switch not kept in the tree: runtime/trainer.c, self_zcopy's row-size test
# SELF_ZCOPY_MIN_ROW_BYTES replaced by getenv("NG_X_SZ") when set (512: W4's rows qualify).
#!/usr/bin/env bash
# Session 6, call 4: W4 at 15 workers: does a device share of zero-copy reads help at 512 B rows? (self_zcopy forced by NG_X_SZ)
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
B=$PWD/build/default/neargnn
[ -d /tmp/w4 ] || { $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g; }
el ready
run() { local name=$1; shift; timeout 150 $B train "$@" --json $L/$name.json > $L/$name.log 2>&1; echo "$name rc $? $(python3 -c "
import json,sys; j=json.load(open('$L/$name.json')); e=j['epochs']; h=e[len(e)//2:]
print(' '.join('%.3f' % x['seconds'] for x in e), '| %.1f it/s last half' % (sum(x['iterations'] for x in h)/sum(x['seconds'] for x in h)), '| loss %.10f' % j.get('final_loss', 0), '| split', e[-1].get('partial_workers', ''), e[-1].get('transfer_workers',''), e[-1].get('device_share',''))" 2>&1)"; grep -E "rror" $L/$name.log | head -3; }
T4="--dataset /tmp/w4 --device cuda --fanouts 15,10,5 --batch 1024 --hidden 256 --eval-every 0 --progress none --dropout 0 --lr 0.003 --epochs 8 --workers 15 --cache-ratio 0.05"
run part $T4 --mode partial
NG_X_SZ=512 run part-sz $T4 --mode partial
NG_X_SZ=512 run hyb-sz $T4 --mode hybrid
for s in 0.1 0.2 0.35; do NG_X_SZ=512 run hs-sz-$s $T4 --mode hybrid-static --partial-workers 15 --device-share $s; done
run hyb $T4 --mode hybrid
python3 -c "import json; print(json.load(open('/tmp/logs/hyb-sz.json'))['epochs'][-1])"
el done
