#!/usr/bin/env bash
# TensorBoard round trip on the GPU machine: a short ResNet-9 run with log.tensorboard, and a
# resumed one, read back by TensorBoard's own EventAccumulator (scripts/gpu/tensorboard_check.py).
#   scripts/gpu/tensorboard_check.sh BIN_DIR OUT_DIR
# python3 needs tensorboard and numpy. Exits 1 when a stage fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: tensorboard_check.sh BIN_DIR OUT_DIR}
out=${2:?usage: tensorboard_check.sh BIN_DIR OUT_DIR}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
data=$CIFAR10_DIR
rm -rf "$out/tb" "$out/tb_resumed"
common=(--config "$root/configs/resnet9.json" --device cuda --set data.dir=$data --set epochs=4 --set log.tensorboard=true)
run "$bin/minidl" train "${common[@]}" --output "$out/tb" > "$out/tb.log" 2>&1
run python3 "$root/scripts/gpu/tensorboard_check.py" "$out/tb"
# Stopped mid-epoch 3 (steps of an epoch that is redone after the resume), then resumed: the
# SessionLog START of the second file makes TensorBoard drop the first file's events from the
# resume step on, so the reader sees each step once, as in steps.jsonl.
run "$bin/minidl" train "${common[@]}" --output "$out/tb_resumed" --max-steps 230 > "$out/tb_resumed.log" 2>&1 &&
  sleep 1.1 && run "$bin/minidl" train --resume "$out/tb_resumed" >> "$out/tb_resumed.log" 2>&1
run python3 "$root/scripts/gpu/tensorboard_check.py" "$out/tb_resumed"
gpu_finish tensorboard_check.sh
