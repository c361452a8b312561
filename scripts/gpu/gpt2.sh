#!/usr/bin/env bash
# The language-model kernels on the GPU, in one device run:
#   scripts/gpu/gpt2.sh BIN_DIR OUT_DIR
# BIN_DIR holds the built `minidl` and `minidl_tests` (nothing is built here). Runs, keeping every
# log and CSV in OUT_DIR:
#   1. the CUDA tests of the language-model layers against the CPU reference: causal attention on
#      the GEMM, fused and flash paths, flash attention at 1024 tokens of head size 64 (the same
#      bits every run), Embedding's sorted backward, cross-entropy over (B, T, 50257);
#      and `minidl generate`'s tokens on the GPU against the CPU's for the same seed;
#   2. scripts/gpu/attention.sh at GPT-2 124M's shape (batch 16, 1024 tokens, width 768, 12 heads,
#      bf16, causal): `minidl bench attention` beside PyTorch's flash SDPA (is_causal), forward +
#      backward and their ratio (the target: within 1.5x of flash).
# Exits non-zero if a stage fails.
set -euo pipefail
bin=${1:?usage: gpt2.sh BIN_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "${2:?usage: gpt2.sh BIN_DIR OUT_DIR}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
git -C "$root" log -1 --format='commit %h %s' 2>/dev/null || true

run timeout 300 "$bin/minidl_tests" "[language_model][cuda]" 2>&1 | tee "$out/tests_language_model.log" || true
run timeout 300 "$bin/minidl_tests" "[transformer][cuda]" 2>&1 | tee "$out/tests_transformer.log" || true
run timeout 300 "$bin/minidl_tests" "[generate][cuda]" 2>&1 | tee "$out/tests_generate.log" || true

run timeout 600 bash "$root/scripts/gpu/attention.sh" "$bin" "$out/attention" --batch 16 --tokens 1024 --width 768 \
  --heads 12 --dtype bf16 --causal 2>&1 | tee "$out/attention.log" || true
gpu_finish gpt2
