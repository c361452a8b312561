#!/usr/bin/env bash
# The hardening checks CI runs after scripts/test.sh (docs/reliability.md):
#   sanitize  a Debug build with clang, AddressSanitizer and UndefinedBehaviorSanitizer (CPU only,
#             -O1 so Eigen is not 50x slower), and the Catch2 suite under it but for the
#             end-to-end training runs: any report fails (halt_on_error, no recovery);
#   fuzz      libFuzzer over the config reader and the safetensors reader (same build), each for
#             FUZZ_SECONDS (default 90) from the seed corpus in tests/fuzz/corpus/;
#   badinput  scripts/bad_input.sh against the Release build of scripts/test.sh ($BUILD_DIR).
# Each stage prints its duration. Packages (clang, its sanitizer and libFuzzer runtimes,
# libomp, llvm-symbolizer) come from Debian and are installed when missing.
# usage: scripts/hardening.sh [sanitize] [fuzz] [badinput]   (default: all three)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
release=${BUILD_DIR:-$root/build}
asan=${ASAN_BUILD_DIR:-$root/build-asan}
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(sanitize fuzz badinput)

bash "$root/scripts/install_packages.sh" clang libclang-rt-14-dev libomp-dev llvm
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)

build_asan() {
  CC=clang CXX=clang++ cmake -S "$root" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
    -DMINIDL_CUDA=OFF -DMINIDL_SANITIZE=address,undefined -DMINIDL_FUZZ=ON >/dev/null
  cmake --build "$asan" -j "$(nproc)" --target minidl_tests fuzz_config fuzz_safetensors
}

stage_sanitize() {
  build_asan
  data=$(bash "$root/scripts/data.sh" "$asan")
  [ "$data" = "$asan/cifar10" ] || ln -sfn "$data" "$asan/cifar10"
  # The end-to-end runs on real data (the Catch2 tag [training]: the airbench configs, resume,
  # signals, fresh-run and precision runs) take 1-13 minutes each under ASan: they run in the
  # Release suite of scripts/test.sh and through the real command in badinput. The script tests
  # (plot, onnx_export, image_folder, dist, dist_configs, kill_resume, config_doc, workflow,
  # guide, cli, side_by_side, generate_cli, token_train, volume_train) drive the minidl command,
  # which this build does not make; they run in the Release suite too. Every other test runs here.
  # Catch2 exits with the number of tests it listed, hence the || true; an empty list fails below.
  local training
  training=$({ "$asan/minidl_tests" "[training]" --list-test-names-only || true; } | sed '/^$/d' |
             sed 's/[][\.*^$()+?{}|]/\\&/g' | paste -sd'|')
  [ -n "$training" ] || { echo "hardening: no [training] tests listed"; return 1; }
  (cd "$asan" && ctest --output-on-failure -j "$(nproc)" \
    -E "^($training)\$|^(plot|onnx_export|image_folder|dist|dist_configs|kill_resume|config_doc|workflow|guide|cli|side_by_side|generate_cli|token_train|volume_train)\$")
}

stage_fuzz() {
  build_asan
  local seconds=${FUZZ_SECONDS:-90}
  for target in config safetensors; do
    local work="$asan/fuzz/$target"
    mkdir -p "$work/corpus" "$work/artifacts"
    echo "fuzz: $target for ${seconds}s"
    # New inputs go to the work corpus; the committed seeds stay as they are.
    if ! "$asan/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/" "$work/corpus" "$root/tests/fuzz/corpus/$target" >"$work/log.txt" 2>&1; then
      tail -40 "$work/log.txt"
      echo "fuzz: $target FAILED (the input is in $work/artifacts/)"
      return 1
    fi
    grep -E "^#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$work/log.txt" || tail -3 "$work/log.txt"
  done
}

stage_badinput() {
  [ -x "$release/minidl" ] || bash "$root/scripts/setup.sh" "$release"
  data=$(bash "$root/scripts/data.sh" "$release")
  bash "$root/scripts/bad_input.sh" "$release/minidl" "$data"
}

summary=()
for s in "${stages[@]}"; do
  start=$(date +%s)
  echo "== hardening: $s"
  "stage_$s"
  summary+=("$s $(( $(date +%s) - start ))s")
done
echo "hardening: passed (${summary[*]})"
