#!/usr/bin/env bash
# Session 4, call 6 (2 GPUs): gpu_dist after its fix; bench_dist at 14 workers per GPU (the cores
# one rank gets on this host) for 1 and 2 GPUs, 6 epochs.
set -uo pipefail
source .deps/env.sh
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'mkdir -p $L/keep; for d in $L/dist*; do [ -d $d ] && { n=$(basename $d); cp $d/summary.md $L/keep/$n-summary.md 2>/dev/null; for g in $d/gpus-*; do cp $g/results.csv $L/keep/$n-$(basename $g)-results.csv 2>/dev/null; done; }; done; cp $L/*.log $L/machine.txt $L/keep/ 2>/dev/null; tar czf $OUT/logs.tgz -C $L keep' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"; cat scratch/COMMIT; } > $L/machine.txt 2>&1
head -2 $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 32 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
export NG_NCCL_LIBRARY=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 | head -1)
(cd build/default && NG_DATA_DIR=$PWD/../../.ngdata timeout 200 ctest -R '^(gpu_dist)$' --output-on-failure > $L/ctest-dist.log 2>&1; echo "ctest gpu_dist rc $?"; grep -E "tests passed|\*\*\*|FAIL|2 GPUs vs 1" $L/ctest-dist.log | head)
WORKERS=14 WORKLOADS="W4 W1" EPOCHS=6 timeout 400 bash eval/bench_dist.sh $L/dist-w14 > $L/bench_dist-w14.log 2>&1; echo "bench_dist w14 rc $?"
grep -E "^\||check:|peer|H2D" $L/bench_dist-w14.log
el done
