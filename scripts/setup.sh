#!/usr/bin/env bash
# Installs what minidl needs from Debian/Ubuntu packages (only what is missing), then configures
# and builds it. CUDA is used when nvcc and cuDNN are found (e.g. under /usr/local/cuda).
# usage: scripts/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
pkgs=(cmake ninja-build g++ libeigen3-dev libcli11-dev nlohmann-json3-dev catch2 python3-pil python3-numpy
      libprotobuf-dev protobuf-compiler libonnx-dev python3-onnx python3-matplotlib)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)"
