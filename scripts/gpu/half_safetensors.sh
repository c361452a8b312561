#!/usr/bin/env bash
# bfloat16 and float16 on the GPU machine: the [half] tests (the CUDA conversion against the CPU
# bits among them) and safetensors files against PyTorch both ways (scripts/torch/half_safetensors.py).
#   scripts/gpu/half_safetensors.sh BIN_DIR OUT_DIR
# BIN_DIR holds minidl_tests; python3 needs torch and safetensors. Exits 1 when a stage fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: half_safetensors.sh BIN_DIR OUT_DIR}
out=${2:?usage: half_safetensors.sh BIN_DIR OUT_DIR}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
run python3 "$root/scripts/torch/half_safetensors.py" write "$out"
run env MINIDL_TORCH_HALVES="$out" "$bin/minidl_tests" "[half]"
run python3 "$root/scripts/torch/half_safetensors.py" check "$out"
gpu_finish half_safetensors.sh
