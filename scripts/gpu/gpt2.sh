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
#      eager (IDENTICAL);
#   4. with --llmc BIN (llm.c's train_gpt2cu built for this GPU): llm.c training the same model
#      from scratch (-e d12) on the same files at the same batch, its tokens/s beside minidl's;
#   5. with --text DIR (token files of a real text, as scripts/corpus-kjv.sh and
#      scripts/tokenize.sh make): for each of --seeds N seeds (default 3), minidl trains 3 epochs of
#      DIR, then the PyTorch twin (scripts/torch/train_tokens.py) trains as many steps on the same
#      files with the same seed number; their val.bin losses per seed, the means and spreads, and the
#      ratio of the means (the target: within 1%; one seed's loss moves by about as much at this
#      budget); with --tokenizer DIR (GPT-2's encoder.json and vocab.bpe), `minidl generate` then
#      continues a prompt with seed 0's run.
# --no-tests leaves out stage 1 (a run that has just passed the [cuda] tests).
# Exits non-zero if a stage fails.
set -euo pipefail
usage="usage: gpt2.sh BIN_DIR OUT_DIR [--llmc BIN] [--text DIR [--tokenizer DIR] [--seeds N]] [--no-tests]"
bin=${1:?$usage}
out_dir=${2:?$usage}
shift 2
llmc="" text="" tokenizer="" tests=1 seeds=3
while [ $# -gt 0 ]; do
  case $1 in
    --llmc) llmc=${2:?$usage}; shift 2 ;;
    --text) text=$(cd "${2:?$usage}" && pwd); shift 2 ;;
    --tokenizer) tokenizer=$(cd "${2:?$usage}" && pwd); shift 2 ;;
    --seeds) seeds=${2:?$usage}; shift 2 ;;
    --no-tests) tests=0; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out_dir"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
git -C "$root" log -1 --format='commit %h %s' 2>/dev/null || true

if [ "$tests" = 1 ]; then
  for tag in language_model transformer tokens generate; do
    run timeout 300 "$bin/minidl_tests" "[$tag][cuda]" 2>&1 | tee "$out/tests_$tag.log" || true
  done
fi

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
if [ -n "$llmc" ]; then
  (cd "$out" && run timeout 300 "$llmc" -e d12 -i "$out/tokens/train.bin" -j "$out/tokens/val.bin" -b 16 -t 1024 -x 40 \
    -v 1000 -s 1000 -r 0 -l 0.0006 -u 10 2>&1 | tee "$out/llmc.log") || true
  python3 - "$out/bench_train.log" "$out/llmc.log" <<'PY' || true
import re, sys
ours = float(re.search(r"tokens:\s+([0-9.]+) tokens/s", open(sys.argv[1]).read()).group(1))
theirs = float(re.findall(r"([0-9.]+) tok/s", open(sys.argv[2]).read())[-1])
print(f"llm.c train_gpt2cu: {theirs:.0f} tokens/s (its last step's average); minidl / llm.c {ours / theirs:.3f} (target >= 1.0)")
PY
fi
if [ -n "$text" ]; then
  for seed in $(seq 0 $((seeds - 1))); do
    run timeout 600 "$bin/minidl" train --config "$root/configs/gpt2_124m.json" --set "data.dir=$text" --set epochs=3 \
      --set seed=$seed --set output.progress=false --output "$out/text_run_$seed" 2>&1 | tee "$out/text_minidl_$seed.log" || true
    steps=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['steps'])" "$out/text_run_$seed/summary.json")
    run timeout 600 python3 "$root/scripts/torch/train_tokens.py" --config "$root/configs/gpt2_124m.json" --data "$text" \
      --steps "$steps" --seed $seed --out "$out/text_twin_$seed.json" 2>&1 | tee "$out/text_twin_$seed.log" || true
  done
  python3 - "$out" "$seeds" <<'PY' || true
import json, statistics, sys
out, seeds = sys.argv[1], int(sys.argv[2])
ours = [json.load(open(f"{out}/text_run_{s}/summary.json")) for s in range(seeds)]
twin = [json.load(open(f"{out}/text_twin_{s}.json"))["val_loss"] for s in range(seeds)]
mine = [o["test_loss"] for o in ours]
for s in range(seeds):
    print(f"seed {s}: val.bin loss minidl {mine[s]:.4f}, PyTorch {twin[s]:.4f}")
spread = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
ratio = statistics.mean(mine) / statistics.mean(twin)
print(f"val.bin loss after {ours[0]['steps']} steps, mean of {seeds} seeds: minidl {statistics.mean(mine):.4f} "
      f"(sd {spread(mine):.4f}), PyTorch {statistics.mean(twin):.4f} (sd {spread(twin):.4f}); minidl / PyTorch "
      f"{ratio:.4f} (target within 1%: {'met' if abs(ratio - 1) <= 0.01 else 'missed'})")
PY
  if [ -n "$tokenizer" ]; then
    run timeout 120 "$bin/minidl" generate --run "$out/text_run_0" --tokenizer "$tokenizer" --prompt "And God said" \
      --max-new-tokens 60 --temperature 0.8 --top-k 40 --seed 1 2>&1 | tee "$out/text_generate.log" || true
  fi
fi
gpu_finish gpt2
