#!/usr/bin/env bash
# Final call: every GPU suite, serve/embed/predict on cuda, 20 M-node inference, PyG parity, PyG serve loop.
set -uo pipefail
source .deps/env.sh; export PATH=/opt/torch/.venv/bin:$PATH
L=/tmp/logs; rm -rf $L; mkdir -p $L; S=$(date +%s)
el() { echo "[$(( $(date +%s) - S )) s] $*"; }
trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; cat scratch/COMMIT; } > $L/machine.txt
cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON -DNG_TEST_DATA_DIR=$PWD/.ngdata > $L/cfg.log 2>&1
cmake --build build/default -j 16 > $L/build.log 2>&1 || { tail -30 $L/build.log; exit 1; }
el built
B=$PWD/build/default/neargnn
( $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g ) &
GEN=$!
(cd build/default && timeout 240 ctest -L gpu --output-on-failure > $L/ctest-gpu.log 2>&1; echo "ctest gpu rc $?"; grep -E "Test +#|tests passed" $L/ctest-gpu.log | head -12)
(cd build/default && NG_SERVE_DEVICE=cuda timeout 150 ctest -R 'cli_serve' --output-on-failure > $L/ctest-cli-cuda.log 2>&1; echo "cli_serve (cuda) rc $?")
el tests
# PyG parity on Cora: SAGE and GCN, neargnn's logits against PyG's with the same weights
$B convert --format planetoid --in .ngdata/cora --out /tmp/cora --progress none > /dev/null 2>&1
for m in sage gcn; do
  if [ $m = sage ]; then A="--model sage --fanouts 25,10 --hidden 64 --batch 0 --epochs 30"; else A="--model gcn --fanouts -1,-1 --hidden 16 --batch 0 --epochs 200 --weight-decay 5e-4,0 --dropout 0.5"; fi
  $B train --dataset /tmp/cora $A --normalize-features row --eval-every 0 --progress none --checkpoint /tmp/$m.st > $L/parity-train-$m.log 2>&1
  $B predict --checkpoint /tmp/$m.st --dataset /tmp/cora --split all --logits --out /tmp/$m-logits.npy > $L/parity-predict-$m.log 2>&1
  timeout 60 python3 eval/baselines/pyg_parity.py --dataset /tmp/cora --checkpoint /tmp/$m.st --logits /tmp/$m-logits.npy --device cuda > $L/parity-$m.log 2>&1; echo "pyg parity $m rc $?"; tail -2 $L/parity-$m.log
done
el parity
NEARGNN=$B timeout 200 bash eval/bench_infer.sh 20000000 cuda hybrid 0.05 > $L/bench_infer.log 2>&1; echo "bench_infer rc $?"; grep -E "^bench_infer|rror" $L/bench_infer.log | head -4
el infer
wait $GEN; el w4
for r in 50 200; do timeout 60 python3 eval/baselines/pyg_serve.py --dataset /tmp/w4 --fanouts=-1,-1 --hidden 256 --rate $r --seconds 6 --warmup 1 --json $L/pyg-serve-$r.json > $L/pyg-serve-$r.log 2>&1; echo "pyg serve rate $r rc $?"; python3 -c "import json; j=json.load(open('$L/pyg-serve-$r.json')); print(round(j['achieved_rate'],1), {k: round(v,2) for k,v in j['all_ms'].items()}, 'hub p99', round(j['hub_ms']['p99'],2), 'ord p99', round(j['ordinary_ms']['p99'],2))"; done
el pyg-serve
