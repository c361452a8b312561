#!/usr/bin/env bash
# Time to accuracy of the airbench recipes on the GPU, in one device run (docs/perf/airbench.md).
#   scripts/gpu/airbench.sh BIN_DIR OUT_DIR [RUNS]
# BIN_DIR holds minidl and minidl_tests built with CUDA; the data is $CIFAR10_DIR, else decoded into
# OUT_DIR/cifar10 (scripts/gpu/run_stage.sh). Stages, each listed in OUT_DIR/FAILED when it fails
# (the script then exits 1):
#   1. the [cuda] tests of the recipe's kernels (patch moments, lookahead, Muon) against the CPU
#   2. minidl bench accuracy for configs/airbench94.json and configs/airbench94_muon.json in fp32
#      NCHW (named: the configs' "auto" is bf16 channels_last on a GPU), RUNS runs each (default
#      10; seeds 0..RUNS-1) after a warm-up run, JSON in OUT_DIR
#   3. when PyTorch is importable: scripts/torch/airbench.py, the same recipe in PyTorch eager
#      fp32 (TF32 convolutions) on this GPU now, for a same-run ratio
# Expected wall time with 10 runs: about 3-4 minutes (estimate in docs/perf/airbench.md).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: airbench.sh BIN_DIR OUT_DIR [RUNS]}
out=${2:?usage: airbench.sh BIN_DIR OUT_DIR [RUNS]}
runs=${3:-10}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader || true

run timeout 120 "$bin/minidl_tests" "[whitening][cuda],[lookahead][cuda],[muon][cuda]" 2>&1 |
  tee "$out/cuda_tests.log" | grep -E "passed|failed|FAILED|SKIPPED" | tail -5

for cfg in airbench94 airbench94_muon; do
  run timeout 280 "$bin/minidl" bench accuracy --config "$root/configs/$cfg.json" --device cuda --runs "$runs" \
    --set precision=fp32 --set memory_format=contiguous --json "$out/$cfg.json" 2>&1 | tee "$out/$cfg.log"
done

if python3 -c "import torch" 2>/dev/null; then
  run timeout 200 python3 "$root/scripts/torch/airbench.py" --config "$root/configs/airbench94.json" \
    --data "$CIFAR10_DIR" --runs 5 --json "$out/torch_airbench94.json" 2>&1 | tee "$out/torch_airbench94.log" | tail -12
else
  echo "airbench.sh: PyTorch is not importable here: no same-run PyTorch figure (docs/perf/anchors.json has" \
    "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["airbench94"]["fp32"]["seconds"])' \
      "$root/docs/perf/anchors.json") s fp32)"
fi

echo "== summary (time per run: model build, whitening, training and TTA evaluation, data on the GPU)"
python3 - "$out" "$root/docs/perf/anchors.json" <<'PY'
import json, os, sys
out = sys.argv[1]
fp16 = json.load(open(sys.argv[2]))["airbench94"]["fp16_channels_last"]
rows = []
for name in ["airbench94", "airbench94_muon", "torch_airbench94"]:
    p = os.path.join(out, name + ".json")
    if not os.path.exists(p):
        continue
    j = json.load(open(p))
    rows.append((name, j))
    print(f"{name:18s} TTA {j['tta_acc_mean']:6.2f}% (std {j['tta_acc_std']:.2f})  plain {j['test_acc_mean']:6.2f}%  "
          f"time {j['seconds_mean']:.3f} s (std {j['seconds_std']:.3f}) over {len(j['runs'])} runs; "
          f"warm-up {j['warmup_seconds']:.2f} s" + ("" if j.get("same_seed_same_bits", True) else "  SAME SEED DIFFERED"))
ours = dict(rows)
if "airbench94" in ours and "torch_airbench94" in ours:
    r = ours["torch_airbench94"]["seconds_mean"] / ours["airbench94"]["seconds_mean"]
    print(f"airbench94: PyTorch fp32 eager / minidl = {r:.2f}x (above 1: minidl is faster)")
for name, j in rows:
    if name.startswith("airbench"):
        print(f"{name}: against PyTorch eager fp16 airbench94 on this data (anchors: {fp16['seconds']} s, "
              f"{fp16['tta_acc']}%): {fp16['seconds'] / j['seconds_mean']:.2f}x, "
              f"{j['tta_acc_mean'] - fp16['tta_acc']:+.2f} points")
PY
gpu_finish airbench.sh
