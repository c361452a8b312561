#!/usr/bin/env bash
# minidl as a library, end to end: installs the build into a temporary prefix, builds
# examples/train_cifar10 against the installed CMake package (find_package(minidl)), and runs its
# two programs for a few steps on the CPU: train_cifar10 (a loop of its own over the layer API)
# and run_config (a JSON config through Run, the library call of `minidl train`). What CI runs
# after scripts/test.sh.
#   scripts/example.sh [BUILD_DIR] [STEPS]   (defaults: build, 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${BUILD_DIR:-$root/build}}
steps=${2:-20}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
echo "example: installed into $work/prefix: $(find "$work/prefix/include/minidl" -name '*.h' | wc -l) headers," \
  "$(ls "$work/prefix/lib"/*.a | wc -l) libraries"
cmake -S "$root/examples/train_cifar10" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" -j "$(nproc)" >/dev/null
data=$(bash "$root/scripts/data.sh" "$build")
"$work/build/train_cifar10" "$data" --steps "$steps" --device cpu --out "$work/run"
for f in checkpoint.safetensors model.safetensors; do
  [ -s "$work/run/$f" ] || { echo "example: FAIL: no $f"; exit 1; }
done
"$work/build/run_config" "$root/configs/quick_cpu.json" "$work/config_run" "data.dir=$data" data.train_limit=256 \
  data.test_limit=200 batch_size=32 epochs=1 output.progress=false
for f in checkpoint.safetensors model.safetensors summary.json metrics.jsonl; do
  [ -s "$work/config_run/$f" ] || { echo "example: FAIL: run_config wrote no $f"; exit 1; }
done
echo "example: ok (find_package(minidl) build, $steps steps, checkpoint written; a config run through Run)"
