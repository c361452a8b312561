#!/usr/bin/env bash
# The typed kernel boundary (docs/architecture.md, "The kernel boundary is typed") on the GPU, in
# one device run. The launchers of Conv2d's channels-last paths (cuDNN, depthwise, patchify,
# small-channel, bias, channel padding), the normalization's warp and single-read paths (their
# occupancy queries and cluster launches through the CUDA runtime's typed overloads), attention,
# the pointwise activations, LayerScale/squeeze-excitation and average pooling take typed
# pointers; the arithmetic, launch shapes and algorithm choices are those of the build before.
# Stages: the [cuda] tests and the op harness (every layer on CUDA against the CPU, every dtype
# and layout), then the bits of five shipped configs as shipped ("auto": bf16 channels_last) with
# both builds (same_bits, scripts/gpu/run_stage.sh): resnet9_bf16 (cuDNN NHWC, bias, BatchNorm),
# vit_cifar10 (patchify, LayerNorm's warp path, attention), convnext_cifar (depthwise, LayerNorm2d,
# layer scale), mobilenetv2 (depthwise, pointwise activations), resnet9_groupnorm (single-read).
#   scripts/gpu/typed_kernels.sh BASE_BIN_DIR BIN_DIR OUT_DIR   (both built here, sm_90, same flags)
# The data is $CIFAR10_DIR, else decoded into OUT_DIR/cifar10. Exits 1 when a stage fails or a
# hash differs.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/scripts/gpu/run_stage.sh"
base=${1:?usage: typed_kernels.sh BASE_BIN_DIR BIN_DIR OUT_DIR}
bin=${2:?usage: typed_kernels.sh BASE_BIN_DIR BIN_DIR OUT_DIR}
out=${3:?usage: typed_kernels.sh BASE_BIN_DIR BIN_DIR OUT_DIR}
gpu_setup "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
run timeout 600 "$bin/minidl_tests" "[cuda]" 2>&1 | tee "$out/cuda_tests.log" | grep -E "test cases|FAILED|SKIPPED"
run timeout 600 "$root/scripts/gpu/op_harness.sh" "$bin" "$out/op_harness" | grep -E "test cases|FAILED"
same_bits "$base" "$bin" resnet9_bf16:200 vit_cifar10:100 convnext_cifar:30 mobilenetv2:30 resnet9_groupnorm:30
gpu_finish typed_kernels
