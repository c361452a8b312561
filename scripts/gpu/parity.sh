#!/usr/bin/env bash
# PyTorch parity on the GPU machine: every layer type and one whole ResNet-9 training step, run by
# minidl on the CPU and on CUDA and compared with PyTorch float32 on the GPU (TF32 off on both
# sides). One line per tensor compared (PASS/FAIL, relative error, tolerance), then
# "parity: N passed, M failed"; exits 1 on any failure. docs/parity.md explains the tolerances.
# usage: scripts/gpu/parity.sh MINIDL_BINARY OUT_DIR [CONFIG]   (CONFIG: the whole step's model, default
#   configs/resnet9.json; configs/vit_tiny_cpu.json checks a ViT step with gradient clipping)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: parity.sh MINIDL_BINARY OUT_DIR [CONFIG]}
out=${2:?usage: parity.sh MINIDL_BINARY OUT_DIR [CONFIG]}
config=${3:-$root/configs/resnet9.json}
[ -x "$bin" ] || { echo "parity.sh: $bin is not an executable minidl binary" >&2; exit 2; }
mkdir -p "$out"
python3 "$root/scripts/parity/parity.py" --minidl "$bin" --out "$out" --config "$config" 2>&1 | tee "$out/parity.log"
