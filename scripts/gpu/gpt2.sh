#!/usr/bin/env bash
# The language-model kernels on the GPU, in one device run:
#   scripts/gpu/gpt2.sh BIN_DIR OUT_DIR
# BIN_DIR holds the built `minidl` and `minidl_tests` (nothing is built here). Runs, keeping every
# log and CSV in OUT_DIR:
#   1. the CUDA tests of the language-model layers against the CPU reference: causal attention on
#      the GEMM, fused and flash paths, flash attention at 1024 tokens of head size 64 (the same
#      bits every run), Embedding's sorted backward, cross-entropy over (B, T, 50257), the token
#      batches of the loader against the CPU's, and `minidl generate`'s tokens on the GPU against
#      the CPU's for the same seed;
#   2. scripts/gpu/attention.sh at GPT-2 124M's shape (batch 16, 1024 tokens, width 768, 12 heads,
#      bf16, causal): `minidl bench attention` beside PyTorch's flash SDPA (is_causal), forward +
#      backward and their ratio (the target: within 1.5x of flash);
#   3. GPT-2 124M training (configs/gpt2_124m.json: bf16, batch 16 x 1024 tokens) on random token
#      files: `minidl bench train` beside the PyTorch twin built from the same JSON
#      (scripts/torch/bench_twin.py, eager and torch.compile), tokens/s and their ratios (the
#      targets: >= 1.3x eager, >= 1.0x compiled), then `minidl repro` of 30 steps, graphed against
#      eager (IDENTICAL).
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
run timeout 300 "$bin/minidl_tests" "[tokens][cuda]" 2>&1 | tee "$out/tests_tokens.log" || true
run timeout 300 "$bin/minidl_tests" "[generate][cuda]" 2>&1 | tee "$out/tests_generate.log" || true

run timeout 600 bash "$root/scripts/gpu/attention.sh" "$bin" "$out/attention" --batch 16 --tokens 1024 --width 768 \
  --heads 12 --dtype bf16 --causal 2>&1 | tee "$out/attention.log" || true
# Random ids stand in for text: a step's time does not depend on which tokens it reads.
python3 - "$out/tokens" <<'PY'
import os, sys
import numpy as np
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
for name, n in (("train.bin", 16 * 1024 * 64 + 1), ("val.bin", 16 * 1024 * 4 + 1)):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, n)
    with open(os.path.join(out, name), "wb") as f:
        f.write(header.tobytes())
        f.write(rng.integers(0, 50257, n, dtype=np.uint16).tobytes())
PY
gpt2=(--config "$root/configs/gpt2_124m.json" --set "data.dir=$out/tokens")
run timeout 600 "$bin/minidl" bench train "${gpt2[@]}" --steps 30 --warmup 5 2>&1 | tee "$out/bench_train.log" || true
run timeout 900 python3 "$root/scripts/torch/bench_twin.py" --config "$root/configs/gpt2_124m.json" --contiguous \
  --steps 30 --warmup 5 --out "$out/twin.json" 2>&1 | tee "$out/twin.log" || true
python3 - "$out/bench_train.log" "$out/twin.json" <<'PY' || true
import json, re, sys
ours = float(re.search(r"tokens:\s+([0-9.]+) tokens/s", open(sys.argv[1]).read()).group(1))
twin = json.load(open(sys.argv[2]))
print(f"GPT-2 124M training, {twin['device']}: minidl {ours:.0f} tokens/s")
for mode, target in (("eager", 1.3), ("compile", 1.0)):
    if mode in twin:
        t = twin[mode]["tokens_per_s"]
        print(f"  PyTorch {mode}: {t:.0f} tokens/s; minidl / PyTorch {ours / t:.3f} (target >= {target})")
PY
run timeout 900 "$bin/minidl" repro "${gpt2[@]}" --steps 30 --device cuda --set-b cuda_graph=false \
  --output "$out/repro" 2>&1 | tee "$out/repro.log" || true
gpu_finish gpt2
