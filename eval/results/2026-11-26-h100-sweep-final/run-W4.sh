#!/usr/bin/env bash
# Session 8, call 10: W4 sweep of modes x workers through the harness, 5 epochs, the final tree.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
left() { echo $(( 575 - ($(date +%s) - S) )); }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; cat scratch/COMMIT; } > $L/machine.txt
cat $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
H="python3 eval/harness/run.py --bin $B --data /tmp/data --epochs 5 --workers 4,8,15 --probe-seconds 0.5 --modes baseline,zerocopy,partial,hybrid --no-plots --check-loss"
timeout 540 $H --workload W4 --time-budget 520 --out $L/W4-fp32 > $L/W4-fp32.log 2>&1; echo "W4 fp32 rc $?"; el W4-fp32
for w in W4-fp32; do python3 - "$L/$w/results.csv" <<'PY'
import csv,sys
rows=list(csv.DictReader(open(sys.argv[1])))
print(sys.argv[1].split('/')[-2])
for r in rows: print('  %-9s %3s %8s it/s  split %s/%s  loss %s' % (r.get('mode'), r.get('workers'), r.get('it_per_s'), r.get('partial_workers'), r.get('transfer_workers'), r.get('final_loss','')[:14]))
PY
done
el done
