#!/usr/bin/env bash
# CUDA graph checks and benchmarks for the lent H200 (docs/perf/cuda_graph.md), in one device run:
# the [graph] tests (nets with biases, lookahead and a part-way freeze among them),
# graphed-against-eager bit identity on ResNet-9, the GroupNorm and LayerNorm configs and
# both airbench configs (steps of several kinds, Muon; minidl repro --set-b cuda_graph=false), the
# same for every shipped config as shipped (bf16 channels_last), a graphed resume,
# the profile's graphed step, and the step's wall and GPU time graphed and eager at batch 512 and
# 128 beside PyTorch eager and torch.compile.
#   scripts/gpu/graph.sh BIN_DIR OUT_DIR     (BIN_DIR: minidl and minidl_tests built here, sm_90)
# The data is $CIFAR10_DIR, else decoded into OUT_DIR/cifar10 (scripts/gpu/run_stage.sh). Exits 1
# when a stage fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: graph.sh BIN_DIR OUT_DIR}
out=${2:?usage: graph.sh BIN_DIR OUT_DIR}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
# Float32 NCHW, named (the configs' "auto" is bf16 channels_last here): the hashes and step times
# of docs/perf/cuda_graph.md and the PyTorch eager float32 beside them.
fp32=(--set precision=fp32 --set memory_format=contiguous)
run timeout 300 "$bin/minidl_tests" "[graph]"
for cfg in resnet9 resnet9_groupnorm resnet9_layernorm airbench94 airbench94_muon; do
  run timeout 200 "$bin/minidl" repro --config "$root/configs/$cfg.json" --device cuda --steps 200 \
    "${fp32[@]}" --set cuda_graph=true --set-b cuda_graph=false --output "$out/repro_$cfg"
done
# Every shipped config as shipped ("auto": bf16 channels_last here), graphed against eager: 30
# steps, the airbench configs their whole run (across their bias freeze at epoch 3), the CIFAR-100
# config on CIFAR-10's images in CIFAR-100's layout (scripts/cifar100_standin.py: its bits, not
# its accuracy).
python3 "$root/scripts/cifar100_standin.py" "$CIFAR10_DIR" "$out/cifar100" >/dev/null
for cfg in "$root"/configs/*.json; do
  name=$(basename "$cfg" .json) steps=30 dir=$CIFAR10_DIR
  case $name in airbench*) steps=0 ;; esac
  grep -q '"format": *"cifar100"' "$cfg" && dir=$out/cifar100
  run timeout 120 "$bin/minidl" repro --config "$cfg" --device cuda --steps $steps --set "data.dir=$dir" \
    --set cuda_graph=true --set-b cuda_graph=false --output "$out/repro_auto_$name"
done
run timeout 100 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda --set epochs=4 "${fp32[@]}" \
  --set cuda_graph=true --output "$out/full"
run timeout 100 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda --set epochs=4 "${fp32[@]}" \
  --set cuda_graph=true --max-steps 194 --output "$out/resumed"
run timeout 100 "$bin/minidl" train --resume "$out/resumed"
run timeout 100 "$bin/minidl" profile --config "$root/configs/resnet9.json" --device cuda --steps 10 "${fp32[@]}" \
  --output "$out/profile" 2>&1 |
  grep -E "profile:|step:|graphed step"
if cmp -s "$out/full/steps.jsonl" "$out/resumed/steps.jsonl" &&
   cmp -s "$out/full/model.safetensors" "$out/resumed/model.safetensors"; then
  echo "graphed resume: steps and weights identical"
else
  echo "graphed resume: DIFFERENT"; echo "graphed resume differs" >> "$out/FAILED"
fi
for bs in 512 128; do
  for g in true false; do
    run timeout 120 "$bin/minidl" bench train --config "$root/configs/resnet9.json" --device cuda --steps 50 \
      "${fp32[@]}" --set batch_size=$bs --set cuda_graph=$g 2>&1 | tee -a "$out/bench.log"
  done
  for mode in none reduce-overhead; do
    run timeout 300 python3 "$root/scripts/torch/resnet9.py" --config "$root/configs/resnet9.json" \
      --batch-size $bs --time-steps 50 --benchmark --compile $mode --out "$out/torch_${bs}_${mode}.json" \
      2>&1 | grep -E "^time:" | sed "s/^/torch $bs $mode: /"
  done
done
gpu_finish graph.sh
