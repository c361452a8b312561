#!/usr/bin/env bash
# The 3-D UNet's layers on the GPU, in one device run.
#   scripts/gpu/unet3d.sh BIN_DIR OUT_DIR
# BIN_DIR holds minidl and minidl_tests built with CUDA. Runs
#  1. minidl_tests "[conv3d],[volume],[volumes],[conv2d],[dice],[op_harness]": Conv3d, ConvTranspose3d
#     (cuDNN's N-d convolutions), MaxPool3d, cat_channels, GroupNorm and BatchNorm on volumes,
#     every dtype and layout, against the CPU and the float64 definition; Conv2d's tests, since
#     Conv2d's cuDNN plans come from the same cache (layers/conv/cudnn_conv_cuda.cu); the Dice
#     loss and counts against the CPU; and the op harness, whose examples include every volume
#     layer in NCDHW and channels_last_3d (CUDA against the CPU, graphed against eager); the
#     volume set's batches (every dtype, both layouts, micro-batches) and the per-voxel
#     cross-entropy against the CPU;
#  2. configs/unet3d.json trained with `minidl train` (bf16 channels_last_3d, CUDA graphs, dice_ce,
#     64^3): the test Dice per epoch and the time to eval.target_dice (summary.json), then `minidl
#     repro` of its first steps twice and graphed against eager (IDENTICAL both: the GPU step is
#     deterministic and its CUDA graph replays the eager step's bits);
#  3. `minidl bench norm --volumes --dtype bf16 --memory-format channels_last`: GroupNorm(8, C) and
#     BatchNorm3d(C) with the fused ReLU at a 128^3 UNet's shapes against the copy roof, beside
#     scripts/bench/torch_norm.py --volumes (PyTorch bf16 channels_last_3d, eager and torch.compile);
#     the targets: GroupNorm forward and backward >= 90% of the copy roof at the large
#     shapes and forward + backward >= 2x PyTorch eager.
# Keeps every output under OUT_DIR. Exits non-zero if the tests, the oracle check or a benchmark
# fail (a missed target is reported, not an error).
set -euo pipefail
bin=${1:?usage: unet3d.sh BIN_DIR OUT_DIR}
out=${2:?usage: unet3d.sh BIN_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
tests="[conv3d],[volume],[volumes],[conv2d],[dice],[op_harness]"
echo "== minidl_tests $tests"
"$bin/minidl_tests" "$tests" 2>&1 | tee "$out/tests.log" | grep -E "test cases|FAILED|failed" || true
grep -q "All tests passed" "$out/tests.log" || { echo "unet3d.sh: the tests failed ($out/tests.log)"; exit 1; }

echo "== minidl train --config configs/unet3d.json"
"$bin/minidl" train --config "$root/configs/unet3d.json" --set output.progress=false --output "$out/unet3d" \
  >"$out/unet3d_train.log" 2>&1 || { tail -20 "$out/unet3d_train.log"; echo "unet3d.sh: training unet3d failed"; exit 1; }
grep -E "^(minidl train|training step|epoch|target reached|done)" "$out/unet3d_train.log"
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print({k: s.get(k) for k in ("test_dice", "test_class_dice", "time_to_target_s", "train_seconds", "images_per_s", "peak_device_bytes")})' \
  "$out/unet3d/summary.json"
echo "== minidl repro --config configs/unet3d.json --steps 5"
"$bin/minidl" repro --config "$root/configs/unet3d.json" --set output.progress=false --steps 5 --output "$out/unet3d_repro" \
  >"$out/unet3d_repro.log" 2>&1 || true
tail -3 "$out/unet3d_repro.log"
grep -q IDENTICAL "$out/unet3d_repro.log" || { echo "unet3d.sh: unet3d's GPU steps are not reproducible"; exit 1; }
echo "== minidl repro --config configs/unet3d.json --steps 5 --set-b cuda_graph=false (graphed against eager)"
"$bin/minidl" repro --config "$root/configs/unet3d.json" --set output.progress=false --steps 5 \
  --set-b cuda_graph=false --output "$out/unet3d_graph" >"$out/unet3d_graph.log" 2>&1 || true
tail -3 "$out/unet3d_graph.log"
grep -q IDENTICAL "$out/unet3d_graph.log" || { echo "unet3d.sh: unet3d's graphed steps differ from eager"; exit 1; }

mode=(--dtype bf16 --channels-last --volumes)
if python3 -c "import torch" 2>/dev/null; then
  echo "== scripts/bench/torch_norm.py ${mode[*]} (eager)"
  python3 "$root/scripts/bench/torch_norm.py" "${mode[@]}" --json "$out/norm_torch_eager.json" | tee "$out/norm_torch_eager.txt"
  echo "== scripts/bench/torch_norm.py ${mode[*]} --compile"
  python3 "$root/scripts/bench/torch_norm.py" "${mode[@]}" --compile --json "$out/norm_torch_compile.json" |
    tee "$out/norm_torch_compile.txt" || echo "unet3d.sh: torch.compile failed here; eager figures only"
  torch_arg=(--torch "$out/norm_torch_eager.json")
else
  echo "unet3d.sh: PyTorch is not importable here: the copy roof only"
  torch_arg=()
fi
echo "== minidl bench norm --volumes --dtype bf16 --memory-format channels_last"
"$bin/minidl" bench norm --volumes --dtype bf16 --memory-format channels_last "${torch_arg[@]}" \
  --json "$out/norm_minidl_volumes.json" | tee "$out/norm_minidl_volumes.txt"

[ -f "$out/norm_torch_compile.json" ] || exit 0
echo "== beside torch.compile (ms, forward + backward; compile/minidl > 1 means minidl is faster)"
python3 - "$out/norm_minidl_volumes.json" "$out/norm_torch_compile.json" <<'PY'
import json, sys

ours = json.load(open(sys.argv[1]))
compiled = {(r["layer"], r["shape"]): r for r in json.load(open(sys.argv[2]))["results"]}
for r in ours["results"]:
    t = compiled.get((r["layer"], r["shape"]))
    if t is None:
        continue
    mine, theirs = r["fwd_ms"] + r["bwd_ms"], t["fwd_ms"] + t["bwd_ms"]
    print(f"{r['layer']:11s} {r['shape']:32s} minidl {mine:8.4f}  torch.compile {theirs:8.4f}  {theirs / mine:5.2f}x")
PY
