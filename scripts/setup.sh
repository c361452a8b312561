#!/usr/bin/env bash
# Installs what minidl needs from Debian/Ubuntu packages (only what is missing), then configures
# and builds it. CUDA is used when nvcc and cuDNN are found (e.g. under /usr/local/cuda).
# usage: scripts/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
pkgs=(cmake ninja-build g++ libeigen3-dev libcli11-dev nlohmann-json3-dev catch2 python3-pil python3-numpy
      libprotobuf-dev protobuf-compiler libonnx-dev python3-onnx python3-matplotlib
      libturbojpeg0-dev libpng-dev openmpi-bin libopenmpi-dev)
bash "$root/scripts/install_packages.sh" "${pkgs[@]}"
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)"
