#!/usr/bin/env bash
# CUDA graph checks and benchmarks for the lent H200 (docs/perf/cuda_graph.md), in one device run:
# the [graph] tests (nets with biases, lookahead and a part-way freeze among them),
# graphed-against-eager bit identity on ResNet-9, the GroupNorm and LayerNorm configs and
# both airbench configs (steps of several kinds, Muon; minidl repro --set-b cuda_graph=false), a graphed resume,
# the profile's graphed step, and the step's wall and GPU time graphed and eager at batch 512 and
# 128 beside PyTorch eager and torch.compile.
#   scripts/gpu/graph.sh BIN_DIR OUT_DIR     (BIN_DIR: minidl and minidl_tests built here, sm_90)
# Needs CIFAR10_DIR and MINIDL_DATA_DIR (check_all.sh sets them). Exits 1 when a stage fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: graph.sh BIN_DIR OUT_DIR}
out=${2:?usage: graph.sh BIN_DIR OUT_DIR}
mkdir -p "$out"
rm -f "$out/FAILED"
source "$root/scripts/gpu/run_stage.sh"
run timeout 300 "$bin/minidl_tests" "[graph]"
for cfg in resnet9 resnet9_groupnorm resnet9_layernorm airbench94 airbench94_muon; do
  run timeout 200 "$bin/minidl" repro --config "$root/configs/$cfg.json" --device cuda --steps 200 \
    --set cuda_graph=true --set-b cuda_graph=false --output "/tmp/graph_repro_$cfg"
done
run timeout 100 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda --set epochs=4 \
  --set cuda_graph=true --output /tmp/graph_full
run timeout 100 "$bin/minidl" train --config "$root/configs/resnet9.json" --device cuda --set epochs=4 \
  --set cuda_graph=true --max-steps 194 --output /tmp/graph_half
run timeout 100 "$bin/minidl" train --resume /tmp/graph_half
run timeout 100 "$bin/minidl" profile --config "$root/configs/resnet9.json" --device cuda --steps 10 --output /tmp/graph_prof 2>&1 |
  grep -E "profile:|step:|graphed step"
if cmp -s /tmp/graph_full/steps.jsonl /tmp/graph_half/steps.jsonl &&
   cmp -s /tmp/graph_full/model.safetensors /tmp/graph_half/model.safetensors; then
  echo "graphed resume: steps and weights identical"
else
  echo "graphed resume: DIFFERENT"; echo "graphed resume differs" >> "$out/FAILED"
fi
for bs in 512 128; do
  for g in true false; do
    run timeout 120 "$bin/minidl" bench train --config "$root/configs/resnet9.json" --device cuda --steps 50 \
      --set batch_size=$bs --set cuda_graph=$g 2>&1 | tee -a "$out/bench.log"
  done
  for mode in none reduce-overhead; do
    run timeout 300 python3 "$root/scripts/torch/resnet9.py" --config "$root/configs/resnet9.json" \
      --batch-size $bs --time-steps 50 --benchmark --compile $mode --out "$out/torch_${bs}_${mode}.json" \
      2>&1 | grep -E "^time:" | sed "s/^/torch $bs $mode: /"
  done
done
if [ -s "$out/FAILED" ]; then
  echo "graph.sh: failed:"
  cat "$out/FAILED"
  exit 1
fi
