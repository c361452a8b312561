#!/usr/bin/env bash
# The test command on a fresh machine: set up, build, decode the data into the build folder, run
# every test with ctest. [cuda] tests print a visible SKIPPED message where there is no GPU.
# usage: scripts/test.sh [ctest options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/scripts/setup.sh" "$build"
data=$(bash "$root/scripts/data.sh" "$build")
[ "$data" = "$build/cifar10" ] || ln -sfn "$data" "$build/cifar10"
bash "$root/scripts/data_jpeg.sh" "$build" >/dev/null
# GPT-2's vocabulary for the tokenizer's tests (checksummed; skipped, visibly, if it cannot come).
bash "$root/scripts/fetch-gpt2-tokenizer.sh" "$build/gpt2-tokenizer" >/dev/null ||
  echo "test.sh: no GPT-2 vocabulary; the tokenizer's encoding tests will be skipped"
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
