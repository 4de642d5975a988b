#!/usr/bin/env bash
# Installs what neargnn needs to build and test on Debian 12 (run as root; idempotent).
# The CUDA toolkit is not installed here: when nvcc is on PATH (or in /usr/local/cuda),
# the default preset builds the GPU backend as well.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config clang libomp-dev libclang-rt-dev
      libhwloc-dev libdnnl-dev zlib1g-dev libcjson-dev libmicrohttpd-dev curl
      gnuplot-nox python3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
