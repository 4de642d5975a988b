#!/usr/bin/env bash
# Builds neargnn and runs every test that needs no GPU: the README's test command and CI's.
#   bash scripts/test.sh            set-up, format check, release + CUDA-compile build and tests,
#                                   sanitizer builds and tests (asan: all, tsan: the threaded
#                                   suites), a short fuzzing run
#   NG_TEST_QUICK=1 bash scripts/test.sh   only the release build, its tests and the install
#                                          check
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
step "install into a temporary prefix, build examples/ with pkg-config and find_package"
bash scripts/check_install.sh build/default

if [ "${NG_TEST_QUICK:-0}" = 1 ]; then
  exit 0
fi

step "address + undefined-behaviour sanitizer build and tests (preset asan)"
cmake --preset asan -DNG_WERROR=ON >/dev/null
cmake --build --preset asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1 ctest --preset asan -j "$jobs"

# The suites with threads of their own (scheduler, sampler, the runtime's workers and pipeline,
# the serving engine's batcher, callers and updaters: about 45 s under TSan; inference's producer
# thread);
# OpenMP runs one thread under TSan (tests/CMakeLists.txt). test_train is left out: it exercises
# the same runtime on Cora and takes about ten minutes under TSan.
step "thread sanitizer build and tests of the threaded suites (preset tsan)"
cmake --preset tsan -DNG_WERROR=ON >/dev/null
cmake --build --preset tsan -j "$jobs" --target test_sched test_sampler test_runtime test_fetch \
  test_serve_engine test_infer
ctest --preset tsan -j "$jobs" -R '^(sched|sampler|runtime|fetch|serve_engine|infer)$'

step "fuzzing the loaders, converters, option parser and request parsers (preset fuzz, libFuzzer)"
cmake --preset fuzz -DNG_WERROR=ON >/dev/null
cmake --build --preset fuzz -j "$jobs" --target fuzz_targets
bash tests/fuzz/run.sh build/fuzz "${NG_FUZZ_SECONDS:-20}"
