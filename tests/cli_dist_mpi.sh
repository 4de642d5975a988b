#!/usr/bin/env bash
# Data-parallel training over MPI on the CPU backend: `mpirun -n 2 neargnn train` against one
# process (the same parameters within 1e-6 relative) and against the built-in launcher's 2 ranks
# (the same bits: both sum the ranks' gradients in rank order). Skipped (77) when CMake found no
# mpirun (NG_MPIEXEC empty); CI installs Open MPI (scripts/setup.sh), so it runs there.
# $1: the neargnn binary; NG_DATA_DIR: the real datasets; NG_MPIEXEC: mpirun.
# shellcheck source=tests/lib_cli.sh
. "$(dirname "$0")/lib_cli.sh"
DATA=${NG_DATA_DIR:-../shared/data}
if [ -z "${NG_MPIEXEC:-}" ]; then
  echo "cli_dist_mpi: skipped: this build has no MPI (no mpirun at configure time)"
  exit 77
fi
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
CMP="$(dirname "$0")/dist_compare.py"
# Open MPI refuses root unless told; CI containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under the asan preset: Open MPI's components keep allocations past MPI_Finalize and are
# unloaded by then (LeakSanitizer cannot even name them to suppress them), so leak detection is
# off for the ranks under mpirun. neargnn's own code on the same paths is leak-checked by
# tests/cli_dist.sh (the socket communicator); the other ASan checks stay on here.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
# Loopback only: no network interface is needed for ranks of one host.
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo

"$BIN" convert --format planetoid --in "$DATA/cora" --out "$TMP/cora" --progress none >/dev/null ||
  { echo "FAIL: cannot convert $DATA/cora" >&2; exit 1; }
common=(--dataset "$TMP/cora" --model sage --fanouts "10,5" --hidden 16 --batch 64 --dropout 0
  --optimizer sgd --momentum 0.9 --lr 0.2 --seed 5 --progress none --eval-every 0 --epochs 4
  --workers 1)

run 0 train "${common[@]}" --checkpoint "$TMP/one.st"
LAST="mpirun -n 2 neargnn train"
"$NG_MPIEXEC" -n 2 --oversubscribe "$BIN" train "${common[@]}" --checkpoint "$TMP/mpi.st" \
  --json "$TMP/mpi.json" >"$TMP/out" 2>"$TMP/err" || fail "$LAST failed: $(cat "$TMP/err")"
has out "2 ranks, all-reduce"
"$PY" "$CMP" "$TMP/one.st" "$TMP/mpi.st" --rel 1e-6 >"$TMP/cmp" 2>&1 ||
  fail "mpirun -n 2 vs one process: $(cat "$TMP/cmp")"
"$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["ranks"] == 2, j["ranks"]' \
  "$TMP/mpi.json" || fail "mpirun -n 2: the JSON summary does not say 2 ranks"
run 0 train "${common[@]}" --ranks 2 --checkpoint "$TMP/socket.st"
cmp -s "$TMP/mpi.st" "$TMP/socket.st" || fail "mpirun -n 2 and --ranks 2 wrote different bits"
cli_finish
