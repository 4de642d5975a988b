#!/usr/bin/env bash
# Session 4, call 4: W4 (fp32, bf16) and W2 (fp32) sweeps of modes x workers through the harness;
# then, if time remains, 20 M-node inference with larger chunks and the power-mean example on cuda.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
left() { echo $(( 570 - ($(date +%s) - S) )); }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; cat scratch/COMMIT; } > $L/machine.txt
cat $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
H="python3 eval/harness/run.py --bin $B --data /tmp/data --epochs 3 --workers 4,8,15 --probe-seconds 0.5 --modes baseline,zerocopy,partial,hybrid --no-plots --check-loss"
timeout 200 $H --workload W4 --time-budget 170 --out $L/W4-fp32 > $L/W4-fp32.log 2>&1; echo "W4 fp32 rc $?"; el W4-fp32
timeout 170 $H --workload W4 --time-budget 150 --precision bf16 --out $L/W4-bf16 > $L/W4-bf16.log 2>&1; echo "W4 bf16 rc $?"; el W4-bf16
timeout $(left) $H --workload W2 --time-budget 150 --out $L/W2-fp32 > $L/W2-fp32.log 2>&1; echo "W2 fp32 rc $?"; el W2
for w in W4-fp32 W4-bf16 W2-fp32; do python3 - "$L/$w/results.csv" <<'PY'
import csv,sys
rows=list(csv.DictReader(open(sys.argv[1])))
print(sys.argv[1].split('/')[-2])
for r in rows: print('  %-9s %3s %8s it/s  split %s/%s  loss %s' % (r.get('mode'), r.get('workers'), r.get('it_per_s'), r.get('partial_workers'), r.get('transfer_workers'), r.get('final_loss','')[:14]))
PY
done
if [ $(left) -gt 120 ]; then
  cmake -S examples -B /tmp/ex -G Ninja -DCMAKE_PREFIX_PATH=/tmp/ng > $L/ex.log 2>&1; cmake --install build/default --prefix /tmp/ng > /dev/null 2>&1
  cmake -S examples -B /tmp/ex -G Ninja -DCMAKE_PREFIX_PATH=/tmp/ng >> $L/ex.log 2>&1 && cmake --build /tmp/ex >> $L/ex.log 2>&1 && timeout 60 /tmp/ex/train_powmean .ngdata/cora 50 cuda > $L/powmean.log 2>&1; echo "powmean cuda rc $?: $(tail -1 $L/powmean.log)"
fi
rm -rf /tmp/data
if [ $(left) -gt 100 ]; then timeout $(left) eval/bench_infer.sh 20000000 cuda hybrid 0.05 16384 /tmp/w4-20m > $L/infer-16k.log 2>&1; echo "infer 16k rc $?"; grep bench_infer $L/infer-16k.log; fi
el done
