#!/usr/bin/env bash
# The typed kernel boundary (docs/architecture.md, "The kernel boundary is typed") on the GPU, in
# one device run: the launchers of Conv2d's channels-last paths (cuDNN, depthwise, patchify,
# small-channel, bias, channel padding), the normalization's warp and single-read paths (their
# occupancy queries and cluster launches through the CUDA runtime's typed overloads), attention,
# the pointwise activations, LayerScale/squeeze-excitation and average pooling now take typed
# pointers; the arithmetic, launch shapes and algorithm choices are those of BASE_BIN_DIR's build.
#   scripts/gpu/typed_kernels.sh BIN_DIR OUT_DIR BASE_BIN_DIR
# BIN_DIR holds minidl and minidl_tests built from this change, BASE_BIN_DIR minidl built from the
# commit before it (same flags, same GPU). Stages, each listed in OUT_DIR/FAILED when it fails (the
# script then exits 1):
#   1. the [cuda] tests and the op harness (every layer on CUDA against the CPU, every dtype and layout)
#   2. the same bits: each config below trained by both builds for a few steps as shipped ("auto":
#      bf16 channels_last on a GPU), its steps.jsonl and weights compared byte for byte
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
usage="usage: typed_kernels.sh BIN_DIR OUT_DIR BASE_BIN_DIR"
bin=${1:?$usage}
out=${2:?$usage}
base=${3:?$usage}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

run timeout 900 "$bin/minidl_tests" "[cuda]" 2>&1 | tee "$out/cuda_tests.log" | grep -E "test cases|FAILED|SKIPPED" | tail -5
run timeout 600 "$root/scripts/gpu/op_harness.sh" "$bin" "$out/op_harness" | grep -E "test cases|FAILED" | tail -3

# resnet9_bf16: cuDNN NHWC, bias, BatchNorm; vit_cifar10: patchify, LayerNorm (warp path),
# attention; convnext_cifar: depthwise, LayerNorm2d, layer scale; mobilenetv2: depthwise, pointwise
# activations; resnet9_groupnorm: GroupNorm's single-read path.
for spec in resnet9_bf16:200 vit_cifar10:100 convnext_cifar:30 mobilenetv2:30 resnet9_groupnorm:30; do
  cfg=${spec%%:*} steps=${spec##*:}
  for side in new base; do
    b=$bin
    [ "$side" = base ] && b=$base
    run timeout 300 "$b/minidl" train --config "$root/configs/$cfg.json" --device cuda --max-steps "$steps" \
      --output "$out/$cfg.$side" >"$out/$cfg.$side.log" 2>&1
  done
  same=true compared=0
  for f in steps.jsonl model.safetensors; do
    [ -f "$out/$cfg.new/$f" ] || continue
    compared=$((compared + 1))
    cmp -s "$out/$cfg.new/$f" "$out/$cfg.base/$f" || same=false
  done
  [ "$compared" -gt 0 ] || same=false
  if $same; then
    echo "$cfg ($steps steps): identical to the base build"
  else
    echo "$cfg ($steps steps): DIFFERENT from the base build"
    echo "$cfg differs from the base build" >>"$out/FAILED"
  fi
done
gpu_finish typed_kernels.sh
