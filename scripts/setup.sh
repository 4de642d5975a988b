#!/usr/bin/env bash
# Installs what neargnn needs to build and test on Debian 12 (run as root; idempotent).
# The CUDA toolkit is not installed here: when nvcc is on PATH (or in /usr/local/cuda),
# the default preset builds the GPU backend as well.
# Quiet: nothing is printed when everything is installed; otherwise one line per package, and
# apt's own output goes to a log file (NG_SETUP_LOG, default $TMPDIR/neargnn-setup.log), whose
# last lines are shown if apt fails.
set -euo pipefail
# Open MPI is optional for the build (docs/distributed.md); CI installs it so that the mpirun test
# (tests/cli_dist_mpi.sh) runs.
pkgs=(build-essential cmake ninja-build pkg-config clang libomp-dev libclang-rt-dev
      libhwloc-dev libdnnl-dev zlib1g-dev libcjson-dev libmicrohttpd-dev curl gnuplot-nox python3
      python3-numpy python3-pytest openmpi-bin libopenmpi-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
log=${NG_SETUP_LOG:-${TMPDIR:-/tmp}/neargnn-setup.log}
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "setup: installing ${#missing[@]} Debian packages (apt's output: $log)"
if ! { $sudo_cmd apt-get update -qq && \
       $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  echo "setup: apt-get failed; the end of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
for p in "${missing[@]}"; do
  printf 'setup: installed %s %s\n' "$p" "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null)"
done
