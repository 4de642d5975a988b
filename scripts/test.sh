#!/usr/bin/env bash
# Builds neargnn and runs every test that needs no GPU: the README's test command and CI's.
#   bash scripts/test.sh            set-up, format check, release + CUDA-compile build and tests,
#                                   the install check, sanitizer builds and tests (asan: all but
#                                   the accuracy bars, tsan: the threaded suites; docs/usage.md),
#                                   a short fuzzing run
#   NG_TEST_QUICK=1 bash scripts/test.sh   only the release build, its tests and the install
#                                          check
# Each stage prints its elapsed time; at the end (or at the first failure) a table gives every
# stage's time and state, so that a failure also names the stages it kept from running, and for
# each stage that ran tests its 10 slowest, so that a slow suite is seen at once.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# Each test stage's ctest output, read for the table of its slowest tests.
ctest_logs=$(mktemp -d "${TMPDIR:-/tmp}/ngtest-XXXXXX")

# ctest over preset $1 with the other arguments, its output also kept for that table.
run_ctest() {
  local preset=$1
  shift
  ctest --preset "$preset" -j "$jobs" "$@" 2>&1 | tee "$ctest_logs/$preset.log"
}

stage_setup() { bash scripts/setup.sh; }

stage_format() {
  local sources
  mapfile -t sources < <(git ls-files '*.c' '*.h' '*.cu' | grep -v '^tests/fuzz/corpus/')
  if [ ${#sources[@]} -gt 0 ]; then
    clang-format --dry-run --Werror "${sources[@]}"
  fi
}

stage_release_build() {
  cmake --preset default -DNG_WERROR=ON >/dev/null
  cmake --build --preset default -j "$jobs"
}

stage_release_tests() { run_ctest default; }

stage_install() { bash scripts/check_install.sh build/default; }

# Every suite but the accuracy bars on Cora (label `accuracy`, tests/CMakeLists.txt): those repeat
# for hundreds of epochs the paths that shorter cases of the same suites take under ASan, and
# run in the release stage.
stage_asan() {
  cmake --preset asan -DNG_WERROR=ON >/dev/null
  cmake --build --preset asan -j "$jobs" --target ng_tests
  ASAN_OPTIONS=detect_leaks=1 run_ctest asan -LE accuracy
}

# The suites with threads of their own (scheduler, sampler, the runtime's workers and pipeline,
# the serving engine's lanes, clock, callers and updaters; link training's producers; the HTTP
# front's event loops, sweeper and updater pool; inference's producer thread), each ctest entry
# of a split suite included (fetch_*: tests/CMakeLists.txt). OpenMP runs one thread under
# TSan (tests/CMakeLists.txt), and the fetch suites run each model on every 4th mode
# (NG_TEST_FETCH_STRIDE, tests/test_fetch.c). test_train is left out: it exercises the same
# runtime on Cora through its accuracy bars, which take tens of minutes under TSan.
stage_tsan() {
  cmake --preset tsan -DNG_WERROR=ON >/dev/null
  cmake --build --preset tsan -j "$jobs" --target test_sched test_sampler test_runtime \
    test_fetch test_serve_engine test_serve_http test_infer test_link
  run_ctest tsan -R '^(sched|sampler|runtime|fetch(_[a-z0-9_]+)?|serve_engine|serve_http|infer|link)$'
}

stage_fuzz() {
  cmake --preset fuzz -DNG_WERROR=ON >/dev/null
  cmake --build --preset fuzz -j "$jobs" --target fuzz_targets
  NG_FUZZ_JOBS=$jobs bash tests/fuzz/run.sh build/fuzz "${NG_FUZZ_SECONDS:-20}"
}

# name|function|what the stage does (printed before it runs)
stages=(
  "setup|stage_setup|dependencies (scripts/setup.sh)"
  "format|stage_format|formatting (clang-format)"
  "release build|stage_release_build|release build (preset default: the CUDA backend is compiled when nvcc is present)"
  "release tests|stage_release_tests|tests (preset default)"
  "install|stage_install|install into a temporary prefix, build examples/ with pkg-config and find_package"
)
if [ "${NG_TEST_QUICK:-0}" != 1 ]; then
  stages+=(
    "asan|stage_asan|address + undefined-behaviour sanitizer build and tests (preset asan)"
    "tsan|stage_tsan|thread sanitizer build and tests of the threaded suites (preset tsan)"
    "fuzz|stage_fuzz|fuzzing the loaders, converters, option parser and request parsers (preset fuzz, libFuzzer)"
  )
fi

declare -a took state
for i in "${!stages[@]}"; do
  state[i]="not run"
  took[i]=""
done
current=-1
stage_start=0
script_start=$SECONDS

fmt_s() { printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); }

# The 10 slowest tests of each test stage that ran, from its ctest lines
# ("12/87 Test #10: fetch ......   Passed    8.70 sec").
slowest() {
  local entry log
  for entry in "release tests|default" "asan|asan" "tsan|tsan"; do
    log=$ctest_logs/${entry#*|}.log
    [ -s "$log" ] || continue
    printf '\n==> the 10 slowest tests: %s\n' "${entry%%|*}"
    awk '$NF == "sec" && / Test +#[0-9]+: / {
           for (i = 1; i < NF; i++) if ($i ~ /^#[0-9]+:$/) name = $(i + 1)
           printf "  %8.1f s  %s\n", $(NF - 1), name
         }' "$log" | sort -rn | head -n 10 || true
  done
  rm -rf "$ctest_logs"
}

# On any exit: the table of stages, and on a failure which stage failed and which did not run.
report() {
  local rc=$?
  trap - EXIT
  if [ "$current" -ge 0 ] && [ "${state[current]}" = running ]; then
    took[current]=$((SECONDS - stage_start))
    state[current]=$([ "$rc" -eq 0 ] && echo ok || echo "FAILED (exit $rc)")
  fi
  slowest
  printf '\n==> stages\n'
  local i name
  for i in "${!stages[@]}"; do
    name=${stages[i]%%|*}
    if [ -n "${took[i]}" ]; then
      printf '  %-14s %-18s %s\n' "$name" "$(fmt_s "${took[i]}")" "${state[i]}"
    else
      printf '  %-14s %-18s %s\n' "$name" "" "${state[i]}"
    fi
  done
  printf '  %-14s %s\n' total "$(fmt_s $((SECONDS - script_start)))"
  if [ "$rc" -ne 0 ]; then
    local skipped=()
    for i in "${!stages[@]}"; do
      [ "${state[i]}" = "not run" ] && skipped+=("${stages[i]%%|*}")
    done
    local failed="(before the first stage)"
    [ "$current" -ge 0 ] && failed=${stages[current]%%|*}
    printf '==> FAILED: stage "%s" (exit %d)\n' "$failed" "$rc"
    if [ ${#skipped[@]} -gt 0 ]; then
      local list
      list=$(printf '%s, ' "${skipped[@]}")
      printf '==> not run: %s\n' "${list%, }"
    fi
  fi
  exit "$rc"
}
trap report EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for i in "${!stages[@]}"; do
  IFS='|' read -r name fn what <<<"${stages[i]}"
  printf '\n==> %s\n' "$what"
  current=$i
  state[i]=running
  stage_start=$SECONDS
  "$fn"
  took[i]=$((SECONDS - stage_start))
  state[i]=ok
  printf '==> %s: %s\n' "$name" "$(fmt_s "${took[i]}")"
done
