#!/usr/bin/env bash
# L4 on the GPU: baseline and hybrid (evaluation once, in hybrid), then the PyG reference.
set -uo pipefail
source .deps/env.sh; export PATH=/opt/torch/.venv/bin:$PATH
S=$(date +%s); el() { echo "[$(( $(date +%s) - S )) s] $*"; }
L=/tmp/logs; rm -rf $L; mkdir -p $L
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; nproc; cat scratch/COMMIT; } > $OUT/machine.txt 2>&1
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg.log 2>&1
cmake --build build/default -j 16 --target neargnn > $L/build.log 2>&1 || { tail -40 $L/build.log; exit 1; }
el built
timeout 400 python3 eval/harness/run_link.py --workload L4 --bin build/default/neargnn --threads 16 \
  --check-loss --modes ${MODES:-baseline,hybrid} --eval-modes hybrid --iters ${ITERS:-150} \
  --data /tmp/l4data --out $L/l4 > $L/l4.log 2>&1; echo "l4 rc $?"
el l4
tail -30 $L/l4.log
D=$(ls -d /tmp/l4data/L4* | head -1)
timeout $(( 590 - ($(date +%s) - S) )) python3 eval/baselines/pyg_link.py --dataset "$D" --fanouts 15,10,5 \
  --batch 1024 --hidden 256 --iters 60 --warmup 5 --lr 0.001 --threads 16 --json $L/pyg_link.json > $L/pyg.log 2>&1; echo "pyg rc $?"
tail -3 $L/pyg.log
el done
cp $L/l4/results.csv $L/l4/report.md $L/l4/results.json $L/pyg_link.json $OUT/ 2>/dev/null
tar czf $OUT/l4-runs.tgz -C $L l4/runs l4.log pyg.log 2>/dev/null; ls -la $OUT
