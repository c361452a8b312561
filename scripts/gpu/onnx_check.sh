#!/usr/bin/env bash
# ONNX round trip on the GPU machine: trains each ResNet-9 config, exports it, and checks
# onnxruntime's logits and test accuracy against minidl's (scripts/gpu/onnx_check.py).
#   scripts/gpu/onnx_check.sh BIN_DIR OUT_DIR [CONFIGS]   (default: resnet9 resnet9_groupnorm resnet9_layernorm)
# BIN_DIR holds a minidl built with CUDA; python3 needs onnx, onnxruntime and numpy; the data is
# $CIFAR10_DIR, else decoded into OUT_DIR/cifar10 (scripts/gpu/run_stage.sh). Exits 1 when any
# stage fails; prints one summary line per config at the end. The runs train in float32 NCHW,
# named (the configs' "auto" is bf16 channels_last on the GPU): the exported graph and `minidl
# export --logits` evaluate in float32, and onnx_check.py holds that evaluation equal to the run's
# own metrics.jsonl accuracy.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:?usage: onnx_check.sh BIN_DIR OUT_DIR [CONFIGS]}
out=${2:?usage: onnx_check.sh BIN_DIR OUT_DIR [CONFIGS]}
configs=${3:-resnet9 resnet9_groupnorm resnet9_layernorm}
source "$root/scripts/gpu/run_stage.sh"
gpu_setup "$out"
data=$CIFAR10_DIR
summary=()
for cfg in $configs; do
  dir=$out/$cfg
  rm -rf "$dir"
  if run "$bin/minidl" train --config "$root/configs/$cfg.json" --device cuda --set data.dir="$data" \
       --set precision=fp32 --set memory_format=contiguous --output "$dir" \
       > "$out/$cfg.train.log" 2>&1 &&
     run "$bin/minidl" export --run "$dir" --onnx "$out/$cfg.onnx" --logits "$out/$cfg.cuda.ref" --device cuda \
       --data-dir "$data" &&
     run "$bin/minidl" export --run "$dir" --onnx "$out/$cfg.onnx" --logits "$out/$cfg.cpu.ref" --device cpu \
       --data-dir "$data" &&
     run python3 "$root/scripts/gpu/onnx_check.py" "$out/$cfg.onnx" --gpu-ref "$out/$cfg.cuda.ref" \
       --cpu-ref "$out/$cfg.cpu.ref" --metrics "$dir/metrics.jsonl" | tee "$out/$cfg.check.log"; then
    summary+=("$cfg: $(tail -2 "$out/$cfg.check.log" | head -1)")
  else
    summary+=("$cfg: FAILED (logs in $out)")
    tail -3 "$out/$cfg.train.log"
  fi
done
echo "== onnx_check.sh summary"
printf '%s\n' "${summary[@]}"
gpu_finish onnx_check.sh
