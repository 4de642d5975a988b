#!/usr/bin/env bash
# Builds neargnn and runs every test that needs no GPU: the README's test command and CI's.
#   bash scripts/test.sh            set-up, format check, release + CUDA-compile build and tests,
#                                   sanitizer build and tests, a short fuzzing run
#   NG_TEST_QUICK=1 bash scripts/test.sh   only the release build and its tests
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
step() { printf '\n==> %s\n' "$*"; }

step "dependencies (scripts/setup.sh)"
bash scripts/setup.sh

step "formatting (clang-format)"
mapfile -t sources < <(git ls-files '*.c' '*.h' '*.cu' | grep -v '^tests/fuzz/corpus/')
if [ ${#sources[@]} -gt 0 ]; then
  clang-format --dry-run --Werror "${sources[@]}"
fi

step "release build (preset default: the CUDA backend is compiled when nvcc is present)"
cmake --preset default -DNG_WERROR=ON >/dev/null
cmake --build --preset default -j "$jobs"
step "tests (preset default)"
ctest --preset default -j "$jobs"

if [ "${NG_TEST_QUICK:-0}" = 1 ]; then
  exit 0
fi

step "address + undefined-behaviour sanitizer build and tests (preset asan)"
cmake --preset asan -DNG_WERROR=ON >/dev/null
cmake --build --preset asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 ctest --preset asan -j "$jobs"

step "fuzzing the file loaders (preset fuzz, clang + libFuzzer)"
cmake --preset fuzz -DNG_WERROR=ON >/dev/null
cmake --build --preset fuzz -j "$jobs" --target fuzz_targets
bash tests/fuzz/run.sh build/fuzz "${NG_FUZZ_SECONDS:-20}"
