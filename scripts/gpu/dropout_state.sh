#!/usr/bin/env bash
# A model's dropout state (layers/regularization/dropout_state.h: seed, step and device step
# words per model), the Trainer's data-parallel half (train/data_parallel.h) and the norm layers'
# "single_read" key (layers/norm/norm_path.h) on the GPU:
#   1. the [cuda] tests of dropout, attention dropout, the op harness and the run context (two
#      trainers replaying CUDA graphs in turn, one of two micro-batches per step, each give the
#      bits of running alone: their step words are their own);
#   2. bits against a build from before the change: configs/vit_tiny_cpu.json on the GPU with
#      attention, feed-forward and path dropout, one micro-batch and accumulate_steps 2 (each
#      micro-batch's step in a slot of its own), `minidl repro` graphed against eager with
#      BASE_BIN_DIR's and BIN_DIR's minidl: the four final-weight hashes of each must be equal;
#   3. configs/resnet9_bf16.json (no dropout) before and after, graphed against eager (same_bits),
#      and with "norm_single_read": false (now each BatchNorm2d's "single_read" key, set by
#      build_model): the three-launch kernels' bits, before and after;
#      the data-parallel step under NCCL is scripts/gpu/dist.sh's.
#   scripts/gpu/dropout_state.sh BASE_BIN_DIR BIN_DIR OUT_DIR [STEPS]     (STEPS: 30 by default)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base=${1:?usage: dropout_state.sh BASE_BIN_DIR BIN_DIR OUT_DIR [STEPS]}
bin=${2:?usage: dropout_state.sh BASE_BIN_DIR BIN_DIR OUT_DIR [STEPS]}
out=${3:?usage: dropout_state.sh BASE_BIN_DIR BIN_DIR OUT_DIR [STEPS]}
steps=${4:-30}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true

run timeout 300 "$bin/minidl_tests" "[dropout][cuda],[transformer][cuda],[op_harness][cuda],[context][cuda]" 2>&1 |
  tee "$out/cuda_tests.log" | grep -E "passed|failed|FAILED|SKIPPED" | tail -5

drop=(--set model.layers.3.dropout=0.2 --set model.layers.4.dropout=0.1 --set model.layers.4.drop_path=0.1
  --set precision=bf16)
for micro in 1 2; do
  for side in base new; do
    dir=$bin
    [ "$side" = base ] && dir=$base
    name=vit_dropout_acc${micro}_$side
    rm -rf "${out:?}/$name"
    run timeout 300 "$dir/minidl" repro --config "$root/configs/vit_tiny_cpu.json" --device cuda --steps "$steps" \
      "${drop[@]}" --set accumulate_steps=$micro --set cuda_graph=true --set-b cuda_graph=false \
      --output "$out/$name" | tee "$out/$name.log"
  done
  a=$(grep -o 'sha256 [AB] [0-9a-f]*' "$out/vit_dropout_acc${micro}_base.log" | awk '{print $3}' | sort -u)
  b=$(grep -o 'sha256 [AB] [0-9a-f]*' "$out/vit_dropout_acc${micro}_new.log" | awk '{print $3}' | sort -u)
  echo "vit dropout, accumulate_steps $micro: before the change $a, after $b"
  [ -n "$a" ] && [ "$a" = "$b" ] && [ "$(echo "$b" | wc -l)" -eq 1 ] ||
    echo "vit dropout accumulate_steps $micro: graphed, eager, before and after are not all the same bits" >> "$out/FAILED"
done
same_bits "$base" "$bin" resnet9_bf16:$steps
for side in base new; do
  dir=$bin
  [ "$side" = base ] && dir=$base
  run timeout 300 "$dir/minidl" repro --config "$root/configs/resnet9_bf16.json" --device cuda --steps "$steps" \
    --set norm_single_read=false --output "$out/three_launch_$side" | tee "$out/three_launch_$side.log"
done
a=$(grep -o 'sha256 A [0-9a-f]*' "$out/three_launch_base.log")
b=$(grep -o 'sha256 A [0-9a-f]*' "$out/three_launch_new.log")
echo "resnet9_bf16 norm_single_read false: before the change ${a#sha256 A }, after ${b#sha256 A }"
[ -n "$a" ] && [ "$a" = "$b" ] || echo "resnet9_bf16 norm_single_read false: the bits differ from before" >> "$out/FAILED"
gpu_finish dropout_state
