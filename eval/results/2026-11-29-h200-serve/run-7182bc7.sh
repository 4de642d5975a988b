#!/usr/bin/env bash
# Final call B: S1 data, a checkpoint per tree, the serving benchmark on HEAD (hybrid, mixes a-d)
# and the same generator against the base tree's server (mixes a and b).
set -uo pipefail
source .deps/env.sh; export PATH=/opt/torch/.venv/bin:$PATH
export NG_DATA_DIR=$PWD/.ngdata
S=$(date +%s); el() { echo "[$(( $(date +%s) - S )) s] $*"; }
L=/tmp/logs; rm -rf $L; mkdir -p $L; trap 'tar czf $OUT/logs.tgz -C /tmp logs' EXIT
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep "Model name"; nproc; cat scratch/COMMIT; } > $L/machine.txt 2>&1
if [ ! -x build/default/neargnn ]; then
  cmake -S . -B build/default -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg.log 2>&1
  cmake --build build/default -j 16 --target neargnn loadgen > $L/build.log 2>&1 || { tail -40 $L/build.log; exit 1; }
fi
B=$PWD/build/default/neargnn; G=$PWD/build/default/loadgen; BO=$PWD/scratch/old/build/neargnn
if [ ! -x $BO ]; then
  cmake -S scratch/old -B scratch/old/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNG_CUDA=ON > $L/cfg-old.log 2>&1
  cmake --build scratch/old/build -j 16 --target neargnn > $L/build-old.log 2>&1 || echo "old build failed"
fi
el built
if [ ! -d /tmp/w4 ]; then
  $B generate --out /tmp/w4g --nodes 16000000 --avg-degree 15 --dim 128 --classes 32 --train 0.01 --val 0 --test 0 --seed 3 --progress none > $L/gen4.log 2>&1 && $B reorder --dataset /tmp/w4g --out /tmp/w4 --progress none > $L/reo4.log 2>&1; rm -rf /tmp/w4g
fi
el data
timeout 90 $B train --dataset /tmp/w4 --device cuda --fanouts 10,5 --hidden 256 --batch 1024 --epochs 1 --eval-every 0 --progress none --cache-ratio 0.05 --checkpoint /tmp/w4-new.st > $L/train.log 2>&1; echo "train rc $?"
timeout 90 $BO train --dataset /tmp/w4 --device cuda --fanouts 10,5 --hidden 256 --batch 1024 --epochs 1 --eval-every 0 --progress none --cache-ratio 0.05 --checkpoint /tmp/w4-old.st > $L/train-old.log 2>&1; echo "train old rc $?"
el trained
export MODEL_ARGS="${MODEL_ARGS:---fanouts 10,5 --hidden 256}" DEVICE=cuda MODES=hybrid RATES="${RATES:-1000 2500 5000 10000 20000 40000 60000}" DURATION=3 WARMUP=1 CONNECTIONS=256 THREADS=4
export SERVE_ARGS="--cache-ratio 0.05 ${EXTRA_SERVE:-}"
timeout 330 bash eval/serve_bench.sh /tmp/w4 /tmp/w4-new.st $B $L/serve > $L/serve_bench.log 2>&1; echo "serve_bench rc $?"; grep -E "mix . rate" $L/serve_bench.log; cp $L/serve/summary.md $L/serve/summary.csv $OUT/ 2>/dev/null
el bench-new
# the base tree's server, the same generator: mixes a and b
python3 - /tmp/w4 > $L/nodes.txt <<'PY'
import json,sys; print(json.load(open(sys.argv[1]+"/dataset.json"))["nodes"])
PY
N=$(cat $L/nodes.txt)
$BO serve --dataset /tmp/w4 --checkpoint /tmp/w4-old.st --fanouts 10,5 --hidden 256 --device cuda --mode hybrid --port 18181 --cache-ratio 0.05 > $L/old-serve.out 2> $L/old-serve.err & SP=$!
for i in $(seq 1 120); do curl -sf http://127.0.0.1:18181/v2/health/ready >/dev/null && break; sleep 0.5; done
for spec in "a 500" "a 1000" "a 2000" "b 200" "b 1000" "b 5000"; do set -- $spec
  mix=$([ $1 = a ] && echo "--mix full:1" || echo "--mix sampled:1 --fanouts 10,5")
  timeout 40 $G --url http://127.0.0.1:18181/v2/models/$(sed -n 's|.*/v2/models/\([^ /]*\).*|\1|p' $L/old-serve.out | head -1) --rate $2 --duration 3 --warmup 1 --connections 256 --threads 4 --timeout-ms 1000 --drain 2 --nodes $N $mix --json $L/old-$1-$2.json 2> $L/old-$1-$2.txt
  echo "old mix $1 rate $2: $(head -1 $L/old-$1-$2.txt)"; sed -n 3p $L/old-$1-$2.txt
done
kill $SP; wait $SP 2>/dev/null
el done
