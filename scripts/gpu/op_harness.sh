#!/usr/bin/env bash
# The op harness on the GPU: every example of every registered layer type on CUDA against the CPU,
# forward and backward, in float32/bfloat16/float16 x contiguous/channels_last, and captured as a
# CUDA graph against eager (tests/test_op_harness_cuda.cpp); then the CPU half of the harness, so
# one run shows the whole of it. Prints the GPU, the examples and Catch2's summary; exits non-zero
# when any check fails or when the CUDA cases skipped (no GPU seen).
#   scripts/gpu/op_harness.sh BIN_DIR OUT_DIR     (BIN_DIR holds minidl_tests built with CUDA)
set -euo pipefail
bin=${1:?usage: op_harness.sh BIN_DIR OUT_DIR}
out=${2:?usage: op_harness.sh BIN_DIR OUT_DIR}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
# Catch2 exits with the number of tests listed.
"$bin/minidl_tests" "[op_harness]" --list-tests || true
# -s would print every passing assertion; the summary line and any failure with its INFO context
# (the example, the mode, the tensor and its worst element) are what the log needs.
"$bin/minidl_tests" "[op_harness]" --durations yes 2>&1 | tee "$out/op_harness.log"
if grep -q "SKIPPED: no CUDA GPU" "$out/op_harness.log"; then
  echo "op_harness.sh: the CUDA cases skipped: no GPU was seen" >&2
  exit 1
fi
